"""Upgrading checkpoints written by older Lightning versions to the format fulmen (and Lightning 2.6) reads."""

from fulmen.utilities.migration.utils import migrate_checkpoint, pl_legacy_patch

__all__ = ["migrate_checkpoint", "pl_legacy_patch"]
