"""``LightningDataModule``: the data side of a run (download, split, dataloaders) in one object."""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from fulmen.core.hooks import DataHooks
from fulmen.core.mixins import HyperparametersMixin
from fulmen.core.saving import load_from_checkpoint, restricted_classmethod
from fulmen.utilities.apply_func import apply_to_collection as apply_to_collection
from fulmen.utilities.model_helpers import defines_default_hooks

if TYPE_CHECKING:
    from fulmen.trainer.trainer import Trainer


@defines_default_hooks
class LightningDataModule(DataHooks, HyperparametersMixin):
    """Implement ``prepare_data``, ``setup(stage)`` and the ``*_dataloader`` methods you need."""

    name: str | None = None
    # where the data module's hyperparameters live in a checkpoint (Lightning's keys)
    CHECKPOINT_HYPER_PARAMS_KEY = "datamodule_hyper_parameters"
    CHECKPOINT_HYPER_PARAMS_NAME = "datamodule_hparams_name"
    CHECKPOINT_HYPER_PARAMS_TYPE = "datamodule_hparams_type"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # arguments are accepted and ignored: a subclass that forwards its own (`super().__init__(*args,
        # **kwargs)`, as mixin-style classes do) must not break on this base class
        super().__init__()
        self.trainer: Trainer | None = None

    @restricted_classmethod
    def load_from_checkpoint(
        cls: Any,
        checkpoint_path: str | Path,
        map_location: Any = None,
        hparams_file: str | Path | None = None,
        weights_only: bool | None = None,
        **kwargs: Any,
    ) -> Any:
        """Build the class from a checkpoint: its stored hyperparameters (``**kwargs`` override them) and its ``state_dict``.

        Loads with ``weights_only=True`` (no code from the file runs); pass ``weights_only=False`` only for
        files you trust. Objects among the stored hyperparameters (a module, a function ... as
        ``save_hyperparameters`` recorded them) need that, or their classes registered with
        ``torch.serialization.add_safe_globals``: otherwise the load is refused, naming them.
        """
        return load_from_checkpoint(
            cls, checkpoint_path, map_location=map_location, hparams_file=hparams_file,
            weights_only=weights_only, **kwargs,
        )  # fmt: skip

    @classmethod
    def from_datasets(
        cls,
        train_dataset: Dataset | Iterable[Dataset] | None = None,
        val_dataset: Dataset | Iterable[Dataset] | None = None,
        test_dataset: Dataset | Iterable[Dataset] | None = None,
        predict_dataset: Dataset | Iterable[Dataset] | None = None,
        batch_size: int = 1,
        num_workers: int = 0,
        **datamodule_kwargs: Any,
    ) -> LightningDataModule:
        """A data module whose dataloaders wrap the given datasets (shuffled for training only; pinned memory
        where a GPU exists). ``batch_size`` / ``num_workers`` also go to ``__init__`` when it takes them, with
        ``datamodule_kwargs``."""

        def loader(ds: Dataset, shuffle: bool) -> DataLoader:
            shuffle &= not isinstance(ds, IterableDataset)
            return DataLoader(ds, batch_size=batch_size, shuffle=shuffle, num_workers=num_workers,
                              pin_memory=torch.cuda.is_available())  # fmt: skip

        def many(ds: Any, shuffle: bool) -> Any:
            if isinstance(ds, dict):
                return {k: loader(v, shuffle) for k, v in ds.items()}
            if isinstance(ds, (list, tuple)):
                return [loader(v, shuffle) for v in ds]
            return loader(ds, shuffle)

        params = inspect.signature(cls.__init__).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        special = {"batch_size": batch_size, "num_workers": num_workers}
        datamodule = cls(**{k: v for k, v in special.items() if takes_any or k in params}, **datamodule_kwargs)
        if train_dataset is not None:
            datamodule.train_dataloader = lambda: many(train_dataset, True)  # type: ignore[method-assign]
        if val_dataset is not None:
            datamodule.val_dataloader = lambda: many(val_dataset, False)  # type: ignore[method-assign]
        if test_dataset is not None:
            datamodule.test_dataloader = lambda: many(test_dataset, False)  # type: ignore[method-assign]
        if predict_dataset is not None:
            datamodule.predict_dataloader = lambda: many(predict_dataset, False)  # type: ignore[method-assign]
        return datamodule

    def __str__(self) -> str:
        """The dataset size behind each dataloader the module gives now (``None`` where it gives none)."""
        lines = []
        for title, hook in (("Train", "train_dataloader"), ("Validation", "val_dataloader"),
                            ("Test", "test_dataloader"), ("Predict", "predict_dataloader")):  # fmt: skip
            try:
                loaders: Any = getattr(self, hook)()
            except Exception:  # not implemented, or its data not set up yet
                loaders = None
            lines.append(f"{{{title} dataloader: {_describe_loaders(loaders)}}}")
        return os.linesep.join(lines)

    def state_dict(self) -> dict[str, Any]:
        """State to store in checkpoints; override together with :meth:`load_state_dict`."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None: ...
    def on_exception(self, exception: BaseException) -> None: ...


def _describe_loaders(loaders: Any) -> str:
    def size(loader: Any) -> str:
        dataset = getattr(loader, "dataset", loader)
        try:
            return f"size={len(dataset)}"
        except TypeError:
            return "size=NA"

    if loaders is None:
        return "None"
    if isinstance(loaders, Mapping):
        loaders = list(loaders.values())
    if isinstance(loaders, (list, tuple)):
        return " ; ".join(f"{i}. {size(dl)}" for i, dl in enumerate(loaders, start=1))
    return size(loaders)
