"""Objects from configs: import by dotted path, ``instantiate_class`` (an optimizer / scheduler from its
class-path dict), ``instantiate_module`` (a model or data module rebuilt from the config the CLI recorded) and the
instantiator that records that config while the CLI builds them."""

from __future__ import annotations

import enum
import importlib
import inspect
import os
from typing import Any

import torch

from fulmen.cli.parser import LightningArgumentParser
from fulmen.core.saving import TRUSTED_INSTANTIATOR
from fulmen.utilities.parsing import given_init_config

# the name a model's hyperparameters record as the function that rebuilds it: the public path (the one
# `load_from_checkpoint` admits), not this module's
_INSTANTIATOR = "fulmen.cli.instantiate_module"


def _import_object(path: str) -> Any:
    module_name, _, name = path.rpartition(".")
    if not module_name:
        raise ValueError(f"{path!r} is not a dotted import path (e.g. 'torch.optim.Adam').")
    return getattr(importlib.import_module(module_name), name)


def instantiate_class(args: Any, init: dict[str, Any]) -> Any:
    """Build ``init["class_path"]`` with ``init["init_args"]``, ``args`` (one value, or a tuple) first:
    ``instantiate_class(self.parameters(), {"class_path": "torch.optim.Adam", "init_args": {"lr": 0.1}})``."""
    if not isinstance(init, dict) or "class_path" not in init:
        raise ValueError(
            f"instantiate_class(args, init): init must be a dict with 'class_path' (and 'init_args'), got {init!r}."
        )
    positional = args if isinstance(args, tuple) else (args,)
    return _import_object(init["class_path"])(*positional, **dict(init.get("init_args") or {}))


def _plain(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, bool | int | float | str)


def _configurable(value: Any) -> bool:
    """Whether the parser can take ``value`` as a config value and record it as such (a path, an enum member
    and a dtype are written by name)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _configurable(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_configurable(v) for v in value)
    return _plain(value) or isinstance(value, os.PathLike | enum.Enum | torch.dtype | torch.device)


def instantiate_module(class_type: type, config: dict[str, Any]) -> Any:
    """Rebuild a model / data module from the config LightningCLI recorded in its hyperparameters (what
    ``load_from_checkpoint`` runs for a checkpoint written under the CLI): class paths and dotted names become
    objects again through the same parser; values that already are objects are passed as they are."""
    plain = {k: v for k, v in config.items() if _plain(v)}
    objects = {k: v for k, v in config.items() if k not in plain}
    params = inspect.signature(class_type).parameters
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    extra = {k: plain.pop(k) for k in list(plain) if k not in params} if takes_kwargs else {}
    parser = LightningArgumentParser(exit_on_error=False)
    parser.add_class_arguments(class_type, "module", fail_untyped=False, instantiate=False, skip=set(objects))
    cfg = parser.parse_object({"module": plain})
    kwargs = dict(parser.instantiate(cfg)["module"])
    with given_init_config(class_type, {**config, "_instantiator": _INSTANTIATOR}):
        return class_type(**kwargs, **extra, **objects)


# the one function a checkpoint's `_instantiator` may name (load_from_checkpoint checks for the mark)
setattr(instantiate_module, TRUSTED_INSTANTIATOR, True)


class _RecordingInstantiator:
    """Builds the config's model and data module, each inside :func:`given_init_config`: their
    ``save_hyperparameters()`` then record the config (class paths, dotted names) rather than the objects,
    so a checkpoint rebuilds them (:func:`instantiate_module`)."""

    def __init__(self, records: list[tuple[str, type, dict[str, Any]] | None]) -> None:
        self.records = [r for r in records if r is not None]

    def __call__(
        self, class_type: type, *args: Any, applied_instantiation_links: dict[str, Any] | None = None, **kwargs: Any
    ) -> Any:
        for i, (prefix, cls, record) in enumerate(self.records):
            if class_type is cls:
                del self.records[i]  # once: a nested module of the same class is not the configured one
                # values linked in at instantiation (`apply_on="instantiate"`) are not in the parsed config
                for target, value in (applied_instantiation_links or {}).items():
                    if target.startswith(prefix):
                        _set_nested(record, target[len(prefix):].split("."), value)
                with given_init_config(class_type, record):
                    return class_type(*args, **kwargs)
        return class_type(*args, **kwargs)


def _set_nested(config: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        config = config.setdefault(key, {})
    config[keys[-1]] = value.as_dict() if hasattr(value, "as_dict") else value
