"""Writing checkpoints so a crash never leaves a broken file, and reading them without running code.

Writes go to a temporary file in the target directory, are flushed and fsynced, then renamed over the
final name (``os.replace`` is atomic on POSIX and Windows): at any instant the final name holds either the
previous complete file or the new complete file.

Paths may be URLs (``memory://``, ``s3://`` ...): those go through ``cloud_io`` (upload under a temporary
name, then a move). The final file gets the permissions an ordinary new file gets under the process umask
(0644 under the usual 022), not the 0600 of the temporary file, so a teammate or a serving process running as
another user can read it.

Reads use ``torch.load(weights_only=True)`` unless the caller says it trusts the file: the unpickler only
builds tensors, containers and primitives (plus the allow-list below, and the classes the user registered with
``torch.serialization.add_safe_globals``), so a checkpoint cannot make the reader import or call anything. A
file holding other objects (a module or function among the hyperparameters, as Lightning writes them too) is
refused with an error naming those classes and the two ways to allow them.
"""

from __future__ import annotations

import contextlib
import enum
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
# ``AttributeDict`` for some hyperparameters; it is mapped to fulmen's by name, never imported. Paths and
# frozensets are common hyperparameter values that torch does not allow by default; building one from a file
# runs no code of the file's choosing (a path is made of strings), so fulmen's checkpoints with a path among
# the hyperparameters load without asking the user to trust them.
def _allowed_globals() -> list[Any]:
    import pathlib

    allowed: list[Any] = [AttributeDict, frozenset, pathlib.PurePosixPath, pathlib.PureWindowsPath, pathlib.PosixPath,
                          pathlib.WindowsPath]  # fmt: skip
    if _supports_named_globals():
        allowed.append((AttributeDict, "lightning.fabric.utilities.data.AttributeDict"))
        allowed.append((AttributeDict, "pytorch_lightning.utilities.parsing.AttributeDict"))
        allowed.append((AttributeDict, "lightning.pytorch.utilities.parsing.AttributeDict"))
    return allowed


def _supports_named_globals() -> bool:
    return _torch_version() >= (2, 5)


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
    if ctx is None:  # torch < 2.5: register globally (only fulmen's own allow-list, all of it harmless)
        torch.serialization.add_safe_globals(_allowed_globals())
        yield
        return
    # on top of what the user registered with add_safe_globals (the context keeps that list and restores it)
    with ctx(_allowed_globals()):
        yield


_TRUE = ("1", "y", "yes", "true")


def resolve_weights_only(weights_only: bool | None) -> bool:
    """Whether a load with ``weights_only`` uses the safe unpickler. ``None`` is torch's default since 2.6:
    safe, unless the user set ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` (torch's own switch for trusting every
    file); ``TORCH_FORCE_WEIGHTS_ONLY_LOAD=1`` makes every load safe. Resolved here, as torch resolves it, so
    that a refusal is known to be one. (torch 2.4 / 2.5 defaulted to the full unpickler; fulmen stays safe there.)"""
    if os.getenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "0").lower() in _TRUE:
        return True
    if weights_only is None:
        return os.getenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "0").lower() not in _TRUE
    return weights_only


def _torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split("+")[0].split(".")[:2]
    return int(major), int(minor)


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


def load(
    path: _PathLike, map_location: Any = None, weights_only: bool | None = True, mmap: bool = False
) -> dict[str, Any]:
    """Load a checkpoint file. ``weights_only=False`` runs the full unpickler: only for files you trust;
    ``None`` is torch's default (see :func:`resolve_weights_only`). ``mmap``: a local file's tensors are mapped
    from the file, not read into memory (processes that load the same file then share the page cache's copy)."""
    path_str = os.fspath(path)
    if str(path_str).endswith(".safetensors"):
        return load_safetensors(path_str, map_location)
    if not cloud_io.exists(path_str):
        raise FileNotFoundError(f"Checkpoint file not found: {path_str!r}.")
    source: Any = cloud_io.local(path_str)
    if cloud_io.is_remote(path_str):
        source = io.BytesIO(cloud_io.read_bytes(path_str))
        mmap = False  # torch maps files only
    safe = resolve_weights_only(weights_only)
    try:
        if not safe:
            return torch.load(source, map_location=map_location, weights_only=False, mmap=mmap)
        with _safe_globals():
            checkpoint = torch.load(source, map_location=map_location, weights_only=True, mmap=mmap)
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
        if not isinstance(err, pickle.UnpicklingError) or not safe:
            raise
        raise UnsafeCheckpointError(_refusal(path_str, source, err)) from None
    if not isinstance(checkpoint, dict):
        raise ValueError(
            f"{path_str!r} is not a checkpoint: it holds a {type(checkpoint).__name__}, not a dict."
        )
    return checkpoint


def _load(path_or_url: Any, map_location: Any = None, weights_only: bool | None = None) -> Any:
    """Lightning's ``pl_load``: a checkpoint from a path (local or fsspec, as :func:`load` reads it), an
    ``http(s)://`` URL (through torch.hub's download cache; ``weights_only=None`` trusts it there, as Lightning
    does) or an open binary file."""
    if isinstance(path_or_url, (str, os.PathLike)):
        if str(path_or_url).startswith(("http://", "https://")):
            return torch.hub.load_state_dict_from_url(
                str(path_or_url), map_location=map_location, weights_only=bool(weights_only)
            )
        return load(path_or_url, map_location=map_location, weights_only=weights_only)
    if not resolve_weights_only(weights_only):
        return torch.load(path_or_url, map_location=map_location, weights_only=False)
    with _safe_globals():
        return torch.load(path_or_url, map_location=map_location, weights_only=True)


def _refusal(path: str, source: Any, err: BaseException) -> str:
    """The message for a file the safe unpickler refused: every class and function it would need (torch's own
    message names only the first) and both ways to load it. Same exception class as torch's
    (``pickle.UnpicklingError``), so code written for Lightning catches it."""
    names = _unsafe_globals(source)
    if not names:  # not a missing global (an opcode the safe unpickler lacks ...): torch's reason says what
        detail = str(err).strip().splitlines()
        reason = next((line for line in detail if "GLOBAL" in line or "Unsupported" in line), detail[0] if detail else "")
        return (
            f"Refusing to load {path!r}: it holds objects that only the full unpickler can rebuild, which runs code "
            f"the file names ({reason.strip()}). If you trust this file, load it with weights_only=False (e.g. "
            "`Model.load_from_checkpoint(path, weights_only=False)` or `trainer.fit(model, ckpt_path=path, "
            "weights_only=False)`)."
        )
    short = ", ".join(name.rpartition(".")[2] for name in names)
    return (
        f"Refusing to load {path!r} with weights_only=True: it holds objects of {', '.join(names)}, which torch "
        "does not rebuild without being told to (rebuilding an object runs code the file names). A checkpoint "
        "holds such objects when save_hyperparameters() recorded a module, a function or another object among "
        "__init__'s arguments. If you trust this file, either\n"
        "  - load it with weights_only=False: `Model.load_from_checkpoint(path, weights_only=False)`, "
        "`trainer.fit(model, ckpt_path=path, weights_only=False)` (the same for validate/test/predict; "
        "LightningCLI: --weights_only=false), or\n"
        f"  - allow these classes and functions, and only them: `torch.serialization.add_safe_globals([{short}])` "
        f"before loading, or load inside `with torch.serialization.safe_globals([{short}]):`."
    )


def _unsafe_globals(source: Any) -> list[str]:
    """The ``module.name`` of each class or function the checkpoint's pickle names that the safe unpickler
    would refuse (after fulmen's and the user's allow-lists): torch reads the names without importing them."""
    find = getattr(torch.serialization, "get_unsafe_globals_in_checkpoint", None)  # torch >= 2.5
    if find is None:
        return []
    if isinstance(source, io.BytesIO):
        source.seek(0)
    try:
        with _safe_globals():
            return sorted(find(source))
    except Exception:  # only the message depends on it: fall back to torch's own
        return []


# The hyperparameters a file could not hold, by name: load_from_checkpoint then asks for them (or uses __init__'s
# default, with a warning). A safetensors export writes it; so did fulmen's .ckpt files before they stored the
# objects themselves as Lightning does, which is why it is still read.
HPARAMS_LEFT_OUT_KEY = "hyper_parameters_left_out"


def _is_json(value: Any) -> bool:
    """Whether JSON gives ``value`` back as it was (a tuple comes back as a list, which is close enough)."""
    if isinstance(value, enum.Enum):  # a str or int enum would come back as its value, not as the member
        return False
    if value is None or isinstance(value, bool | int | float | str):
        return True
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_is_json(v) for v in value)
    return False


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
        # JSON holds plain values only: an object (a module, a function, a path ...) is left out and named, so
        # that load_from_checkpoint asks for it instead of passing its text to __init__
        hparams = {str(k): v for k, v in dict(checkpoint["hyper_parameters"]).items()}
        left_out = sorted(k for k, v in hparams.items() if not _is_json(v))
        metadata["hyper_parameters"] = json.dumps({k: v for k, v in hparams.items() if k not in left_out})
        if left_out:
            metadata[HPARAMS_LEFT_OUT_KEY] = json.dumps(left_out)
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
    if HPARAMS_LEFT_OUT_KEY in metadata:
        checkpoint[HPARAMS_LEFT_OUT_KEY] = json.loads(metadata[HPARAMS_LEFT_OUT_KEY])
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
