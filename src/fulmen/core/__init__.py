from fulmen.core.datamodule import LightningDataModule
from fulmen.core.module import LightningModule
from fulmen.core.optimizer import LightningOptimizer

__all__ = ["LightningDataModule", "LightningModule", "LightningOptimizer"]
