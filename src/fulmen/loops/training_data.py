"""The training data of a fit: its loader (loaded once, reloaded every ``reload_dataloaders_every_n_epochs``),
the batch counts it sets, each epoch's iterator with the RNG state its order was drawn from, and the data's own
position loaded back from a checkpoint."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from torch.utils.data import DataLoader

from fulmen.loops.fetchers import PrefetchIterator, prefetch_iterator
from fulmen.loops.loader_state import data_parts
from fulmen.loops.resharding import keep_order
from fulmen.runtime.rng import capture_generator_states, capture_rng, restore_generator_states, restore_rng
from fulmen.utilities.combined_loader import CombinedLoader
from fulmen.utilities.data import has_len, parse_num_batches
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_warn
from fulmen.utilities.sample_seeds import sample_seed_in_use, sample_seeded
from fulmen.utilities.warnings import PossibleUserWarning

if TYPE_CHECKING:
    from fulmen.runtime.context import RunContext


class TrainingData:
    """The fit loop's training loader and the running epoch's batches (``FitLoop.training_data``)."""

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.loader: Any = None  # the running fit's
        self.last_loader: Any = None  # the last fit's, readable until the next fit loads its own
        self._epoch_loader: Any = None  # what the epochs iterate: the loader, or its sample-seeded twin
        self._last_reload_epoch: int | None = None
        self.epoch_start_rng: dict[str, Any] | None = None  # RNG just before the epoch's shuffle was drawn
        self.batches: PrefetchIterator | None = None  # the running epoch's (its data position, for checkpoints)
        self.resumed_layout: dict[str, Any] | None = None  # how the resumed checkpoint's data was shared out
        self._restored_at_epoch_end = False  # the data's state at an epoch end was loaded (see make_iterator)

    @property
    def train_dataloader(self) -> Any:
        """The loader of the running fit, or of the last one (as Lightning keeps it readable after fit)."""
        return self.loader if self.loader is not None else self.last_loader

    def setup(self) -> None:
        """Load the training loader (again when ``reload_dataloaders_every_n_epochs`` says) and set the batch
        counts it implies: batches per epoch, the validation schedule in batches."""
        context = self.context
        config = context.config
        every = config.reload_dataloaders_every_n_epochs
        epoch = context.progress.current_epoch
        if self.loader is not None and not (
            every and self._last_reload_epoch is not None and epoch - self._last_reload_epoch >= every
        ):
            return
        reloading = self.loader is not None
        # a run resumed from another number of processes keeps the order of the run that wrote the checkpoint
        loader = keep_order(context.data.request_train_dataloader(), self.resumed_layout)
        self.loader = loader
        self._epoch_loader = sample_seeded(loader, self._current_epoch, sample_seed_in_use())
        self._last_reload_epoch = epoch
        if reloading:
            _open_iterators(self._epoch_loader)
        limit = config.limit_train_batches
        if isinstance(loader, CombinedLoader):  # each loader limited on its own: the epoch is then len(loader)
            loader.limits = [
                parse_num_batches("train", len(dl) if has_len(dl) else float("inf"), limit) for dl in loader.flattened
            ]
            limit = 1.0
        length: int | float = len(loader) if has_len(loader) else float("inf")
        context.batches.train = parse_num_batches("train", length, limit)
        if context.batches.train == 0:  # nothing to train on: no schedule to check (training is skipped)
            return
        context.batches.val_check = self._val_check_batch()
        log_every = config.log_every_n_steps
        max_batches = context.batches.train
        if context.loggers and max_batches < log_every and not config.fast_dev_run:
            rank_zero_warn(
                f"The number of training batches ({max_batches}) is smaller than the logging interval"
                f" Trainer(log_every_n_steps={log_every}). Set a lower value for log_every_n_steps if you want to"
                " see logs for the training epoch.",
                category=PossibleUserWarning,
            )

    def _val_check_batch(self) -> int | float:
        config = self.context.config
        max_batches = self.context.batches.train
        vci = config.val_check_interval
        if isinstance(vci, datetime.timedelta):
            return float("inf")  # the epoch loop validates by the clock, not by batch count
        if isinstance(vci, int):
            if config.check_val_every_n_epoch is not None and vci > max_batches and config.limit_val_batches > 0:
                raise ValueError(
                    f"val_check_interval={vci} must be less than or equal to the number of the training batches per epoch "
                    f"({max_batches}). Use a value <= {max_batches}, set check_val_every_n_epoch=None "
                    "to count batches across epochs, or limit_val_batches=0 to disable validation."
                )
            return vci
        if max_batches == float("inf"):  # an iterable without a length (and no int limit on it)
            if vci != 1.0:
                raise MisconfigurationException(
                    f"val_check_interval={vci!r} is a fraction of an epoch, but the training dataloader is an "
                    "IterableDataset without a length. Pass an int (validate every N training batches) or 1.0."
                )
            return float("inf")
        return max(1, int(max_batches * vci))

    def make_iterator(
        self, skip: int = 0, epoch_rng: dict[str, Any] | None = None, loader: Any = None, offset: int = 0
    ) -> PrefetchIterator:
        """The epoch's batches. The RNG state just before the loader's iterator draws its shuffle seed (and the
        epoch-start state of samplers that have one) is kept so that a resumed run can redraw the same order
        (``epoch_rng``) and skip the batches already done. ``loader``: one for this epoch only (a resumed epoch
        shared out over another number of processes). ``offset``: batches done that a loader restored to its
        position no longer yields (see ``loops/loader_state.py``)."""
        # the loader's own parts (samplers, state) are the ones the twin iterated shares
        source = self.loader if loader is None else loader
        parts = data_parts(source)
        if epoch_rng is None:
            epoch_rng = {"rng": capture_rng(), "generators": capture_generator_states(source)}
            if parts.samplers:
                epoch_rng["samplers"] = parts.sampler_states()
        else:
            restore_rng(epoch_rng["rng"])
            restore_generator_states(source, epoch_rng["generators"])
            parts.load_sampler_states(epoch_rng.get("samplers"))
        self.epoch_start_rng = epoch_rng
        loader = self._epoch_loader if loader is None else sample_seeded(loader, self._current_epoch, sample_seed_in_use())
        self.batches = self._open_epoch(loader, skip, offset, parts.snapshot_fn())
        if self._restored_at_epoch_end:
            self._restored_at_epoch_end = False
            if self.batches.done:
                # some loaders restored to the state they had at the end of an epoch (torchdata's over an
                # iterable dataset, mosaic's) first yield that epoch's empty rest, then the next epoch
                self.batches = self._open_epoch(loader, skip, offset, parts.snapshot_fn())
        return self.batches

    def _open_epoch(self, loader: Any, skip: int, offset: int, snapshot: Callable[[], Any] | None) -> PrefetchIterator:
        return prefetch_iterator(
            self.context.hooks, "[_TrainingEpochLoop].train_dataloader_next", loader, self.context.batches.train,
            skip=skip, quiet_base_seed=self._quiet_base_seed(skip), offset=offset, snapshot=snapshot,
        )  # fmt: skip

    def _quiet_base_seed(self, skip: int) -> bool:
        """Whether this epoch's iterator must leave the global RNG alone: a persistent-workers loader starts
        its workers (drawing a base seed) once per load; an uninterrupted run loads it at epoch 0 and then
        every ``reload_dataloaders_every_n_epochs``."""
        loader = self._epoch_loader
        if not getattr(loader, "persistent_workers", False):
            return False
        epoch = self.context.progress.current_epoch
        every = self.context.config.reload_dataloaders_every_n_epochs
        load_epoch = epoch == 0 if not every else epoch % every == 0
        if skip:  # a one-off loader: it draws where the uninterrupted run started its workers this epoch
            return not load_epoch
        return getattr(loader, "_iterator", None) is None and not load_epoch

    def restore_position(
        self, map_dataset: Any, loader_states: Any, dataset_position: Any, at_epoch_end: bool = False
    ) -> bool:
        """Load a checkpoint's states into the training data's parts (see ``loops/loader_state.py``): the
        map-style dataset's, and the data position (the train loaders' states, or the iterable dataset's).
        ``True`` when the data is back at its position (the resumed epoch then reads on, skipping nothing).
        ``at_epoch_end``: written between epochs, the next epoch's iterator checks whether the loader first
        yields the finished epoch's empty rest."""
        parts = data_parts(self.train_dataloader)
        if parts.map_dataset is not None and map_dataset is not None:
            parts.map_dataset.load_state_dict(map_dataset)
        saved = loader_states if parts.complete else dataset_position
        restored = saved is not None and bool(parts.holders)
        if restored:
            parts.load_position(saved)
        if at_epoch_end:
            self._restored_at_epoch_end = restored
        return restored

    def _current_epoch(self) -> int:
        return self.context.progress.current_epoch

    def teardown(self) -> None:
        # the next fit loads its own loader; this one stays readable until then
        self.last_loader, self.loader = self.loader, None
        self._epoch_loader = self.batches = self.resumed_layout = None


def _open_iterators(loader: Any) -> None:
    """Make (and drop) an iterator of each DataLoader in ``loader`` when it is reloaded, before the epoch's start
    hooks, as Lightning does: each draws its worker base seed from the global RNG, so the epoch's shuffle and
    every later random number are those a Lightning run of the same program gets (``reload_dataloaders_every_n_
    epochs`` with a shuffled loader). A persistent-workers loader keeps the workers this starts."""
    for dl in loader.flattened if isinstance(loader, CombinedLoader) else [loader]:
        if isinstance(dl, DataLoader):
            iter(dl)
