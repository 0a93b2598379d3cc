"""``lightning.pytorch.trainer.connectors.data_connector``: where a run's dataloaders come from (arguments, a
data module or the module) and how many batches count is :class:`fulmen.runtime.data.DataSource`."""

from fulmen.runtime.data import DataSource, split_datamodule

__all__ = ["DataSource", "split_datamodule"]
