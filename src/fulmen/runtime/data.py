"""Where a run's dataloaders come from (arguments, data module or module) and how many batches count."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch.multiprocessing as mp
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler, SequentialSampler

from fulmen.core.datamodule import LightningDataModule
from fulmen.core.module import LightningModule
from fulmen.utilities.combined_loader import CombinedLoader
from fulmen.utilities.data import (
    has_len_all_ranks,
    is_iterable_dataset,
    parse_num_batches,
    suggested_max_num_workers,
)
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.loader_rebuild import batch_sampler_over, rebuild_dataloader, recording_loader_arguments
from fulmen.utilities.model_helpers import is_overridden
from fulmen.utilities.rank_zero import rank_zero_warn
from fulmen.utilities.warnings import PossibleUserWarning

if TYPE_CHECKING:
    from fulmen.runtime.context import RunContext

_STAGE_HOOK = {
    "train": "train_dataloader",
    "val": "val_dataloader",
    "test": "test_dataloader",
    "predict": "predict_dataloader",
}
_STEP = {"train": "training_step", "val": "validation_step", "test": "test_step", "predict": "predict_step"}


def split_datamodule(loaders: Any, datamodule: LightningDataModule | None) -> tuple[Any, LightningDataModule | None]:
    """A data module passed where dataloaders go (``trainer.fit(model, dm)``) is taken as the data module."""
    if isinstance(loaders, LightningDataModule):
        return None, loaders
    return loaders, datamodule


class DataLoaderSource:
    """Where one stage's dataloaders come from: ``instance`` is the dataloaders themselves or the module or data
    module whose hook ``name`` (the stage's, e.g. ``"train_dataloader"``) returns them (Lightning's
    ``_DataLoaderSource``, which code written for it reads from the loops)."""

    def __init__(self, instance: Any, name: str) -> None:
        self.instance = instance
        self.name = name

    def dataloader(self) -> Any:
        return getattr(self.instance, self.name)() if self.is_module() else self.instance

    def is_defined(self) -> bool:
        """Whether there are dataloaders: given ones, or a hook the module or data module implements."""
        if self.is_module():
            return is_overridden(self.name, self.instance)
        return self.instance is not None

    def is_module(self) -> bool:
        return isinstance(self.instance, (LightningModule, LightningDataModule))


class DataSource:
    """Resolves and caches dataloaders for the current run."""

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.sources: dict[str, Any] = {}
        self.val_dataloaders: list[Any] | None = None
        self.val_num_batches: list[int | float] = []
        self.eval_dataloaders: dict[str, list[Any]] = {}  # the last loaders of each evaluation stage
        self.shown: dict[str, Any] = {}  # loaders built outside a run (see `show`)
        self._val_loaded_epoch: int | None = None

    def attach(self, **sources: Any) -> None:
        """Remember explicitly passed dataloaders (None means: ask the data module or the module)."""
        self.sources = {k: v for k, v in sources.items() if v is not None}
        self.shown = {}
        self.val_dataloaders = None
        self._val_loaded_epoch = None

    def passed(self, stage: str) -> Any:
        """The dataloaders passed to the running stage for ``stage`` ('train', 'val', ...), if any."""
        return self.sources.get(stage)

    def replace(self, stage: str, loader: Any) -> None:
        """Use ``loader`` for ``stage`` from now on (e.g. rebuilt with a tuned batch size)."""
        self.sources[stage] = loader

    def _source_owner(self, stage: str) -> LightningModule | LightningDataModule | None:
        """The data module or the module whose hook makes ``stage``'s loaders; ``None`` when it does not
        implement the hook."""
        source = self.source(stage)
        return source.instance if source.is_module() and source.is_defined() else None

    def source(self, stage: str) -> DataLoaderSource:
        """Where ``stage``'s dataloaders come from: those passed to the run, else the data module when one was
        given (the run's one source of data: a stage it has no loaders for has none, whatever the module
        defines, as in Lightning), else the module."""
        hook = _STAGE_HOOK[stage]
        if stage in self.sources:
            return DataLoaderSource(self.sources[stage], hook)
        datamodule = self.context.datamodule
        return DataLoaderSource(datamodule if datamodule is not None else self.context.module, hook)

    def has_source(self, stage: str) -> bool:
        return stage in self.sources or self._source_owner(stage) is not None

    def _request(self, stage: str) -> Any:
        if stage in self.sources:
            return self.sources[stage]
        owner = self._source_owner(stage)
        if owner is None:
            return None
        hook = _STAGE_HOOK[stage]
        module = self.context.module
        # the loaders' __init__ arguments recorded: a DataLoader subclass can then be made again with the
        # distributed sampler even if it does not keep them
        with recording_loader_arguments():
            if owner is module and module is not None:
                return self.context.hooks.call_module(hook)
            return getattr(owner, hook)()

    def request_train_dataloader(self) -> Any:
        loader = self._request("train")
        if loader is None:
            raise MisconfigurationException(
                "No training data: pass `train_dataloaders` to trainer.fit(), give a datamodule with "
                "`train_dataloader()`, or implement `train_dataloader()` in your LightningModule."
            )
        if isinstance(loader, (list, tuple, Mapping)):
            loader = CombinedLoader(loader, mode="max_size_cycle")
        if self.context.config.overfit_batches > 0:
            loader = _without_shuffling(loader, "train")
        if isinstance(loader, CombinedLoader):
            processed = [self._processed(dl) for dl in loader.flattened]
            if any(new is not old for new, old in zip(processed, loader.flattened)):
                loader.flattened = processed
        else:
            loader = self._processed(self.distributed(loader, "train"))
        loaders = loader.flattened if isinstance(loader, CombinedLoader) else [loader]
        for dl in loaders:
            self._check_workers(dl, "train")
        allow_zero = self._allow_zero_length()
        for dl in loaders:
            has_len_all_ranks(dl, self.context.strategy, allow_zero)
        # the loaders together, in the CombinedLoader that Lightning puts around them (its warning names it)
        whole = loader if isinstance(loader, CombinedLoader) else CombinedLoader(loader, "max_size_cycle")
        has_len_all_ranks(whole, self.context.strategy, allow_zero)
        return loader

    def _processed(self, loader: Any) -> Any:
        """``loader`` as the strategy's ``process_dataloader`` returns it (the loader itself by default)."""
        return self.context.strategy.process_dataloader(loader)

    def request_eval_dataloaders(self, stage: str) -> tuple[list[Any], list[int | float]]:
        cfg = self.context.config
        limit = {
            "val": cfg.limit_val_batches,
            "test": cfg.limit_test_batches,
            "predict": cfg.limit_predict_batches,
        }[stage]
        if limit == 0:  # the stage is switched off: its *_dataloader() hook is not even called
            return [], []
        loader = self._request(stage)
        if loader is None:
            return [], []
        if isinstance(loader, CombinedLoader) and loader.mode != "sequential":
            # one combined batch per step (a batch of each loader, no dataloader_idx): one loader to the loop
            loader.flattened = [self._processed(self.distributed(dl, stage)) for dl in loader.flattened]
            loaders: list[Any] = [loader]
        elif isinstance(loader, CombinedLoader):
            loaders = loader.flattened
        elif isinstance(loader, Mapping):
            loaders = list(loader.values())
        elif isinstance(loader, (list, tuple)):
            loaders = list(loader)
        else:
            loaders = [loader]
        if stage == "val" and self.context.state.fitting and cfg.overfit_batches > 0:
            if isinstance(loaders[0], CombinedLoader):
                loaders = [_without_shuffling(loaders[0], "val")]
            else:
                loaders = _without_shuffling(CombinedLoader(loaders, mode="sequential"), "val").flattened
        for inner in (one for dl in loaders for one in _flat(dl)):
            if _is_shuffled(inner):
                rank_zero_warn(
                    f"Your `{stage}_dataloader`'s sampler has shuffling enabled, it is strongly recommended that"
                    " you turn shuffling off for val/test dataloaders.",
                    category=PossibleUserWarning,
                )
        loaders = [
            dl if isinstance(dl, CombinedLoader) else self._processed(self.distributed(dl, stage)) for dl in loaders
        ]
        for inner in (one for dl in loaders for one in _flat(dl)):
            self._check_workers(inner, stage)
        allow_zero = self._allow_zero_length()
        counts = []
        for dl in loaders:
            if isinstance(dl, CombinedLoader):  # each loader limited on its own: the steps are then len(dl)
                dl.limits = [self._count(inner, stage, limit, allow_zero) for inner in dl.flattened]
                counts.append(self._count(dl, stage, 1.0, allow_zero))
            else:
                counts.append(self._count(dl, stage, limit, allow_zero))
        self.eval_dataloaders[stage] = loaders
        return loaders, counts

    def _count(self, loader: Any, stage: str, limit: int | float, allow_zero: bool) -> int | float:
        """The batches of ``loader`` that ``limit_<stage>_batches`` selects (inf for a loader without length)."""
        has_length = has_len_all_ranks(loader, self.context.strategy, allow_zero)
        return parse_num_batches(stage, len(loader) if has_length else float("inf"), limit)

    def stage_dataloaders(self, stage: str) -> Any:
        """The loader(s) of the current or last run of ``stage`` ('val': fit's, else validate's): one loader, a
        list when there are several; else what `show` was given; None before any."""
        loaders = self.val_dataloaders if stage == "val" and self.val_dataloaders is not None else None
        loaders = loaders or self.eval_dataloaders.get(stage)
        if not loaders:
            return self.shown.get(stage)
        return loaders[0] if len(loaders) == 1 else loaders

    def show(self, loaders: dict[str, Any]) -> None:
        """Loaders built outside a run, which ``trainer.train_dataloader`` / ``val_dataloaders`` ... show until
        a run loads its own: the batch-size finder leaves those it settled on, as Lightning does."""
        self.shown = dict(loaders)
        self.eval_dataloaders = {k: v for k, v in self.eval_dataloaders.items() if k not in loaders}
        if "val" in loaders:
            self.val_dataloaders = None

    # -- validation inside fit ------------------------------------------------------------------------
    def validation_enabled(self, load: bool = True) -> bool:
        """Whether fit validates; ``load=False`` decides without requesting the dataloaders yet."""
        module = self.context.module
        if module is None or not is_overridden("validation_step", module, LightningModule):
            return False
        if self.context.config.limit_val_batches == 0:
            return False
        if not self.has_source("val"):
            return False
        if not load:
            return True
        loaders, counts = self.fit_val_dataloaders()
        return bool(loaders) and sum(counts) > 0

    @staticmethod
    def reported_counts(loaders: list[Any], counts: list[int | float]) -> list[int | float]:
        """``trainer.num_val_batches`` / ``num_test_batches`` for these loaders: a count per loader, except that a
        ``CombinedLoader`` in a combined mode counts each of its loaders (its limit applied), as Lightning reports
        it (progress bars show the first); the run itself takes the combined loader's own count."""
        if len(loaders) == 1 and isinstance(loaders[0], CombinedLoader) and loaders[0].mode != "sequential":
            limits = loaders[0].limits
            if limits:
                return list(limits)
        return counts

    def fit_val_dataloaders(self) -> tuple[list[Any], list[int | float]]:
        every = self.context.config.reload_dataloaders_every_n_epochs
        epoch = self.context.progress.current_epoch
        stale = every > 0 and self._val_loaded_epoch is not None and epoch - self._val_loaded_epoch >= every
        if self.val_dataloaders is None or stale:
            self.val_dataloaders, self.val_num_batches = self.request_eval_dataloaders("val")
            self._val_loaded_epoch = epoch
        return self.val_dataloaders, self.val_num_batches

    def distributed(self, loader: Any, stage: str, shuffle: bool | None = None) -> Any:
        """Under several processes, a DataLoader gets a DistributedSampler (each process its share; the
        loader keeps its shuffling unless ``shuffle`` says otherwise, and the loops call ``set_epoch``). Opt out
        with ``Trainer(use_distributed_sampler=False)``."""
        strategy = self.context.strategy
        # DDP / FSDP on one process too, as Lightning: their order is then a DistributedSampler's, which a run on
        # another number of processes can redraw (resuming mid-epoch, see loops/resharding.py)
        if not strategy.is_distributed or not self.context.config.use_distributed_sampler:
            return loader
        from fulmen.overrides.distributed import (
            DistributedSamplerWrapper,
            UnrepeatedDistributedSamplerWrapper,
        )

        if not isinstance(loader, DataLoader) or is_iterable_dataset(loader):
            return loader  # an iterable or a loader of another kind: the user shards it
        if isinstance(loader.sampler, DistributedSampler):
            return loader
        if shuffle is None:  # a shuffled loader stays shuffled, for evaluation too (seeded runs agree with Lightning)
            shuffle = _is_shuffled(loader)
        seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
        shares: dict[str, Any] = {**strategy.distributed_sampler_kwargs, "shuffle": shuffle, "seed": seed}
        # the shares are padded to equal length (no `drop_last` here): every process then runs as many batches,
        # and the loader's own `drop_last` drops a short last batch of each share
        sampler: DistributedSampler[Any]
        changes: dict[str, Any] = {}
        if stage == "predict":
            # each sample predicted once (a padded share would predict, and write, some twice); the shares may
            # differ by one batch, which prediction allows (no collective per batch), and no batch is dropped
            sampler = UnrepeatedDistributedSamplerWrapper(loader.sampler, **shares)
            changes["drop_last"] = False
        elif isinstance(loader.sampler, (RandomSampler, SequentialSampler)):
            sampler = DistributedSampler(loader.dataset, **shares)
        else:  # the user's own sampler (weighted, custom): its indices are shared out, its order kept
            sampler = DistributedSamplerWrapper(loader.sampler, **shares)
        if loader.batch_size is None and loader.batch_sampler is not None:  # built with batch_sampler=
            batch_sampler = batch_sampler_over(loader.batch_sampler, sampler, predicting=stage == "predict")
            return rebuild_dataloader(loader, batch_sampler=batch_sampler)
        return rebuild_dataloader(loader, sampler=sampler, **changes)

    def _allow_zero_length(self) -> bool:
        """Whether a process may have no batches while others have some (the module's or data module's flag)."""
        allowed = getattr(self.context.module, "allow_zero_length_dataloader_with_multiple_devices", False)
        datamodule = self.context.datamodule
        return bool(allowed or getattr(datamodule, "allow_zero_length_dataloader_with_multiple_devices", False))

    def _check_workers(self, loader: Any, stage: str) -> None:
        """Lightning's data-loading advice for one DataLoader of ``stage``, in its words, each time a stage
        loads its dataloaders: worker processes that start slowly or are few, pinned memory with persistent
        workers that are reloaded."""
        if not isinstance(loader, DataLoader):
            return  # an InMemoryDataLoader, a custom iterable: it loads its own way
        name = f"{stage}_dataloader"
        upper_bound = suggested_max_num_workers(len(self.context.config.devices))
        context = loader.multiprocessing_context
        start_method = context.get_start_method() if context is not None else mp.get_start_method()
        if loader.num_workers > 0 and start_method == "spawn" and not loader.persistent_workers:
            rank_zero_warn(
                f"Consider setting `persistent_workers=True` in '{name}' to speed up the dataloader worker "
                "initialization."
            )
        elif loader.num_workers < 2 and upper_bound > 1:
            rank_zero_warn(
                f"The '{name}' does not have many workers which may be a bottleneck. Consider increasing the "
                f"value of the `num_workers` argument` to `num_workers={upper_bound}` in the `DataLoader` to "
                "improve performance.",
                category=PossibleUserWarning,
            )
        reloads = self.context.config.reload_dataloaders_every_n_epochs > 0
        if loader.persistent_workers and loader.pin_memory and reloads:
            rank_zero_warn(
                "The combination of `DataLoader(`pin_memory=True`, `persistent_workers=True`) and `Trainer("
                "reload_dataloaders_every_n_epochs > 0)` can lead to instability due to limitations in PyTorch "
                "(https://github.com/pytorch/pytorch/issues/91252). We recommend setting `pin_memory=False` in "
                "this case.",
                category=PossibleUserWarning,
            )


def _flat(loader: Any) -> list[Any]:
    """The dataloaders inside ``loader`` (a CombinedLoader's), or ``loader`` itself."""
    return loader.flattened if isinstance(loader, CombinedLoader) else [loader]


def _is_shuffled(loader: Any) -> bool:
    """Whether ``loader`` draws its samples in a random order (a ``RandomSampler``, also inside its batch
    sampler); an iterable data set's order is its own."""
    if isinstance(getattr(loader, "dataset", None), IterableDataset) or not hasattr(loader, "sampler"):
        return False
    batch_sampler = getattr(loader, "batch_sampler", None)
    sampler = loader.sampler if batch_sampler is None else getattr(batch_sampler, "sampler", batch_sampler)
    return isinstance(sampler, RandomSampler)


def _without_shuffling(loader: Any, stage: str) -> Any:
    """``overfit_batches``: the same batches at every epoch, so each loader reads in order; a shuffled one is
    rebuilt with a ``SequentialSampler`` (said each time the stage loads, as Lightning says it)."""
    loaders = loader.flattened if isinstance(loader, CombinedLoader) else [loader]
    if all(isinstance(dl.sampler, SequentialSampler) for dl in loaders if hasattr(dl, "sampler")):
        return loader
    rank_zero_warn(
        f"You requested to overfit but enabled {stage} dataloader shuffling. We are turning off the {stage} "
        "dataloader shuffling for you."
    )
    in_order = [
        rebuild_dataloader(dl, sampler=SequentialSampler(dl.dataset)) if _rebuildable(dl) else dl for dl in loaders
    ]
    if isinstance(loader, CombinedLoader):
        loader.flattened = in_order
        return loader
    return in_order[0]


def _rebuildable(loader: Any) -> bool:
    return (
        type(loader) is DataLoader
        and not isinstance(loader.dataset, IterableDataset)
        and loader.batch_sampler is not None
        and loader.batch_size is not None
    )


def step_overridden(module: LightningModule, stage: str) -> bool:
    return is_overridden(_STEP[stage], module, LightningModule)
