"""``Logger``: where logged metrics and hyper-parameters go."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from argparse import Namespace
from typing import Any

from fulmen.utilities import cloud_io
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
    import yaml

    def plain(v: Any) -> Any:
        if isinstance(v, (int, float, str, bool)) or v is None:
            return v
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, Namespace):
            return plain(vars(v))
        return repr(v)

    cloud_io.write_text(path, yaml.safe_dump(plain(dict(hparams)), sort_keys=False))


__all__ = ["Logger", "rank_zero_only"]
