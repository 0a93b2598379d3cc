"""``Logger``: where logged metrics and hyper-parameters go."""

from __future__ import annotations

import functools
import re
import statistics
from abc import ABC, abstractmethod
from argparse import Namespace
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fulmen.loggers.utilities import _scan_checkpoints
from fulmen.utilities import cloud_io
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.parsing import hparams_yaml
from fulmen.utilities.rank_zero import rank_zero_only


class Logger(ABC):
    """Base class of loggers. Only global rank zero writes (methods are wrapped by ``rank_zero_only``)."""

    @property
    @abstractmethod
    def name(self) -> str | None: ...

    @property
    @abstractmethod
    def version(self) -> int | str | None: ...

    @property
    def root_dir(self) -> str | None:
        return None

    @property
    def log_dir(self) -> str | None:
        return None

    @property
    def save_dir(self) -> str | None:
        return None

    @property
    def group_separator(self) -> str:
        return "/"

    @abstractmethod
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None: ...

    @abstractmethod
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None: ...

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        pass

    def save(self) -> None:
        pass

    def finalize(self, status: str) -> None:
        self.save()

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        pass


class _DummyExperiment:
    """What ``experiment`` is on ranks other than zero: every call is accepted and does nothing."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: self

    def __getitem__(self, index: Any) -> _DummyExperiment:
        return self


def rank_zero_experiment(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """For an ``experiment`` property: the real object on global rank zero, a do-nothing stand-in elsewhere
    (so user code calling ``logger.experiment.log(...)`` runs on every rank, and only rank zero writes)."""

    @functools.wraps(fn)
    def experiment(self: Any) -> Any:
        if getattr(rank_zero_only, "rank", 0) != 0:
            return _DummyExperiment()
        return fn(self)

    return experiment


def merge_dicts(
    dicts: Sequence[Mapping[Any, Any]],
    agg_key_funcs: Mapping[Any, Any] | None = None,
    default_func: Callable[[Sequence[float]], float] = statistics.mean,
) -> dict[Any, Any]:
    """One dict from several, each key's values (``None`` left out) reduced by ``agg_key_funcs[key]``, else by
    ``default_func``. Where the values are dicts they are merged the same way, with ``agg_key_funcs[key]`` (a
    mapping) for their keys: ``merge_dicts([{"a": 1, "b": {"c": 1}}, {"a": 3}], {"b": {"c": sum}})`` is
    ``{"a": 2, "b": {"c": 1}}``. A key whose values are all ``None`` is left out."""
    funcs = agg_key_funcs or {}
    keys = list(dict.fromkeys(key for d in dicts for key in d))  # in order of first appearance
    merged: dict[Any, Any] = {}
    for key in keys:
        values = [d[key] for d in dicts if key in d and d[key] is not None]
        if not values:
            continue
        func = funcs.get(key)
        if all(isinstance(v, Mapping) for v in values):
            merged[key] = merge_dicts(values, func if isinstance(func, Mapping) else None, default_func)
        else:
            merged[key] = (func or default_func)(values)
    return merged


def scan_checkpoints(checkpoint_callback: Any, logged: dict[str, float]) -> list[tuple[float, str, Any, list[str]]]:
    """The checkpoints of ``checkpoint_callback`` not logged yet (``logged``: path -> modification time when
    it was logged), oldest first, as ``(mtime, path, score, aliases)``: every one is "latest" when logged, and
    the best one also "best" (the aliases W&B and MLflow artifacts carry)."""
    best = getattr(checkpoint_callback, "best_model_path", "")
    return [(mtime, path, score, ["latest", "best"] if path == best else ["latest"])
            for mtime, path, score, _ in _scan_checkpoints(checkpoint_callback, logged)]  # fmt: skip


class CheckpointUploads:
    """``log_model`` for loggers that upload checkpoints (MLflow, W&B): ``"all"`` uploads each checkpoint as
    it is saved, ``True`` when training ends (or as saved when ``save_top_k=-1``: every file is kept then).
    Subclasses implement ``_log_checkpoints(checkpoint_callback)``."""

    _log_model: Any = False
    _checkpoint_callback: Any = None

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        if self._log_model == "all" or (self._log_model is True and getattr(checkpoint_callback, "save_top_k", 0) == -1):
            self._log_checkpoints(checkpoint_callback)
        elif self._log_model is True:
            self._checkpoint_callback = checkpoint_callback  # uploaded when training ends

    def _log_checkpoints(self, checkpoint_callback: Any) -> None:
        raise NotImplementedError


def checkpoint_metadata(checkpoint_callback: Any, path: str, score: Any) -> dict[str, Any]:
    """What is stored next to a logged checkpoint: its score, file name and the callback's settings."""
    settings = {key: getattr(checkpoint_callback, key, None)
                for key in ("monitor", "mode", "save_last", "save_top_k", "save_weights_only")}  # fmt: skip
    settings["_every_n_train_steps"] = getattr(checkpoint_callback, "every_n_train_steps", 0)  # Lightning's key
    return {
        "score": score.item() if hasattr(score, "item") else score,
        "original_filename": cloud_io.basename(path),
        "Checkpoint": settings,
    }


def next_version(root: str) -> int:
    """One more than the largest existing ``version_N`` folder in ``root`` (0 if none)."""
    versions = []
    for entry in cloud_io.listdir(root):
        match = re.fullmatch(r"version_(\d+)", entry)
        if match and cloud_io.isdir(cloud_io.join(root, entry)):
            versions.append(int(match.group(1)))
    return max(versions) + 1 if versions else 0


def flatten_params(params: dict[str, Any] | Namespace, sep: str = "/") -> dict[str, Any]:
    if isinstance(params, Namespace):
        params = vars(params)
    out: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, Namespace):
            value = vars(value)
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(f"{prefix}{sep}{k}" if prefix else str(k), v)
        else:
            out[prefix] = value

    for key, value in params.items():
        walk(str(key), value)
    return out


def sanitize_params(params: dict[str, Any]) -> dict[str, Any]:
    """Values TensorBoard's hparams plugin accepts: numbers, strings, bools; others as their str()."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        if hasattr(v, "item") and callable(v.item) and getattr(v, "ndim", 1) == 0:
            v = v.item()
        out[k] = v if isinstance(v, (int, float, str, bool)) else str(v)
    return out


def save_hparams_yaml(path: str, hparams: dict[str, Any]) -> None:
    """hparams.yaml with plain values; objects YAML can't express are written as their repr."""
    cloud_io.write_text(path, hparams_yaml(hparams))


class DummyLogger(Logger):
    """A logger that logs nothing (what a run uses where a logger object must exist but nothing is kept)."""

    @property
    def experiment(self) -> _DummyExperiment:
        return _DummyExperiment()

    @property
    def name(self) -> str:
        return ""

    @property
    def version(self) -> str:
        return ""

    def log_metrics(self, metrics: Any = None, step: int | None = None, *args: Any, **kwargs: Any) -> None:
        """Accepts any arguments (Lightning's takes ``*args, **kwargs``) and logs nothing."""

    def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:
        """Accepts any arguments and logs nothing."""

    def __getitem__(self, idx: int) -> DummyLogger:
        """``self.logger[0].experiment.add_image(...)`` runs (and does nothing)."""
        return self

    def __getattr__(self, name: str) -> Callable[..., None]:
        """Any other method a program calls on a logger runs and does nothing."""
        if name.startswith("__") and name.endswith("__"):  # copy / pickle probe these: they are not there
            raise AttributeError(name)

        def method(*args: Any, **kwargs: Any) -> None:
            return None

        return method


FabricLogger = Logger  # Lightning Fabric's Logger, the base of Lightning's: fulmen's is the one base
DummyExperiment = _DummyExperiment  # Lightning's name of the experiment a DummyLogger gives

__all__ = ["DummyLogger", "Logger", "merge_dicts", "rank_zero_only"]


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "ModelCheckpoint": "fulmen.callbacks.model_checkpoint.ModelCheckpoint",
})  # fmt: skip
