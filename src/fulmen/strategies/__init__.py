from fulmen.strategies.ddp import DDPStrategy
from fulmen.strategies.ddp_spawn import DDPSpawnStrategy
from fulmen.strategies.factory import select_strategy
from fulmen.strategies.strategy import SingleDeviceStrategy, Strategy

__all__ = ["DDPSpawnStrategy", "DDPStrategy", "SingleDeviceStrategy", "Strategy", "select_strategy"]
