"""``lightning.pytorch.trainer.connectors.logger_connector.result``: what ``self.log`` stores is
:mod:`fulmen.runtime.results` (a :class:`ResultCollection` per stage run, a :class:`ResultMetric` per key)."""

from fulmen.runtime.results import LogMeta, ResultCollection, ResultMetric, to_scalars

__all__ = ["LogMeta", "ResultCollection", "ResultMetric", "to_scalars"]
