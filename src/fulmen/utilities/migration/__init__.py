"""Upgrading checkpoints written by older Lightning versions to the format fulmen (and Lightning 2.6) reads."""

from fulmen.utilities.migration.utils import migrate_checkpoint, pl_legacy_patch

__all__ = ["migrate_checkpoint", "pl_legacy_patch"]

from fulmen.utilities.imports import lazy_exports as _lazy_exports

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {})
