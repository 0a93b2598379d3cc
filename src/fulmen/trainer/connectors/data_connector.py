"""``lightning.pytorch.trainer.connectors.data_connector``: where a run's dataloaders come from (arguments, a
data module or the module) and how many batches count is :class:`fulmen.runtime.data.DataSource`."""

# Lightning's module holds it: the dataloader worker check reads `torch.multiprocessing.get_start_method()` when
# it runs, so patching `data_connector.mp.get_start_method` counts
import torch.multiprocessing as mp  # noqa: F401  (Lightning's name)

from fulmen.overrides.distributed import DistributedSamplerWrapper as DistributedSamplerWrapper
from fulmen.overrides.distributed import (
    UnrepeatedDistributedSamplerWrapper as UnrepeatedDistributedSamplerWrapper,
)
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

warning_cache = WarningCache()  # Lightning's module-level cache, for code that warns through it

__all__ = ["DataSource", "split_datamodule"]
