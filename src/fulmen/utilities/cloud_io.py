"""Paths that may be URLs: one set of file operations for local disks and any fsspec filesystem.

A path is *local* when it has no ``protocol://`` prefix or the prefix is ``file://``; ``~`` is expanded and the
result is an ordinary OS path, handled with ``os`` calls (no fsspec import, the fast path of every run). Any
other prefix (``memory://``, ``s3://``, ``gs://``, ``abfs://`` ...) is *remote* and goes through fsspec, which is
imported only then. A remote protocol whose package is missing (``s3://`` without ``s3fs``) raises
``ModuleNotFoundError`` naming the package, so a run fails before training rather than after it.

Why not hand every path to fsspec: its local filesystem offers no fsync and no atomic rename, which are what
keep a crash from leaving a broken checkpoint on a local disk (see ``checkpoint_io.atomic_write``).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import uuid
from collections.abc import Callable
from typing import Any

_PathLike = str | os.PathLike[str]
_PROTOCOL = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.\-]*)://")
_LOCAL_PROTOCOLS = frozenset({"file", "local"})


def protocol(path: _PathLike) -> str | None:
    """``"s3"`` for ``s3://bucket/x``; None for a plain path."""
    match = _PROTOCOL.match(os.fspath(path))
    return match.group(1).lower() if match else None


def is_remote(path: _PathLike) -> bool:
    """True for a URL whose filesystem is not the local disk (``memory://`` counts as remote)."""
    proto = protocol(path)
    return proto is not None and proto not in _LOCAL_PROTOCOLS


def normalize(path: _PathLike) -> str:
    """A local path made absolute (``~`` expanded, ``file://`` dropped, symlinks resolved); a URL as given,
    less any trailing slash."""
    text = os.fspath(path)
    if is_remote(text):
        return text.rstrip("/") if not text.endswith("://") else text
    if protocol(text) is not None:
        text = _PROTOCOL.sub("", text, count=1)
    return os.path.realpath(os.path.expanduser(text))


def local(path: _PathLike) -> str:
    """A local path with ``~`` expanded and ``file://`` dropped, not made absolute; a URL unchanged."""
    text = os.fspath(path)
    if is_remote(text):
        return text
    if protocol(text) is not None:
        text = _PROTOCOL.sub("", text, count=1)
    return os.path.expanduser(text)


def join(base: _PathLike, *parts: str) -> str:
    base = os.fspath(base)
    if not is_remote(base):
        return os.path.join(base, *parts)
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts if p)])


def dirname(path: _PathLike) -> str:
    path = os.fspath(path)
    if not is_remote(path):
        return os.path.dirname(path)
    head, _, _ = path.rstrip("/").rpartition("/")
    return head


def basename(path: _PathLike) -> str:
    path = os.fspath(path)
    return os.path.basename(path) if not is_remote(path) else path.rstrip("/").rpartition("/")[2]


def filesystem(path: _PathLike) -> Any:
    """The fsspec filesystem for ``path``; ``ModuleNotFoundError`` naming the package when it is missing."""
    import fsspec
    from fsspec.registry import known_implementations

    proto = protocol(path) or "file"
    try:
        return fsspec.filesystem(proto)
    except ImportError as err:
        known = known_implementations.get(proto, {})
        hint = known.get("err") or f"install the fsspec implementation for {proto!r}"
        raise ModuleNotFoundError(
            f"{os.fspath(path)!r} is on the {proto!r} filesystem, whose package is not installed: {hint}."
        ) from err
    except ValueError as err:
        raise ValueError(f"{os.fspath(path)!r}: fsspec knows no filesystem for {proto!r}:// ({err}).") from err


def get_filesystem(path: _PathLike, **kwargs: Any) -> Any:
    """The fsspec filesystem of ``path`` (``LocalFileSystem`` for a plain path), made with ``kwargs`` (storage
    options such as ``anon=True``): Lightning's ``get_filesystem``, for code that works with fsspec itself.
    fulmen's own file operations are the functions of this module, which use the local disk without fsspec."""
    filesystem(path)  # a protocol whose package is missing fails here, naming the package
    from fsspec.core import url_to_fs

    return url_to_fs(os.fspath(path), **kwargs)[0]


def check_reachable(path: _PathLike | None, argument: str) -> None:
    """Fail now, naming ``argument``, when ``path`` is a URL whose filesystem cannot be loaded."""
    if path is None or not is_remote(path):
        return
    try:
        filesystem(path)
    except (ModuleNotFoundError, ValueError) as err:
        raise type(err)(f"{argument}={os.fspath(path)!r}: {err}") from None


def exists(path: _PathLike) -> bool:
    if not is_remote(path):
        return os.path.exists(local(path))
    return bool(filesystem(path).exists(os.fspath(path)))


def isdir(path: _PathLike) -> bool:
    if not is_remote(path):
        return os.path.isdir(local(path))
    return bool(filesystem(path).isdir(os.fspath(path)))


def isfile(path: _PathLike) -> bool:
    if not is_remote(path):
        return os.path.isfile(local(path))
    return bool(filesystem(path).isfile(os.fspath(path)))


def makedirs(path: _PathLike) -> None:
    if not is_remote(path):
        os.makedirs(local(path), exist_ok=True)
    else:
        filesystem(path).makedirs(os.fspath(path), exist_ok=True)


def listdir(path: _PathLike) -> list[str]:
    """The names (not paths) of the entries of directory ``path``; [] when it does not exist."""
    if not is_remote(path):
        directory = local(path)
        return os.listdir(directory) if os.path.isdir(directory) else []
    fs = filesystem(path)
    if not fs.isdir(os.fspath(path)):
        return []
    return [basename(p) for p in fs.ls(os.fspath(path), detail=False)]


def remove(path: _PathLike) -> None:
    """Delete a file; a missing file is not an error."""
    if not is_remote(path):
        with contextlib.suppress(FileNotFoundError):
            os.remove(local(path))
        return
    fs = filesystem(path)
    with contextlib.suppress(FileNotFoundError):
        fs.rm_file(os.fspath(path))


def read_bytes(path: _PathLike) -> bytes:
    if not is_remote(path):
        with open(local(path), "rb") as f:
            return f.read()
    fs = filesystem(path)
    with fs.open(os.fspath(path), "rb") as f:
        return bytes(f.read())


def copy(source: _PathLike, target: _PathLike) -> None:
    """Copy a file, atomically at ``target`` (used where a local run would symlink)."""
    data = read_bytes(source)
    write_remote(target, lambda f: f.write(data))


def link(target: _PathLike, link_path: _PathLike) -> None:
    """Point ``link_path`` at ``target`` atomically: a temporary relative symlink renamed over the old one, so a
    reader finds the old target or the new one, never no file. Object stores have no links: there ``link_path``
    becomes a copy of ``target``."""
    if is_remote(link_path):
        copy(target, link_path)
        return
    link_path, target = local(link_path), local(target)
    if os.path.abspath(link_path) == os.path.abspath(target):
        return  # a link to itself would replace the file with a loop
    tmp = f"{link_path}.tmp-link-{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.remove(tmp)
    try:
        os.symlink(os.path.relpath(target, os.path.dirname(link_path) or "."), tmp)
    except OSError:  # a filesystem without links (or Windows without the right to make them): a copy
        copy(target, link_path)
        return
    os.replace(tmp, link_path)


def write_remote(path: _PathLike, write: Callable[[io.BufferedIOBase], object]) -> None:
    """``write(f)`` into memory, upload under a temporary name in the same directory, move into place.

    Object stores replace an object whole on upload, and fsspec's move is a server-side copy there, so a
    reader sees the old file or the new one, never a half. Where the filesystem cannot move, the file is
    uploaded under its final name directly (still whole: the upload is one request)."""
    target = os.fspath(path)
    buffer = io.BytesIO()
    write(buffer)
    data = buffer.getvalue()
    fs = filesystem(target)
    parent = dirname(target)
    if parent and not parent.endswith("://"):
        fs.makedirs(parent, exist_ok=True)
    tmp = join(parent, f".{basename(target)}.{uuid.uuid4().hex[:8]}.tmp")
    fs.pipe_file(tmp, data)
    try:
        fs.mv(tmp, target)
    except (NotImplementedError, OSError):
        fs.pipe_file(target, data)
        with contextlib.suppress(OSError):
            fs.rm_file(tmp)


def write_text(path: _PathLike, text: str) -> None:
    """Replace the file at ``path`` (local or a URL) with ``text`` whole: a reader never sees half of it."""
    if is_remote(path):
        write_remote(path, lambda f: f.write(text.encode("utf-8")))
        return
    target = local(path)
    tmp = f"{target}.tmp"
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    os.replace(tmp, target)


def modified(path: _PathLike) -> float:
    """Modification time in seconds since the epoch (0.0 where the store does not say)."""
    if not is_remote(path):
        return os.path.getmtime(local(path))
    try:
        return float(filesystem(path).modified(os.fspath(path)).timestamp())
    except (NotImplementedError, OSError, AttributeError):
        return 0.0
