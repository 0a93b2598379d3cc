"""``lightning.pytorch.trainer.connectors.signal_connector``: SIGTERM, SIGUSR1 (SLURM requeue) and Ctrl-C
during fit are handled by :class:`fulmen.trainer.signals.SignalConnector`."""

from fulmen.trainer.signals import SignalConnector

__all__ = ["SignalConnector"]
