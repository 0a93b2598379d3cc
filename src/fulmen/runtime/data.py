"""Where a run's dataloaders come from (arguments, data module or module) and how many batches count."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from fulmen.core.datamodule import LightningDataModule
from fulmen.core.module import LightningModule
from fulmen.utilities.combined_loader import CombinedLoader
from fulmen.utilities.data import has_len, is_iterable_dataset, parse_num_batches, rebuild_dataloader
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.model_helpers import is_overridden
from fulmen.utilities.rank_zero import WarningCache
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


class DataSource:
    """Resolves and caches dataloaders for the current run."""

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.sources: dict[str, Any] = {}
        self._warnings = WarningCache()
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
        hook = _STAGE_HOOK[stage]
        datamodule = self.context.datamodule
        if datamodule is not None and is_overridden(hook, datamodule, LightningDataModule):
            return datamodule
        module = self.context.module
        if module is not None and is_overridden(hook, module, LightningModule):
            return module
        return None

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
        else:
            loader = self._distributed(loader, "train")
        self._check_workers(loader, "train")
        return loader

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
        if isinstance(loader, CombinedLoader):
            loaders = loader.flattened
        elif isinstance(loader, Mapping):
            loaders = list(loader.values())
        elif isinstance(loader, (list, tuple)):
            loaders = list(loader)
        else:
            loaders = [loader]
        loaders = [self._distributed(dl, stage) for dl in loaders]
        counts = []
        for dl in loaders:
            length: int | float = len(dl) if has_len(dl) else float("inf")
            counts.append(parse_num_batches(stage, length, limit))
            self._check_workers(dl, stage)
        self.eval_dataloaders[stage] = loaders
        return loaders, counts

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

    def fit_val_dataloaders(self) -> tuple[list[Any], list[int | float]]:
        every = self.context.config.reload_dataloaders_every_n_epochs
        epoch = self.context.progress.current_epoch
        stale = every > 0 and self._val_loaded_epoch is not None and epoch - self._val_loaded_epoch >= every
        if self.val_dataloaders is None or stale:
            self.val_dataloaders, self.val_num_batches = self.request_eval_dataloaders("val")
            self._val_loaded_epoch = epoch
        return self.val_dataloaders, self.val_num_batches

    def _distributed(self, loader: Any, stage: str) -> Any:
        """Under several processes, a DataLoader gets a DistributedSampler (each process its share; the
        loader keeps its shuffling, and the loops call ``set_epoch``). Opt out with
        ``Trainer(use_distributed_sampler=False)``."""
        strategy = self.context.strategy
        # DDP / FSDP on one process too, as Lightning: their order is then a DistributedSampler's, which a run on
        # another number of processes can redraw (resuming mid-epoch, see loops/resume.py)
        if not strategy.is_distributed or not self.context.config.use_distributed_sampler:
            return loader
        from torch.utils.data import DataLoader, DistributedSampler, RandomSampler

        if type(loader) is not DataLoader or is_iterable_dataset(loader) or loader.batch_sampler is None:
            return loader  # an iterable, a custom loader or batch sampler: the user shards it
        if isinstance(loader.sampler, DistributedSampler):
            return loader
        # a shuffled loader stays shuffled, for evaluation too (as in Lightning, so seeded runs agree)
        shuffle = isinstance(loader.sampler, RandomSampler)
        seed = int(os.environ.get("PL_GLOBAL_SEED", 0))
        sampler: DistributedSampler[Any]
        if stage == "predict":
            # each sample predicted once: a padded sampler would predict (and write) some samples twice; the
            # shares may differ by one batch, which prediction allows (no collective per batch)
            from fulmen.overrides.distributed import UnrepeatedDistributedSampler

            sampler = UnrepeatedDistributedSampler(
                loader.dataset, **strategy.distributed_sampler_kwargs, shuffle=shuffle, seed=seed
            )
        else:
            sampler = DistributedSampler(
                loader.dataset, **strategy.distributed_sampler_kwargs, shuffle=shuffle, seed=seed,
                drop_last=loader.drop_last,
            )  # fmt: skip
        return rebuild_dataloader(loader, sampler=sampler)

    def _check_workers(self, loader: Any, stage: str) -> None:
        """Seed 001's data-loading advice, as warnings (each once): workers, pinned memory, persistence."""
        num_workers = getattr(loader, "num_workers", None)
        if num_workers is None or stage == "predict":
            return  # not a DataLoader (an InMemoryDataLoader needs no workers)
        cpus = os.cpu_count() or 1
        if num_workers == 0 and cpus > 2:
            self._warnings.warn(
                f"The {stage} dataloader has num_workers=0: batches load in the main process, which may "
                f"bottleneck training. Consider DataLoader(num_workers={min(cpus - 1, 8)}).",
                category=PossibleUserWarning,
            )
        on_cuda = self.context.strategy.root_device.type == "cuda"
        if on_cuda and not getattr(loader, "pin_memory", True) and _holds_cpu_data(loader):
            self._warnings.warn(
                f"The {stage} dataloader has pin_memory=False while training on CUDA: copies from pageable "
                "memory cannot overlap compute. Consider DataLoader(..., pin_memory=True).",
                category=PossibleUserWarning,
            )
        epochs = self.context.config.max_epochs
        restarts = stage == "train" and (epochs is None or epochs == -1 or epochs > 1)
        if num_workers > 0 and restarts and not getattr(loader, "persistent_workers", True):
            self._warnings.warn(
                f"The {stage} dataloader starts {num_workers} worker process(es) again at every epoch. "
                "Consider DataLoader(..., persistent_workers=True) to keep them alive between epochs.",
                category=PossibleUserWarning,
            )


def _holds_cpu_data(loader: Any) -> bool:
    """False when the data set already lives on a GPU (pinning would then fail)."""
    tensors = getattr(getattr(loader, "dataset", None), "tensors", None)
    return not tensors or all(t.device.type == "cpu" for t in tensors)


def step_overridden(module: LightningModule, stage: str) -> bool:
    return is_overridden(_STEP[stage], module, LightningModule)
