"""Lightning's import path ``lightning.pytorch.trainer.connectors.logger_connector.fx_validator``: which hooks
may call ``self.log``, with which ``on_step`` / ``on_epoch`` values and defaults, is checked by
:meth:`fulmen.runtime.results.ResultCollection.log` when a value is logged (a hook that may not log raises
``MisconfigurationException`` naming it)."""

from fulmen.runtime.results import ResultCollection
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException

__all__ = ["ResultCollection"]
