"""``load_from_checkpoint``: rebuild a LightningModule / LightningDataModule from a checkpoint file.

The class comes from the caller: the checkpoint supplies weights and hyperparameters (the values
``save_hyperparameters`` recorded, objects included, as Lightning stores them), and ``**kwargs`` override or
complete those hyperparameters. An object among them loads only when the caller trusts the file
(``weights_only=False``, or its class registered with ``torch.serialization.add_safe_globals``); otherwise the
load is refused (:class:`~fulmen.checkpoint.files.UnsafeCheckpointError`), never done with other
values. A model that ``LightningCLI`` built stores the config that built it (``_instantiator``, and
``_class_path`` in subclass mode): its class paths are run through the CLI's parser again, and ``_class_path``
may pick a subclass of the caller's class, never another class.
"""

from __future__ import annotations

import ast
import contextlib
import csv
import functools
import importlib
import inspect
import io
import os
from argparse import Namespace
from collections.abc import Callable, MutableMapping
from pathlib import Path
from typing import Any, Generic, TypeVar

import torch

from fulmen.checkpoint import files as checkpoint_io
from fulmen.checkpoint import sharded as distributed_checkpoint
from fulmen.checkpoint.files import _load as pl_load  # noqa: F401  (Lightning's name)
from fulmen.utilities.apply_func import apply_to_collection as apply_to_collection
from fulmen.utilities.cloud_io import get_filesystem as get_filesystem
from fulmen.utilities.imports import _OMEGACONF_AVAILABLE as _OMEGACONF_AVAILABLE
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.migration import pl_legacy_patch
from fulmen.utilities.migration.utils import _pl_migrate_checkpoint, as_fulmen_module
from fulmen.utilities.model_helpers import is_overridden as is_overridden
from fulmen.utilities.parsing import AttributeDict as AttributeDict
from fulmen.utilities.parsing import parse_class_init_keys as parse_class_init_keys
from fulmen.utilities.rank_zero import rank_zero_warn

T = TypeVar("T")


class restricted_classmethod(Generic[T]):
    """A classmethod that refuses to run on an instance (it would return a new object, not load in place)."""

    def __init__(self, method: Callable[..., T]) -> None:
        self.method = method
        functools.update_wrapper(self, method)  # type: ignore[arg-type]

    def __get__(self, instance: Any, owner: type) -> Callable[..., T]:
        if instance is not None:
            name = self.method.__name__

            def refuse(*args: Any, **kwargs: Any) -> T:
                raise TypeError(
                    f"{owner.__name__}.{name}() is a class method that returns a new object; calling it on an "
                    f"instance would not change that instance. Use `model = {owner.__name__}.{name}(path)`."
                )

            return refuse
        return functools.partial(self.method, owner)


def load_hparams_from_yaml(config_yaml: str | Path, use_omegaconf: bool = True) -> dict[str, Any]:
    """The hyperparameters in a YAML file (local or an fsspec URL); ``{}`` with a warning when it is missing.
    ``use_omegaconf`` is accepted for Lightning's signature; the file is read as plain YAML."""
    import yaml

    from fulmen.utilities import cloud_io
    from fulmen.utilities.rank_zero import rank_zero_warn

    if not cloud_io.exists(config_yaml):
        rank_zero_warn(f"Missing Tags: {os.fspath(config_yaml)}.")
        return {}
    data = yaml.safe_load(cloud_io.read_bytes(config_yaml).decode("utf-8")) or {}
    return dict(data)


def save_hparams_to_yaml(config_yaml: str | Path, hparams: Any, use_omegaconf: bool = True) -> None:
    """Write ``hparams`` (a dict or Namespace) to a YAML file whose folder must exist."""
    from fulmen.utilities import cloud_io
    from fulmen.utilities.parsing import hparams_yaml

    folder = cloud_io.dirname(cloud_io.local(config_yaml))
    if folder and not cloud_io.isdir(folder):
        raise RuntimeError(f"Missing folder: {folder}.")
    cloud_io.write_text(config_yaml, hparams_yaml(hparams))


def update_hparams(hparams: dict[str, Any], updates: dict[str, Any]) -> None:
    """Apply ``updates`` to ``hparams`` in place; where both hold a mapping under a key, the update goes into
    it key by key (``{"a": {"b": 4}}`` changes ``a.b`` and keeps ``a``'s other keys)."""
    for key, value in updates.items():
        current = hparams.get(key)
        if isinstance(value, MutableMapping) and isinstance(current, MutableMapping):
            update_hparams(current, value)  # type: ignore[arg-type]
        else:
            hparams[key] = value


def convert(val: str) -> int | float | bool | str:
    """A value read back from a tags CSV: the Python literal it spells (``"1"`` -> 1, ``"True"`` -> True,
    ``"[1, 2]"`` -> [1, 2], ``"None"`` -> None), else the string itself."""
    try:
        return ast.literal_eval(val)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return val


def load_hparams_from_tags_csv(tags_csv: str | Path) -> dict[str, Any]:
    """The hyperparameters of a ``key,value`` CSV file (see :func:`save_hparams_to_tags_csv`), each value
    through :func:`convert`; ``{}`` with a warning when the file does not exist."""
    from fulmen.utilities import cloud_io

    if not cloud_io.exists(tags_csv):
        rank_zero_warn(f"Missing Tags: {os.fspath(tags_csv)}.", category=RuntimeWarning)
        return {}
    text = cloud_io.read_bytes(tags_csv).decode("utf-8")
    rows = list(csv.reader(io.StringIO(text, newline="")))[1:]  # the first row is the header
    return {row[0]: convert(row[1]) for row in rows if len(row) >= 2}


def save_hparams_to_tags_csv(tags_csv: str | Path, hparams: dict[str, Any] | Namespace) -> None:
    """Write ``hparams`` (a dict or Namespace) as a ``key,value`` CSV file, values as their ``str()``; its
    folder must exist."""
    from fulmen.utilities import cloud_io

    folder = cloud_io.dirname(cloud_io.local(tags_csv))
    if folder and not cloud_io.isdir(folder):
        raise RuntimeError(f"Missing folder: {folder}. Create it before saving {os.fspath(tags_csv)!r}.")
    if isinstance(hparams, Namespace):
        hparams = vars(hparams)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["key", "value"])
    writer.writerows(hparams.items())  # None is written as an empty field
    cloud_io.write_text(tags_csv, buffer.getvalue())


# "hyper_parameters_left_out": the names of the objects a file does not hold. fulmen's .ckpt files wrote it before
# they stored the objects themselves; a safetensors export still writes it (JSON holds no objects). Read so that
# those files load as they did: the objects are asked for, or __init__'s default is used with a warning.
HPARAMS_LEFT_OUT_SUFFIX = "_left_out"


def _read_hparams_file(path: str | Path) -> dict[str, Any] | None:
    """The hyperparameters of ``hparams_file``; None (with a warning) when the file does not exist."""
    import yaml

    from fulmen.utilities import cloud_io

    if not cloud_io.exists(path):  # Lightning warns and goes on; the checkpoint's own values are the better default
        rank_zero_warn(
            f"Missing Tags: {os.fspath(path)}. The hparams_file does not exist: the checkpoint's hyperparameters "
            "are used."
        )
        return None
    data = yaml.safe_load(cloud_io.read_bytes(path).decode("utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError(
            f"hparams_file={os.fspath(path)!r} must hold a YAML mapping, got {type(data).__name__}."
        )
    return data


def _init_kwargs(
    cls: Any, checkpoint: dict[str, Any], hparams: dict[str, Any], overrides: dict[str, Any]
) -> dict[str, Any]:
    hparams = dict(hparams)
    name = checkpoint.get(cls.CHECKPOINT_HYPER_PARAMS_NAME)
    signature = inspect.signature(cls.__init__)
    params = signature.parameters
    takes_var_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if name and name != "kwargs" and name in params:
        kwargs = {name: hparams}
    else:
        # arguments the constructor cannot take (e.g. saved by an older version of the class) are dropped
        kwargs = hparams if takes_var_kwargs else {k: v for k, v in hparams.items() if k in params}
    left_out = [k for k in checkpoint.get(cls.CHECKPOINT_HYPER_PARAMS_KEY + HPARAMS_LEFT_OUT_SUFFIX, ())
                if k not in overrides]  # fmt: skip
    needed = [k for k in left_out if k in params and params[k].default is inspect.Parameter.empty]
    if needed:
        raise TypeError(
            f"{cls.__name__}.load_from_checkpoint: {', '.join(f'`{k}`' for k in needed)} of {cls.__name__}.__init__ "
            "was an object (a module, a function, ...), which the file does not hold (a safetensors export, or a "
            "checkpoint of an older fulmen). Pass it: "
            f"{cls.__name__}.load_from_checkpoint(path, {', '.join(f'{k}=...' for k in needed)})."
        )
    if left_out:
        rank_zero_warn(
            f"{cls.__name__}.load_from_checkpoint: {', '.join(f'`{k}`' for k in left_out)} was an object, which the "
            f"file does not hold; {cls.__name__}.__init__'s default is used. Pass it to load_from_checkpoint "
            "to use another."
        )
    unknown = [k for k in overrides if k not in params] if not takes_var_kwargs else []
    if unknown:  # Lightning drops them silently; a typo in an override should not go unnoticed
        rank_zero_warn(
            f"{cls.__name__}.load_from_checkpoint got {', '.join(f'{k}=' for k in unknown)} which "
            f"{cls.__name__}.__init__ does not take: ignored."
        )
    kwargs.update({k: v for k, v in overrides.items() if k not in unknown})
    return kwargs


# what marks the function LightningCLI records as `_instantiator` (set by the CLI on its `instantiate_module`):
# a name read from a checkpoint is called only when it resolves, inside fulmen, to a function carrying it
TRUSTED_INSTANTIATOR = "trusted_instantiator"


_LEGACY_HPARAMS_KEYS = ("module_arguments", "hparams")


def _trusted_instantiator(cls: Any, name: object) -> Any:
    """The function a checkpoint names as its ``_instantiator``, if it may run: a name of fulmen's (Lightning's
    module paths read as fulmen's, the objects this process uses) whose function LightningCLI marked as its
    instantiator. Importing one of fulmen's own modules runs no code the file brings; calling an unmarked
    function would."""
    module_name, _, attribute = name.rpartition(".") if isinstance(name, str) else ("", "", "")
    module_name = as_fulmen_module(module_name) if module_name else ""
    function = None
    if module_name == "fulmen" or module_name.startswith("fulmen."):
        with contextlib.suppress(ImportError):
            function = getattr(importlib.import_module(module_name), attribute, None)
    if function is None or not getattr(function, TRUSTED_INSTANTIATOR, False):
        raise ValueError(
            f"{cls.__name__}.load_from_checkpoint: the checkpoint names `_instantiator={name!r}`; fulmen runs only "
            "LightningCLI's instantiate_module (recorded as fulmen's or Lightning's) so that loading a file runs no "
            "code it names. Remove the key from the checkpoint's hyper_parameters, or pass the arguments to "
            "load_from_checkpoint."
        )
    return function


def _from_cli_config(cls: Any, hparams: dict[str, Any], overrides: dict[str, Any]) -> Any:
    # looked up when loading, by the name the file records (so a patched instantiator is the one that runs)
    instantiate = _trusted_instantiator(cls, hparams["_instantiator"])
    target = cls
    class_path = hparams.get("_class_path")
    if class_path:
        module_name, _, class_name = str(class_path).rpartition(".")
        target = getattr(importlib.import_module(module_name), class_name)
        if not (isinstance(target, type) and issubclass(target, cls)):
            raise TypeError(
                f"{cls.__name__}.load_from_checkpoint: the checkpoint's model is {class_path}, which is not a "
                f"subclass of {cls.__name__}. Call load_from_checkpoint on that class."
            )
    config = {k: v for k, v in hparams.items() if k not in ("_instantiator", "_class_path")}
    return instantiate(target, {**config, **overrides})


def load_from_checkpoint(
    cls: type[T],
    checkpoint_path: str | Path,
    map_location: Any = None,
    hparams_file: str | Path | None = None,
    strict: bool | None = None,
    weights_only: bool | None = None,
    **kwargs: Any,
) -> T:
    from fulmen.core.datamodule import LightningDataModule

    if distributed_checkpoint.is_sharded_checkpoint(checkpoint_path):  # an FSDP run's directory: read it whole
        checkpoint = distributed_checkpoint.load_consolidated(checkpoint_path, weights_only=weights_only)
    else:
        with pl_legacy_patch():  # a file of an old Lightning version may have pickled its objects
            # None: torch's default, as for Lightning (safe, unless TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD says otherwise)
            checkpoint = checkpoint_io.load(checkpoint_path, map_location="cpu", weights_only=weights_only)
    # an old version's layout -> today's
    checkpoint = _pl_migrate_checkpoint(checkpoint, checkpoint_path if isinstance(checkpoint_path, str | Path) else None)
    is_datamodule = issubclass(cls, LightningDataModule)
    key = cls.CHECKPOINT_HYPER_PARAMS_KEY  # type: ignore[attr-defined]
    if key not in checkpoint and not is_datamodule:
        # checkpoints of early Lightning versions kept the hyperparameters under older names
        legacy = next((k for k in _LEGACY_HPARAMS_KEYS if isinstance(checkpoint.get(k), dict)), None)
        if legacy is not None:
            checkpoint[key] = checkpoint[legacy]
    hparams = _read_hparams_file(hparams_file) if hparams_file is not None else None
    if hparams is None:
        hparams = checkpoint.get(cls.CHECKPOINT_HYPER_PARAMS_KEY) or {}  # type: ignore[attr-defined]
    obj: Any
    if isinstance(hparams, dict) and "_instantiator" in hparams:
        obj = _from_cli_config(cls, hparams, kwargs)
    else:
        obj = cls(**_init_kwargs(cls, checkpoint, hparams, kwargs))
    if is_datamodule:
        state = checkpoint.get(type(obj).__qualname__)
        if state:
            obj.load_state_dict(state)
        obj.on_load_checkpoint(checkpoint)
        return obj
    obj.on_load_checkpoint(checkpoint)
    if "state_dict" not in checkpoint:
        raise KeyError(f"{os.fspath(checkpoint_path)!r} has no 'state_dict': it is not a model checkpoint.")
    strict = getattr(obj, "strict_loading", True) if strict is None else strict
    obj.load_state_dict(checkpoint["state_dict"], strict=strict)
    if map_location is not None and not callable(map_location) and not isinstance(map_location, dict):
        obj.to(torch.device(map_location) if isinstance(map_location, int | str) else map_location)
    return obj


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "CUDAAccelerator": "fulmen.accelerators.cuda.CUDAAccelerator",
    "MPSAccelerator": "fulmen.accelerators.mps.MPSAccelerator",
    "XLAAccelerator": "fulmen.accelerators.xla.XLAAccelerator",
})  # fmt: skip
