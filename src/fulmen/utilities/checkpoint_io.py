"""Writing checkpoints so a crash never leaves a broken file, and reading them without running code.

Writes go to a temporary file in the target directory, are flushed and fsynced, then renamed over the
final name (``os.replace`` is atomic on POSIX and Windows): at any instant the final name holds either the
previous complete file or the new complete file.

Paths may be URLs (``memory://``, ``s3://`` ...): those go through ``cloud_io`` (upload under a temporary
name, then a move). The final file gets the permissions an ordinary new file gets under the process umask
(0644 under the usual 022), not the 0600 of the temporary file, so a teammate or a serving process running as
another user can read it.

Reads use ``torch.load(weights_only=True)``: the unpickler only builds tensors, containers and primitives
(plus the allow-list below), so a checkpoint cannot make the reader import or call anything.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from fulmen.utilities import cloud_io
from fulmen.utilities.parsing import AttributeDict

_PathLike = str | os.PathLike[str]


class CheckpointWriteError(OSError):
    """A checkpoint could not be written; the file under the final name (if any) is untouched."""


class UnsafeCheckpointError(pickle.UnpicklingError):
    """A checkpoint holds objects that only a full (code-running) unpickle could build."""


class CorruptCheckpointError(RuntimeError):
    """A file that is not a complete checkpoint: cut short (a copy or download that stopped), empty, or not a
    ``torch.save`` file at all."""


# Non-tensor types that checkpoints may hold besides containers and primitives. Lightning writes its own
# ``AttributeDict`` for some hyperparameters; it is mapped to fulmen's by name, never imported.
def _allowed_globals() -> list[Any]:
    allowed: list[Any] = [AttributeDict]
    if _supports_named_globals():
        allowed.append((AttributeDict, "lightning.fabric.utilities.data.AttributeDict"))
        allowed.append((AttributeDict, "pytorch_lightning.utilities.parsing.AttributeDict"))
        allowed.append((AttributeDict, "lightning.pytorch.utilities.parsing.AttributeDict"))
    return allowed


def _supports_named_globals() -> bool:
    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    return version >= (2, 5)


def atomic_write(path: _PathLike, write: Callable[[io.BufferedWriter], object]) -> None:
    """Call ``write(f)`` on a temporary file next to ``path``, make it durable, then rename it to ``path``."""
    if cloud_io.is_remote(path):
        try:
            cloud_io.write_remote(path, write)  # type: ignore[arg-type]
        except OSError as err:
            raise CheckpointWriteError(
                err.errno, f"Writing checkpoint {os.fspath(path)!r} failed: {err}. The previous file under "
                "that name (if any) is intact; check the storage's credentials and space, and save again.",
            ) from err
        return
    path = Path(cloud_io.local(path))
    directory = path.parent
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    except OSError as err:
        raise CheckpointWriteError(
            err.errno,
            f"Cannot write checkpoint {str(path)!r}: {err.strerror or err}. Check that the directory "
            "exists and is writable, or choose another `dirpath`.",
        ) from err
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; a checkpoint is an ordinary file
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        if isinstance(err, OSError):
            raise CheckpointWriteError(
                err.errno,
                f"Writing checkpoint {str(path)!r} failed: {err.strerror or err}. The previous file "
                "under that name (if any) is intact; free disk space or fix permissions and save again.",
            ) from err
        raise
    fsync_directory(directory)


_UMASK_LOCK = threading.Lock()


def _umask() -> int:
    """The process umask. Reading it means setting it, so the two calls are serialised."""
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def fsync_directory(directory: Path) -> None:
    """Make the rename itself durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save(checkpoint: dict[str, Any], path: _PathLike) -> None:
    """Save ``checkpoint`` atomically with ``torch.save``."""
    atomic_write(path, lambda f: torch.save(checkpoint, f))


@contextlib.contextmanager
def _safe_globals() -> Iterator[None]:
    ctx = getattr(torch.serialization, "safe_globals", None)
    if ctx is None:  # torch < 2.5: register globally (only fulmen's own AttributeDict)
        torch.serialization.add_safe_globals([AttributeDict])
        yield
        return
    with ctx(_allowed_globals()):
        yield


_READ_ERRORS = (EOFError, OSError, KeyError, IndexError, ValueError, RuntimeError, pickle.UnpicklingError)


def _is_complete_archive(source: Any) -> bool:
    """Whether ``source`` (a local path or a BytesIO) is a readable zip archive with a pickle inside, the
    format ``torch.save`` writes."""
    import zipfile

    if isinstance(source, io.BytesIO):
        source.seek(0)
    try:
        with zipfile.ZipFile(source) as archive:
            return archive.testzip() is None and any(n.endswith("data.pkl") for n in archive.namelist())
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        return False


def _describe(source: Any) -> str:
    size = source.getbuffer().nbytes if isinstance(source, io.BytesIO) else os.path.getsize(source)
    return "the file is empty" if size == 0 else f"the file has {size} bytes"


def load(path: _PathLike, map_location: Any = None, weights_only: bool = True) -> dict[str, Any]:
    """Load a checkpoint file. ``weights_only=False`` runs the full unpickler: only for files you trust."""
    path_str = os.fspath(path)
    if str(path_str).endswith(".safetensors"):
        return load_safetensors(path_str, map_location)
    if not cloud_io.exists(path_str):
        raise FileNotFoundError(f"Checkpoint file not found: {path_str!r}.")
    source: Any = cloud_io.local(path_str)
    if cloud_io.is_remote(path_str):
        source = io.BytesIO(cloud_io.read_bytes(path_str))
    try:
        if not weights_only:
            return torch.load(source, map_location=map_location, weights_only=False)
        with _safe_globals():
            checkpoint = torch.load(source, map_location=map_location, weights_only=True)
    except _READ_ERRORS as err:
        # torch reports a damaged file as whatever its reader tripped on first (EOFError, OSError, KeyError,
        # ...); say what it is when the file is not a whole torch.save archive
        if not _is_complete_archive(source):
            raise CorruptCheckpointError(
                f"{path_str!r} is not a complete checkpoint: {_describe(source)}, which is not a whole "
                f"torch.save file ({type(err).__name__}: {str(err)[:120] or 'no detail'}). It was cut short (a "
                "copy, download or save that stopped) or is some other kind of file. Load another checkpoint (an earlier one, or "
                "ckpt_path='last'), or copy the file again."
            ) from err
        if not isinstance(err, pickle.UnpicklingError) or not weights_only:
            raise
        detail = str(err).strip().splitlines()
        reason = next(
            (line for line in detail if "GLOBAL" in line or "Unsupported" in line),
            detail[0] if detail else "",
        )
        raise UnsafeCheckpointError(
            f"Refusing to load {path_str!r}: it holds objects that can only be rebuilt by running code from the "
            f"file ({reason.strip()}). fulmen loads checkpoints with weights_only=True so that a file cannot run "
            "code on your machine. If you trust this file, load it with weights_only=False (e.g. "
            "`Model.load_from_checkpoint(path, weights_only=False)` or `trainer.fit(..., ckpt_path=path, "
            "weights_only=False)`)."
        ) from None
    if not isinstance(checkpoint, dict):
        raise ValueError(
            f"{path_str!r} is not a checkpoint: it holds a {type(checkpoint).__name__}, not a dict."
        )
    return checkpoint


def save_safetensors(checkpoint: dict[str, Any], path: _PathLike) -> None:
    """Weights-only export: the ``state_dict`` tensors plus the hyperparameters as JSON metadata."""
    import json

    try:
        from safetensors.torch import save as st_save
    except ImportError as err:
        raise ModuleNotFoundError(
            f"Saving {os.fspath(path)!r} needs the `safetensors` package: pip install safetensors."
        ) from err
    tensors = {k: v.detach().contiguous().cpu() for k, v in checkpoint["state_dict"].items()}
    metadata = {"format": "pt", "epoch": str(checkpoint.get("epoch", 0)),
                "global_step": str(checkpoint.get("global_step", 0))}  # fmt: skip
    if "hyper_parameters" in checkpoint:
        metadata["hyper_parameters"] = json.dumps(checkpoint["hyper_parameters"], default=str)
    if "hparams_name" in checkpoint:
        metadata["hparams_name"] = str(checkpoint["hparams_name"])
    data = st_save(tensors, metadata=metadata)
    atomic_write(path, lambda f: f.write(data))


def load_safetensors(path: _PathLike, map_location: Any = None) -> dict[str, Any]:
    import json

    try:
        from safetensors import safe_open
    except ImportError as err:
        raise ModuleNotFoundError(
            f"Loading {os.fspath(path)!r} needs the `safetensors` package: pip install safetensors."
        ) from err
    device = map_location if isinstance(map_location, str | torch.device) else "cpu"
    state: dict[str, torch.Tensor] = {}
    if cloud_io.is_remote(path):
        from safetensors.torch import load as st_load

        data = cloud_io.read_bytes(path)
        state = {k: v.to(device) for k, v in st_load(data).items()}
        metadata = _safetensors_metadata(data)
    else:
        with safe_open(cloud_io.local(path), framework="pt", device=str(device)) as f:
            metadata = f.metadata() or {}
            for key in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                state[key] = f.get_tensor(key)
    checkpoint: dict[str, Any] = {
        "state_dict": state,
        "epoch": int(metadata.get("epoch", 0)),
        "global_step": int(metadata.get("global_step", 0)),
    }
    if "hyper_parameters" in metadata:
        checkpoint["hyper_parameters"] = json.loads(metadata["hyper_parameters"])
    if "hparams_name" in metadata:
        checkpoint["hparams_name"] = metadata["hparams_name"]
    return checkpoint


def _safetensors_metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file held in memory (its header is 8 bytes of length + JSON)."""
    import json

    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    return dict(header.get("__metadata__") or {})


# -- optional methods of a checkpoint writer (a CheckpointIO) ----------------------------------------------------
# fulmen's CheckpointIO has both; one written for Lightning has neither: these call the writer's own when it has
# one, else do what the defaults do.
def link_through(io: Any, target: _PathLike, link: _PathLike) -> None:
    """``io.link_checkpoint(target, link)``; for a writer without it, the link is made at once."""
    method = getattr(io, "link_checkpoint", None)
    if method is not None:
        method(target, link)
    else:
        cloud_io.link(target, link)


def raise_failed_save_of(io: Any) -> None:
    """``io.raise_failed_save()``; a writer without it saves before returning: nothing to report."""
    method = getattr(io, "raise_failed_save", None)
    if method is not None:
        method()
