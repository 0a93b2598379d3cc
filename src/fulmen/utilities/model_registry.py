"""``ckpt_path="registry:..."``: checkpoints kept in Lightning's model registry (lightning.ai), by name.

A registry path names a model and optionally a version: ``"registry"`` (the trainer's ``model_registry``,
latest version), ``"registry:my-model"``, ``"registry:my-model:version:v3"``, ``"registry:version:v3"``.
A downloaded model lives under ``default_root_dir`` in a folder named after it (``my-model_v3``), where
:func:`find_model_local_ckpt_path` finds its checkpoint file. Downloading needs the ``litmodels`` package
(and a lightning.ai account); finding a model already downloaded is plain file work.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fulmen.trainer.trainer import Trainer

_PATH = str | os.PathLike[str]

_REGISTRY = re.compile(r"^registry(:.*|$)", re.IGNORECASE)


def _is_registry(text: _PATH | None) -> bool:
    """Whether ``text`` is a registry path: ``"registry"`` or ``"registry:..."``, in any case."""
    return isinstance(text, str) and _REGISTRY.match(text) is not None


def _parse_registry_model_version(ckpt_path: _PATH | None) -> tuple[str, str]:
    """``(model name, version)`` of a registry path, ``""`` for a part it leaves out."""
    if not ckpt_path or not _is_registry(ckpt_path):
        raise ValueError(
            f"Invalid registry path: {ckpt_path!r}. Use 'registry', 'registry:<model>', "
            "'registry:<model>:version:<version>' or 'registry:version:<version>'."
        )
    parts = str(ckpt_path).split(":")
    name = parts[1] if len(parts) >= 2 and parts[1].lower() != "version" else ""
    version = ""
    if len(parts) == 3 and parts[1].lower() == "version":
        version = parts[2]
    elif len(parts) == 4 and parts[2].lower() == "version":
        version = parts[3]
    return name, version


def _determine_model_name(ckpt_path: _PATH | None, default_model_registry: str | None) -> str:
    """``"name"`` or ``"name:version"`` of the model a registry path means; the name defaults to
    ``default_model_registry`` (the Trainer's ``model_registry``)."""
    name, version = _parse_registry_model_version(ckpt_path)
    name = name or default_model_registry or ""
    if not name:
        raise ValueError(
            f"Invalid model registry: {str(ckpt_path)!r} names no model and the Trainer has no `model_registry`. "
            "Name it in the path ('registry:<model>') or pass Trainer(model_registry='<model>')."
        )
    return f"{name}:{version}" if version else name


def _determine_model_folder(model_name: str, default_root_dir: str) -> str:
    """Where the model ``name[:version]`` is downloaded: a folder of ``default_root_dir`` named after it, with
    ``/`` and ``:`` made ``_`` (``org/model:v3`` -> ``org_model_v3``)."""
    if not model_name:
        raise ValueError(f"Invalid model registry: {model_name!r}: the model name is empty.")
    return os.path.join(default_root_dir, model_name.replace("/", "_").replace(":", "_"))


def find_model_local_ckpt_path(
    ckpt_path: _PATH | None, default_model_registry: str | None, default_root_dir: str
) -> str:
    """The checkpoint file (``*.ckpt``) of the registry model ``ckpt_path`` as downloaded under
    ``default_root_dir``."""
    model = _determine_model_name(ckpt_path, default_model_registry)
    folder = _determine_model_folder(model, default_root_dir)
    checkpoints = [name for name in os.listdir(folder) if name.endswith(".ckpt")]
    if not checkpoints:
        raise RuntimeError(
            f"Parsing files from downloaded model: {model}: {folder!r} holds no .ckpt file. Download the model "
            "again (download_model_from_registry) or pass the checkpoint's file path as ckpt_path."
        )
    return os.path.join(folder, checkpoints[0])


def download_model_from_registry(ckpt_path: _PATH | None, trainer: Trainer) -> None:
    """Download the registry model ``ckpt_path`` into its folder under ``trainer.default_root_dir`` (on
    local rank 0; every rank waits for it). Needs the ``litmodels`` package."""
    if trainer.local_rank == 0:
        try:
            from litmodels import download_model
        except ImportError as err:
            raise ImportError(
                f"ckpt_path={str(ckpt_path)!r} is a model in Lightning's model registry, which is downloaded with "
                "the `litmodels` package: it is not installed. Please install it with `pip install litmodels` "
                "(and log in to lightning.ai), or pass the path of a checkpoint file."
            ) from err
        default = _trainer_registry(trainer)
        model = _determine_model_name(ckpt_path, default)
        folder = _determine_model_folder(model, trainer.default_root_dir)
        if not download_model(model, download_dir=folder):
            raise RuntimeError(f"Download model failed - {model}: the registry returned no files.")
    trainer.strategy.barrier("download_model_from_registry")


def _trainer_registry(trainer: Any) -> str | None:
    """The model named by the Trainer's ``model_registry`` argument (without a ``:version`` it may carry): the
    model a registry path without a name means."""
    registry = getattr(getattr(trainer, "config", None), "model_registry", None)
    return str(registry).split(":")[0] if registry else None
