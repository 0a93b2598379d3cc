from fulmen.strategies.ddp import DDPStrategy
from fulmen.strategies.strategy import SingleDeviceStrategy, Strategy

__all__ = ["DDPStrategy", "SingleDeviceStrategy", "Strategy"]
