"""What the Trainer builds from its flags: the callbacks (:mod:`.callback_connector`), the loggers
(:mod:`.logger_connector`) and the model a stage runs (:func:`fulmen.trainer.setup.prepare_model`).

The other modules stand for Lightning's connectors of the same names and re-export the fulmen objects doing
that job: :mod:`.accelerator_connector`, :mod:`.checkpoint_connector`, :mod:`.data_connector`,
:mod:`.signal_connector`.
"""

from fulmen.trainer.connectors.callback_connector import attach_model_callbacks, build_callbacks
from fulmen.trainer.connectors.logger_connector.logger_connector import build_loggers
from fulmen.trainer.setup import prepare_model

__all__ = ["attach_model_callbacks", "build_callbacks", "build_loggers", "prepare_model"]

from fulmen.utilities.imports import lazy_exports as _lazy_exports

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {})
