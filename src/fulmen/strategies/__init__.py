from fulmen.strategies.ddp import DDPStrategy
from fulmen.strategies.ddp_spawn import DDPSpawnStrategy
from fulmen.strategies.deepspeed import DeepSpeedStrategy
from fulmen.strategies.factory import select_strategy
from fulmen.strategies.fsdp import FSDPStrategy
from fulmen.strategies.model_parallel import ModelParallelStrategy
from fulmen.strategies.parallel import ParallelStrategy
from fulmen.strategies.registry import StrategyRegistry
from fulmen.strategies.single_device import SingleDeviceStrategy
from fulmen.strategies.single_xla import SingleDeviceXLAStrategy
from fulmen.strategies.strategy import Strategy
from fulmen.strategies.xla import XLAStrategy

__all__ = [
    "DDPSpawnStrategy", "DDPStrategy", "DeepSpeedStrategy", "FSDPStrategy", "ModelParallelStrategy",
    "ParallelStrategy", "SingleDeviceStrategy", "SingleDeviceXLAStrategy", "Strategy", "StrategyRegistry",
    "XLAStrategy", "select_strategy",
]  # fmt: skip

from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.imports import lazy_exports as _lazy_exports

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {})
# the classes Lightning 2.x deprecated (they warn when made) or removed (they raise): see fulmen._graveyard
__getattr__ = _lazy_aliases(__name__, {
    "HPUParallelStrategy": "fulmen._graveyard.HPUParallelStrategy",
    "SingleHPUStrategy": "fulmen._graveyard.SingleHPUStrategy",
    "SingleTPUStrategy": "fulmen._graveyard.SingleTPUStrategy",
}, fallback=__getattr__)  # fmt: skip
