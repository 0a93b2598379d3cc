"""Lightning's import path ``lightning.pytorch.trainer.connectors.logger_connector``: the loggers the Trainer
builds (:mod:`.logger_connector`), what ``self.log`` stores (:mod:`.result`) and which hooks may log
(:mod:`.fx_validator`)."""

from fulmen.trainer.connectors.logger_connector.logger_connector import MetricsHub, build_loggers

__all__ = ["MetricsHub", "build_loggers"]

from fulmen.utilities.imports import lazy_exports as _lazy_exports

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {})
