from fulmen.strategies.ddp import DDPStrategy
from fulmen.strategies.ddp_spawn import DDPSpawnStrategy
from fulmen.strategies.factory import select_strategy
from fulmen.strategies.fsdp import FSDPStrategy
from fulmen.strategies.model_parallel import ModelParallelStrategy
from fulmen.strategies.parallel import ParallelStrategy
from fulmen.strategies.strategy import SingleDeviceStrategy, Strategy

__all__ = [
    "DDPSpawnStrategy", "DDPStrategy", "FSDPStrategy", "ModelParallelStrategy", "ParallelStrategy",
    "SingleDeviceStrategy", "Strategy", "select_strategy",
]  # fmt: skip
