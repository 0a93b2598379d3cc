"""``Tuner(trainer)``: finds a batch size or a learning rate before training, as Lightning's Tuner does."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from fulmen.core.datamodule import LightningDataModule
from fulmen.core.hooks import Callback as Callback
from fulmen.runtime.data import split_datamodule
from fulmen.tuner.batch_size_scaling import scale_batch_size
from fulmen.tuner.lr_finder import LRFinder, lr_find
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.loader_rebuild import rebuild_dataloader
from fulmen.utilities.model_helpers import is_overridden
from fulmen.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer


class Tuner:
    """Tuning for a ``Trainer``: ``scale_batch_size`` and ``lr_find``. The trainer itself does not run: each
    trial runs in a copy of its configuration, and the module's weights are put back afterwards."""

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer

    def scale_batch_size(
        self,
        model: LightningModule,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: LightningDataModule | None = None,
        method: str = "fit",
        mode: str = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
        margin: float = 0.05,
        max_val: int | None = 8192,
    ) -> int | None:
        """The largest batch size that runs ``steps_per_trial`` steps without running out of memory.

        It is written to every place ``batch_arg_name`` lives (module, ``module.hparams``, data module, its
        ``hparams``). With dataloaders passed here, they are rebuilt with each candidate size; build yours
        with the returned size (or add the ``BatchSizeFinder`` callback to ``fit``, which swaps the loader).
        Under ``fast_dev_run`` nothing is searched: it warns and returns ``None``.
        """
        if _skipped(self._trainer, "batch size scaler"):
            return None
        arguments = _arguments(locals())
        size = scale_batch_size(self._trainer, **arguments)
        _show_tuned_data(self._trainer, arguments, size)
        return size

    def lr_find(
        self,
        model: LightningModule,
        train_dataloaders: Any = None,
        val_dataloaders: Any = None,
        dataloaders: Any = None,
        datamodule: LightningDataModule | None = None,
        method: str = "fit",
        min_lr: float = 1e-8,
        max_lr: float = 1,
        num_training: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> LRFinder | None:
        """The learning-rate range test: ``num_training`` steps with the learning rate growing from ``min_lr``
        to ``max_lr`` ('exponential' or 'linear'), stopped early once the loss exceeds
        ``early_stop_threshold`` times its best. ``update_attr`` writes the suggestion to ``attr_name`` (or
        ``lr`` / ``learning_rate``) on the module or in its hparams. Returns the finder: ``results``,
        ``suggestion()``, ``plot(suggest=True)``. Under ``fast_dev_run`` it warns and returns ``None``."""
        if _skipped(self._trainer, "learning rate finder"):
            return None
        return lr_find(self._trainer, **_arguments(locals()))


_HOOKS = {"train": "train_dataloader", "val": "val_dataloader", "test": "test_dataloader",
          "predict": "predict_dataloader"}  # fmt: skip


def tune_as_flags_ask(
    trainer: Trainer, model: LightningModule, loaders: dict[str, Any], scale_batch_size_kwargs: dict[str, Any],
    lr_find_kwargs: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """``trainer.tune`` (1.x): the searches ``Trainer(auto_scale_batch_size=..., auto_lr_find=...)`` asked for,
    batch size first (the learning rate found depends on it)."""
    tuner = Tuner(trainer)
    result: dict[str, Any] = {"scale_batch_size": None, "lr_find": None}
    if trainer.auto_scale_batch_size:
        options = {"mode": trainer.auto_scale_batch_size, **scale_batch_size_kwargs}
        result["scale_batch_size"] = tuner.scale_batch_size(model, **loaders, **options)
    if trainer.auto_lr_find:
        options = {"attr_name": trainer.auto_lr_find} if isinstance(trainer.auto_lr_find, str) else {}
        result["lr_find"] = tuner.lr_find(model, **loaders, **{**options, **lr_find_kwargs})
    return result


def _show_tuned_data(trainer: Trainer, arguments: dict[str, Any], size: int) -> None:
    """As Lightning leaves a trainer after the search: ``trainer.train_dataloader`` (and the other loaders of
    ``method``) built with the size found, and ``trainer.datamodule`` the data module searched with. A run
    replaces them with the loaders it loads."""
    method, model, datamodule = arguments["method"], arguments["model"], arguments["datamodule"]
    stages = ("train", "val") if method == "fit" else ({"validate": "val"}.get(method, method),)
    passed = {"train": arguments["train_dataloaders"], "val": arguments["val_dataloaders"]}
    searched = "train" if method == "fit" else stages[0]
    shown: dict[str, Any] = {}
    for stage in stages:
        loader = passed.get(stage) if method == "fit" else arguments["dataloaders"]
        if loader is not None:
            shown[stage] = rebuild_dataloader(loader, batch_size=size) if stage == searched else loader
            continue
        hook = _HOOKS[stage]
        owner = next((o for o in (datamodule, model) if o is not None and is_overridden(hook, o)), None)
        # a hook that needs a running trainer cannot be called here: nothing to show for that stage
        with contextlib.suppress(Exception):
            if owner is not None:
                shown[stage] = getattr(owner, hook)()  # reads the batch size just written
    context = trainer.run_context
    if datamodule is not None:
        context.datamodule = datamodule
        datamodule.trainer = trainer
    context.data.show(shown)


def _skipped(trainer: Trainer, search: str) -> bool:
    """``fast_dev_run`` is a smoke test of the loop: a search (hundreds of steps) would defeat it."""
    if trainer.fast_dev_run:
        rank_zero_warn(f"Skipping {search} since `fast_dev_run` is enabled.")
        return True
    return False


def _arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """A Tuner method's arguments for the search it runs: a data module passed as ``train_dataloaders`` moved
    to ``datamodule`` (as ``fit`` accepts it), a compiled module unwrapped."""
    arguments = {k: v for k, v in arguments.items() if k != "self"}
    arguments["train_dataloaders"], arguments["datamodule"] = split_datamodule(
        arguments["train_dataloaders"], arguments["datamodule"]
    )
    arguments["model"] = _unwrap(arguments["model"])
    return arguments


def _unwrap(model: Any) -> LightningModule:
    from fulmen.core.module import LightningModule, unwrap_compiled

    model = unwrap_compiled(model)
    if not isinstance(model, LightningModule):
        raise TypeError(f"The tuner needs a LightningModule, got {type(model).__name__}.")
    return model
