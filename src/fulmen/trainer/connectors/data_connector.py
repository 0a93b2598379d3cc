"""Lightning's import path ``lightning.pytorch.trainer.connectors.data_connector``: where a run's dataloaders
come from (arguments, a data module or the module) and how many batches count is
:class:`fulmen.runtime.data.DataSource`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

# Lightning's module holds it: the dataloader worker check reads `torch.multiprocessing.get_start_method()` when
# it runs, so patching `data_connector.mp.get_start_method` counts
import torch.multiprocessing as mp  # noqa: F401  (Lightning's name)

from fulmen.core.datamodule import LightningDataModule
from fulmen.core.module import LightningModule
from fulmen.overrides.distributed import DistributedSamplerWrapper as DistributedSamplerWrapper
from fulmen.overrides.distributed import (
    UnrepeatedDistributedSamplerWrapper as UnrepeatedDistributedSamplerWrapper,
)
from fulmen.runtime.data import DataLoaderSource as _DataLoaderSource
from fulmen.runtime.data import DataSource, split_datamodule
from fulmen.runtime.state import RunningStage as RunningStage
from fulmen.runtime.state import TrainerFn as TrainerFn
from fulmen.utilities.combined_loader import CombinedLoader as CombinedLoader
from fulmen.utilities.data import has_iterable_dataset as has_iterable_dataset
from fulmen.utilities.data import suggested_max_num_workers as suggested_max_num_workers
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.model_helpers import is_overridden as is_overridden
from fulmen.utilities.rank_zero import WarningCache as WarningCache
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn
from fulmen.utilities.warnings import PossibleUserWarning as PossibleUserWarning

if TYPE_CHECKING:
    from fulmen.trainer.trainer import Trainer

warning_cache = WarningCache()  # Lightning's module-level cache, for code that warns through it

__all__ = ["DataSource", "split_datamodule"]  # the classes below are Lightning's private names, kept for its users


# Lightning's `RunningStage` of a dataloader -> fulmen's stage key
_STAGE_OF_MODE = {
    RunningStage.TRAINING: "train", RunningStage.SANITY_CHECKING: "val", RunningStage.VALIDATING: "val",
    RunningStage.TESTING: "test", RunningStage.PREDICTING: "predict",
}  # fmt: skip
_BATCH_TRANSFER_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


class _DataHookSelector:
    """Whose batch-transfer hook runs: the data module's when it implements it, else the module's."""

    def __init__(self, model: LightningModule, datamodule: LightningDataModule | None,
                 _valid_hooks: tuple[str, ...] = _BATCH_TRANSFER_HOOKS) -> None:  # fmt: skip
        self.model = model
        self.datamodule = datamodule
        self._valid_hooks = _valid_hooks

    def get_instance(self, hook_name: str) -> LightningModule | LightningDataModule:
        if hook_name not in self._valid_hooks:
            raise ValueError(
                f"`{hook_name}` is not a hook that can be overridden in a LightningDataModule and a LightningModule "
                f"together: one of {', '.join(self._valid_hooks)}."
            )
        datamodule = self.datamodule
        if datamodule is not None and is_overridden(hook_name, datamodule, LightningDataModule):
            if is_overridden(hook_name, self.model, LightningModule):
                warning_cache.warn(
                    f"You have overridden `{hook_name}` in both `LightningModule` and `LightningDataModule`. It will "
                    "use the implementation from the `LightningDataModule` instance."
                )
            return datamodule
        return self.model


class _DataConnector:
    """``trainer._data_connector``: Lightning's data plumbing, as a view of the trainer's data source. Tests and
    libraries written against Lightning attach data (``attach_data``), prepare it (``prepare_data``: the run's
    own step, on local rank 0 only) or inject the distributed sampler (``_prepare_dataloader``) through it."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer
        # whose batch-transfer hooks run, for the module and data module last attached here
        self._datahook_selector: _DataHookSelector | None = None

    def prepare_data(self) -> None:
        self.trainer._runner.prepare_data()

    def attach_data(
        self, model: LightningModule, train_dataloaders: Any = None, val_dataloaders: Any = None,
        test_dataloaders: Any = None, predict_dataloaders: Any = None, datamodule: LightningDataModule | None = None,
    ) -> None:  # fmt: skip
        self.attach_dataloaders(
            model, train_dataloaders, val_dataloaders, test_dataloaders, predict_dataloaders
        )
        self.attach_datamodule(model, datamodule=datamodule)

    def attach_dataloaders(
        self, model: LightningModule, train_dataloaders: Any = None, val_dataloaders: Any = None,
        test_dataloaders: Any = None, predict_dataloaders: Any = None,
    ) -> None:  # fmt: skip
        self.trainer._context.module = model  # the owner of the hooks that make the loaders not given here
        self.trainer._context.data.attach(train=train_dataloaders, val=val_dataloaders, test=test_dataloaders,
                                          predict=predict_dataloaders)  # fmt: skip

    def attach_datamodule(
        self, model: LightningModule, datamodule: LightningDataModule | None = None
    ) -> None:
        self._datahook_selector = _DataHookSelector(model, datamodule)
        self.trainer._context.datamodule = datamodule
        if datamodule is not None:
            datamodule.trainer = self.trainer

    # Lightning 1.x kept the sources here (2.x: each loop's `_data_source`)
    _train_dataloader_source = property(lambda self: self._source("train"))
    _val_dataloader_source = property(lambda self: self._source("val"))
    _test_dataloader_source = property(lambda self: self._source("test"))
    _predict_dataloader_source = property(lambda self: self._source("predict"))

    def _source(self, stage: str) -> _DataLoaderSource:
        return self.trainer._context.data.source(stage)

    def _requires_distributed_sampler(self, dataloader: Any) -> bool:
        from torch.utils.data import DistributedSampler

        trainer = self.trainer
        return (
            trainer.config.use_distributed_sampler
            and trainer.strategy.is_distributed
            and not isinstance(getattr(dataloader, "sampler", None), DistributedSampler)
            and not has_iterable_dataset(dataloader)
        )

    def _prepare_dataloader(self, dataloader: object, shuffle: bool | None = None,
                            mode: RunningStage | None = None) -> object:  # fmt: skip
        """``dataloader`` as the run would use it: with the distributed sampler under several processes."""
        stage = _STAGE_OF_MODE.get(mode, "train") if mode is not None else "train"
        return self.trainer._context.data.distributed(dataloader, stage, shuffle)
