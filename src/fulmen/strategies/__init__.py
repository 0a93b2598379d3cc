from fulmen.strategies.strategy import SingleDeviceStrategy, Strategy

__all__ = ["SingleDeviceStrategy", "Strategy"]
