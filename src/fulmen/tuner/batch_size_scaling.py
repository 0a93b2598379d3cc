"""The batch-size finder: the largest batch size that trains without running out of memory.

Each trial trains ``steps_per_trial`` steps (and validates as many batches) with a candidate batch size, in a
*trial trainer*: a copy of the user's Trainer configuration without loggers, checkpoints, progress bar or
callbacks. The user's trainer is never run, so its counters, callbacks, loggers and limits stay as they
were; the module's weights, the random generators and ``module.trainer`` are put back after the search.
Under DDP every process runs the trials on its own device, without gradient communication (an
out-of-memory error in one process would otherwise leave the others waiting in a collective), and the
processes agree on each trial's outcome with an all-reduce, so they always pick the same size.
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from fulmen.tuner.trials import field_owners, preserved, run_stage, set_field, trial_trainer
from fulmen.utilities.data import has_len
from fulmen.utilities.exceptions import InvalidValueError, MisconfigurationException
from fulmen.utilities.loader_rebuild import rebuild_dataloader
from fulmen.utilities.memory import garbage_collection_cuda, is_oom_error
from fulmen.utilities.parsing import lightning_getattr as lightning_getattr
from fulmen.utilities.parsing import lightning_setattr as lightning_setattr
from fulmen.utilities.rank_zero import rank_zero_info
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn

if TYPE_CHECKING:
    from fulmen.core.datamodule import LightningDataModule
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer

_MODES = ("power", "binsearch")
_METHODS = ("fit", "validate", "test", "predict")


def free_memory(after_oom: bool) -> None:
    """Release the last trial's memory before the next: a full garbage collection (the trial's trainer and
    tensors sit in reference cycles) then CUDA's cache. On the CPU only after an out-of-memory trial: a full
    collection of a large process costs far more than the small objects a successful trial leaves."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        garbage_collection_cuda()
    elif after_oom:
        gc.collect()


@dataclass
class BatchSizeSearch:
    """What a search tried: (batch size, fitted) in order; ``result`` is the size chosen."""

    trials: list[tuple[int, bool]] = field(default_factory=list)
    result: int | None = None


def check_arguments(mode: str, method: str, steps_per_trial: int, init_val: int, max_trials: int,
                    margin: float, max_val: int | None) -> None:  # fmt: skip
    """Every argument, checked before the first trial."""
    if mode not in _MODES:
        raise InvalidValueError(f"mode={mode!r} is not a scaling mode: it should be either of 'power' or 'binsearch'.")
    if method not in _METHODS:
        raise InvalidValueError(f"method {method!r} is invalid. Use one of {_METHODS}.")
    for name, value, minimum in (("steps_per_trial", steps_per_trial, 1), ("init_val", init_val, 1),
                                 ("max_trials", max_trials, 0)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise MisconfigurationException(f"{name}={value!r} must be an int >= {minimum}.")
    if not isinstance(margin, (int, float)) or not 0 <= margin < 1:
        raise MisconfigurationException(f"margin={margin!r} must be a float in [0, 1), e.g. 0.05.")
    if max_val is not None and (
        isinstance(max_val, bool) or not isinstance(max_val, int) or max_val < init_val
    ):
        raise MisconfigurationException(f"max_val={max_val!r} must be an int >= init_val ({init_val}).")


def _get(owner: Any, name: str) -> Any:
    return owner[name] if isinstance(owner, dict) else getattr(owner, name)


# -- the search ---------------------------------------------------------------------------------------------
def search(
    run_trial: Callable[[int], bool], mode: str, init_val: int, max_trials: int, margin: float, limit: int,
    limit_is_dataset: bool = False,
) -> BatchSizeSearch:
    """'power': double from ``init_val`` until a trial runs out of memory, the limit or ``max_trials``.
    'binsearch': the same doubling, then bisection between the last fit and the first failure; its result
    has ``margin`` taken off (room for memory that varies between batches). When ``init_val`` itself runs
    out of memory, the size is halved until one fits; ``max_trials=0`` runs nothing and keeps ``init_val``.
    Every trial counts against ``max_trials``; ``limit_is_dataset``: the limit is the dataset's length (said
    when reached)."""
    found = BatchSizeSearch()

    def trial(size: int) -> bool:
        fitted = run_trial(size)
        found.trials.append((size, fitted))
        return fitted

    size = min(init_val, limit)
    if max_trials == 0:
        found.result = size
        return found
    best: int | None = None
    failed: int | None = None
    while len(found.trials) < max_trials:
        if not trial(size):
            failed = size
            if best is not None or size == 1:
                break
            size //= 2  # even init_val is too large: come down until one fits
            continue
        best = size
        if size >= limit or failed is not None:
            if size >= limit and limit_is_dataset:
                rank_zero_info(
                    f"The batch size {size} is greater or equal than the length of your dataset per process: the "
                    "search stops there."
                )
            break  # at the limit, or the first size that fits after coming down
        following = min(size * 2, limit)
        if len(found.trials) < max_trials:
            rank_zero_info(f"Batch size {size} succeeded, trying batch size {following}.")
        size = following
    if best is None:
        raise MisconfigurationException(
            f"batch size {size} runs out of memory (tried {', '.join(str(s) for s, _ in found.trials)}). Start "
            "lower (init_val=1), allow more trials, or make the model or inputs smaller."
        )
    if mode == "binsearch":
        if failed is not None and failed > best:
            low, high = best, failed
            while high - low > 1 and len(found.trials) < max_trials:
                middle = (low + high) // 2
                if trial(middle):
                    low = middle
                else:
                    high = middle
            best = low
        best = max(1, int(best * (1 - margin)))
    found.result = best
    return found


def scale_batch_size(
    trainer: Trainer,
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
    on_result: Callable[[int, dict[str, Any]], None] | None = None,
) -> int:
    """Find the batch size; write it to every place ``batch_arg_name`` lives and return it. ``on_result``
    receives it with the rebuilt dataloaders (by argument name) when dataloaders were passed."""
    check_arguments(mode, method, steps_per_trial, init_val, max_trials, margin, max_val)
    loaders = {"train_dataloaders": train_dataloaders, "val_dataloaders": val_dataloaders,
               "dataloaders": dataloaders}  # fmt: skip
    loaders = {k: v for k, v in loaders.items() if v is not None}
    _check_loaders(method, loaders)
    searched_loader = _searched_loader(model, datamodule, method, loaders)
    owners = field_owners(model, datamodule, batch_arg_name)
    # the loaders whose batch size is searched: the training loader for fit, the evaluated one otherwise
    searched = "train_dataloaders" if method == "fit" else "dataloaders"
    if not owners and searched not in loaders:
        raise MisconfigurationException(
            f"The batch size finder found no `{batch_arg_name}`: not as an attribute nor in hparams of the module "
            "or the data module, and no dataloaders were passed. Add `self.batch_size` (read by your "
            "*_dataloader() hooks) or pass batch_arg_name='<your field>'."
        )
    limit, per_process = _size_limit(trainer, searched_loader, max_val)

    trainer.strategy.prepare_for_tuning()  # the process group the processes agree through (ddp_spawn: not here)
    previous_values = [(owner, name, _get(owner, name)) for owner, name in owners]

    with preserved(model, datamodule) as weights:
        run_trial = _trial_runner(
            trainer, model, datamodule, method, steps_per_trial, loaders, searched, owners, weights
        )
        try:
            found = search(run_trial, mode, init_val, max_trials, margin, limit, limit == per_process)
        except BaseException:
            for owner, name, value in previous_values:
                set_field(owner, name, value)
            raise
    return _apply_result(found, mode, owners, loaders, searched, on_result)


def _searched_loader(model: LightningModule, datamodule: Any, method: str, loaders: dict[str, Any]) -> Any:
    """The loader whose dataset bounds the search: the one passed for ``method``, else its hook's."""
    searched_loader = loaders.get("train_dataloaders" if method == "fit" else "dataloaders")
    if searched_loader is None:  # the module's (or data module's) own loader for that method
        searched_loader = _hook_loader(model, datamodule, method)
        if method != "fit":  # several evaluation loaders: which one's batch size? (training ones are combined)
            _check_loaders(method, {"dataloaders": searched_loader})
    return searched_loader


def _size_limit(trainer: Trainer, searched_loader: Any, max_val: int | None) -> tuple[int, int | None]:
    """(the largest size to try, each process's share of the dataset when its length is known): ``max_val``,
    lowered to that share (a larger batch holds no more samples)."""
    limit = max_val if max_val is not None else 2**31
    dataset_size = _dataset_size(searched_loader)
    per_process = None
    if dataset_size is not None:
        per_process = max(1, math.ceil(dataset_size / max(1, trainer.strategy.world_size)))
        limit = min(limit, per_process)
    return limit, per_process


def _trial_runner(
    trainer: Trainer, model: LightningModule, datamodule: LightningDataModule | None, method: str,
    steps_per_trial: int, loaders: dict[str, Any], searched: str, owners: list[tuple[Any, str]],
    weights: dict[str, Any],
) -> Callable[[int], bool]:
    """One trial for ``search``: ``steps_per_trial`` steps of ``method`` at a size, from the saved ``weights``,
    in a trial trainer; True when every process fitted it in memory."""
    outer = trainer.strategy

    def run_trial(size: int) -> bool:
        for owner, name in owners:
            set_field(owner, name, size)
        trial_loaders = {k: rebuild_dataloader(v, batch_size=size) if k == searched else v
                         for k, v in loaders.items()}  # fmt: skip
        model.load_state_dict(weights)
        try:
            run_stage(trial_trainer(trainer, steps_per_trial), method, model, datamodule, trial_loaders)
            fitted = True
        except BaseException as error:
            if not is_oom_error(error):
                outer.on_exception(error)  # under DDP: the others stop waiting for this process's vote
                raise
            fitted = False
        free_memory(after_oom=not fitted)
        agreed = outer.reduce_boolean_decision(fitted, all=True)  # every process fitted, or none counts
        rank_zero_info(f"Batch size {size}: {'fits' if agreed else 'out of memory'}.")
        return agreed

    return run_trial


def _apply_result(
    found: BatchSizeSearch, mode: str, owners: list[tuple[Any, str]], loaders: dict[str, Any], searched: str,
    on_result: Callable[[int, dict[str, Any]], None] | None,
) -> int:
    """The size found, written to every field that holds it and given to ``on_result`` with the searched loader
    rebuilt at that size (when one was passed); returned."""
    assert found.result is not None
    for owner, name in owners:
        set_field(owner, name, found.result)
    if on_result is not None:
        on_result(found.result, {searched: rebuild_dataloader(loaders[searched], batch_size=found.result)}
                  if searched in loaders else {})  # fmt: skip
    tried = ", ".join(f"{size}{'' if fitted else ' (OOM)'}" for size, fitted in found.trials)
    rank_zero_info(f"Batch size finder ({mode}): tried {tried}; chose {found.result}.")
    return found.result


def _check_loaders(method: str, loaders: dict[str, Any]) -> None:
    """The loaders passed must be those ``method`` takes; the searched one must be a single loader."""
    if method == "fit" and "dataloaders" in loaders:
        raise MisconfigurationException(
            "scale_batch_size(method='fit', dataloaders=...): fit trains on `train_dataloaders`; please consider "
            "setting `train_dataloaders` and `val_dataloaders` instead."
        )
    if method != "fit" and ({"train_dataloaders", "val_dataloaders"} & loaders.keys()):
        raise MisconfigurationException(
            f"scale_batch_size(method={method!r}) evaluates `dataloaders`, not train_dataloaders / "
            "val_dataloaders: please consider setting `dataloaders` instead."
        )
    searched = loaders.get("train_dataloaders" if method == "fit" else "dataloaders")
    if isinstance(searched, (list, tuple)) and len(searched) > 1:
        raise MisconfigurationException(
            f"Batch size finder cannot be used with multiple {method} dataloaders: it searches one loader's "
            "batch size. Pass a single loader."
        )


def _hook_loader(model: LightningModule, datamodule: Any, method: str) -> Any:
    """What the data module's (else the module's) ``*_dataloader()`` hook of ``method`` returns; None when it
    cannot be called outside a run."""
    hook = {"fit": "train_dataloader", "validate": "val_dataloader", "test": "test_dataloader",
            "predict": "predict_dataloader"}[method]  # fmt: skip
    owner = datamodule if datamodule is not None and hasattr(datamodule, hook) else model
    try:
        return getattr(owner, hook)()
    except Exception:
        return None


def _dataset_size(loader: Any) -> int | None:
    """Samples in the searched loader's dataset (the size cannot usefully grow past it)."""
    if isinstance(loader, (list, tuple)) and len(loader) == 1:
        loader = loader[0]
    dataset = getattr(loader, "dataset", None)
    return len(dataset) if dataset is not None and has_len(dataset) else None
