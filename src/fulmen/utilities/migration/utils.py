"""Applying the format upgrades of :mod:`.migration` to a checkpoint, and reading files that pickled objects
of old Lightning versions.

A checkpoint records the Lightning version whose format it has (``pytorch-lightning_version``; fulmen writes
the version it matches). Loading runs the upgrades for every newer version, in place, and records the
original version under ``legacy_pytorch-lightning_version``.
"""

from __future__ import annotations

import importlib
import logging
import os
import pickle
import sys
import threading
import warnings
from types import ModuleType, TracebackType
from typing import Any

from fulmen.utilities import argparse as argparse_module
from fulmen.utilities import enums as enums_module
from fulmen.utilities.enums import LightningEnum
from fulmen.utilities.imports import LIGHTNING_VERSION, parse_version
from fulmen.utilities.migration.migration import _migration_index
from fulmen.utilities.rank_zero import rank_zero_warn
from fulmen.utilities.warnings import PossibleUserWarning

_log = logging.getLogger(__name__)
_CHECKPOINT = dict[str, Any]
_PATH = str | os.PathLike[str]
_VERSION_KEY = "pytorch-lightning_version"
_LEGACY_VERSION_KEY = "legacy_pytorch-lightning_version"
# the patch changes process-wide state (sys.modules, pickle.Unpickler): one load at a time
_lock = threading.Lock()


def migrate_checkpoint(
    checkpoint: _CHECKPOINT, target_version: str | None = None
) -> tuple[_CHECKPOINT, dict[str, list[str]]]:
    """Upgrade ``checkpoint`` (a loaded checkpoint dict) in place to the format of Lightning 2.6, the one
    fulmen reads and writes. Returns it with the upgrades applied (``{version: [function names]}``).

    ``target_version`` stops at the upgrades of that version (included). A checkpoint newer than that format
    is left as it is, with a warning. The dict is not copied, so that a large checkpoint is never held twice.
    """
    found = _get_version(checkpoint)
    if parse_version(found) > parse_version(LIGHTNING_VERSION):
        rank_zero_warn(
            f"The loaded checkpoint was produced with Lightning v{found}, which is newer than the format this "
            f"fulmen reads (Lightning v{LIGHTNING_VERSION}): it is loaded as it is, and keys it does not know "
            "are ignored.",
            category=PossibleUserWarning,
        )
        return checkpoint, {}
    applied: dict[str, list[str]] = {}
    for version, upgrades in _migration_index().items():
        if not _should_upgrade(checkpoint, version, target_version):
            continue
        for upgrade in upgrades:
            checkpoint = upgrade(checkpoint)
        applied[version] = [upgrade.__name__ for upgrade in upgrades]
    if found != LIGHTNING_VERSION:
        _set_legacy_version(checkpoint, found)
    _set_version(checkpoint, LIGHTNING_VERSION)
    return checkpoint, applied


class pl_legacy_patch:
    """While active, files that pickled objects of old Lightning versions can be unpickled (``torch.load``
    with ``weights_only=False``):

    - ``pytorch_lightning.X`` and ``lightning.pytorch.X`` are read as ``fulmen.X`` where fulmen has it;
    - ``utilities.argparse_utils`` (removed in Lightning 1.4) and ``_gpus_arg_default`` (1.2.8), which old
      checkpoints pickled with the hyperparameters, exist again;
    - ``utilities.enums._FaultTolerantMode`` (removed in 2.0) exists again.

    Use it as ``with pl_legacy_patch(): checkpoint = torch.load(path, weights_only=False)``.
    """

    def __enter__(self) -> pl_legacy_patch:
        _lock.acquire()
        legacy_argparse = ModuleType("fulmen.utilities.argparse_utils")
        legacy_argparse._gpus_arg_default = _identity  # type: ignore[attr-defined]
        sys.modules["fulmen.utilities.argparse_utils"] = legacy_argparse
        argparse_module._gpus_arg_default = _identity  # type: ignore[attr-defined]
        enums_module._FaultTolerantMode = _FaultTolerantMode  # type: ignore[attr-defined]
        self._old_unpickler = pickle.Unpickler
        pickle.Unpickler = _RedirectingUnpickler  # type: ignore[misc, assignment]
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        exc_traceback: TracebackType | None,
    ) -> None:
        try:
            for module, name in ((argparse_module, "_gpus_arg_default"), (enums_module, "_FaultTolerantMode")):
                if hasattr(module, name):
                    delattr(module, name)
            sys.modules.pop("fulmen.utilities.argparse_utils", None)
            pickle.Unpickler = self._old_unpickler  # type: ignore[misc]
        finally:
            _lock.release()


def _identity(value: Any) -> Any:
    return value


class _FaultTolerantMode(LightningEnum):
    DISABLED = "disabled"
    AUTOMATIC = "automatic"
    MANUAL = "manual"


def _pl_migrate_checkpoint(checkpoint: _CHECKPOINT, checkpoint_path: _PATH | None = None) -> _CHECKPOINT:
    """:func:`migrate_checkpoint` as loading runs it: a file that needed upgrades is named in an info
    message with the command that upgrades it for good. A dict without a version (not written by a trainer:
    a safetensors export, a hand-made dict) is left as it is."""
    if _VERSION_KEY not in checkpoint:
        return checkpoint
    old_version = _get_version(checkpoint)
    checkpoint, applied = migrate_checkpoint(checkpoint)
    if applied and checkpoint_path is not None:
        # relative to where the user is, so that the command can be pasted as it is (on Windows a relative
        # path across drives does not exist)
        path = os.path.abspath(checkpoint_path) if sys.platform == "win32" else os.path.relpath(checkpoint_path)
        _log.info(
            f"fulmen automatically upgraded your loaded checkpoint from v{old_version} to "
            f"v{_get_version(checkpoint)}. To apply the upgrade to your files permanently, run "
            f"`python -m fulmen.utilities.upgrade_checkpoint {path}`"
        )
    return checkpoint


def _get_version(checkpoint: _CHECKPOINT) -> str:
    """The Lightning version whose format ``checkpoint`` has."""
    try:
        return str(checkpoint[_VERSION_KEY])
    except KeyError:
        raise KeyError(
            f"{_VERSION_KEY!r}: the checkpoint does not record the Lightning version that wrote it (its keys: "
            f"{sorted(map(str, checkpoint))[:10]}), so it cannot be upgraded. Set "
            f"checkpoint[{_VERSION_KEY!r}] to that version first."
        ) from None


def _set_version(checkpoint: _CHECKPOINT, version: str) -> None:
    checkpoint[_VERSION_KEY] = version


def _set_legacy_version(checkpoint: _CHECKPOINT, version: str) -> None:
    """Record the version a checkpoint was written with, unless an earlier upgrade already recorded it."""
    checkpoint.setdefault(_LEGACY_VERSION_KEY, version)


def _should_upgrade(checkpoint: _CHECKPOINT, target: str, max_version: str | None = None) -> bool:
    """Whether the upgrades of version ``target`` apply: the checkpoint is older, and ``target`` is not past
    ``max_version``."""
    wanted = parse_version(target)
    if max_version is not None and wanted > parse_version(max_version):
        return False
    return parse_version(_get_version(checkpoint)) < wanted


_LEGACY_ROOTS = ("pytorch_" + "lightning", "lightning.pytorch")


def as_fulmen_module(module: str) -> str:
    """``pytorch_lightning.X`` / ``lightning.pytorch.X`` -> ``fulmen.X`` when fulmen has that module (its
    objects are the ones this process uses); any other module name as it is."""
    for root in _LEGACY_ROOTS:
        if module == root or module.startswith(root + "."):
            target = "fulmen" + module[len(root) :]
            try:
                importlib.import_module(target)
            except ImportError:
                return module
            return target
    return module


_patch_pl_to_mirror_if_necessary = as_fulmen_module  # Lightning's name


class _RedirectingUnpickler(pickle._Unpickler):
    """An unpickler that reads old Lightning objects as fulmen's (see :func:`_patch_pl_to_mirror_if_necessary`)."""

    def find_class(self, module: str, name: str) -> Any:
        target = as_fulmen_module(module)
        if target != module and hasattr(importlib.import_module(target), name):
            warnings.warn(f"Redirecting import of {module}.{name} to {target}.{name}", stacklevel=2)
            return super().find_class(target, name)
        return super().find_class(module, name)
