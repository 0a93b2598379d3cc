"""Serving checks: ``ServableModule`` (the API a model implements to be served over HTTP) and
``ServableModuleValidator`` (a callback that serves the model and checks one request when training starts).

The validator needs ``fastapi``, ``uvicorn`` and ``requests`` (``pip install 'fulmen[serve]'``); they are
imported when it is made, not with this package.
"""

from fulmen.serve.servable_module import ServableModule
from fulmen.serve.servable_module_validator import ServableModuleValidator

__all__ = ["ServableModule", "ServableModuleValidator"]

from fulmen.utilities.imports import lazy_exports as _lazy_exports

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {})
