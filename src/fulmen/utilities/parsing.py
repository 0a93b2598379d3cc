"""Hyper-parameter containers and collection of a constructor's arguments."""

from __future__ import annotations

import contextlib
import contextvars
import copy
import datetime
import enum
import inspect
import re
import types
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from fulmen.utilities.exceptions import InvalidTypeError, MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_warn


class AttributeDict(dict):  # type: ignore[type-arg]
    """A dict whose keys are also attributes: ``hparams.lr`` is ``hparams["lr"]``."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError as exp:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{key}'") from exp

    def __setattr__(self, key: str, val: Any) -> None:
        self[key] = val

    def __delattr__(self, item: str) -> None:
        if item not in self:
            raise KeyError(item)
        del self[item]

    def __repr__(self) -> str:
        if not self:
            return ""
        width = max(len(str(k)) for k in self)
        return "\n".join(
            f'"{k}":'.ljust(width + 3) + f" {v!r}" for k, v in sorted(self.items(), key=lambda kv: str(kv[0]))
        )


def _init_frames(obj: object, frame: types.FrameType | None) -> list[types.FrameType]:
    """The ``__init__`` frames of ``obj`` on the stack from ``frame`` outwards (a subclass's ``__init__``
    calls its parent's through ``super()``); ``obj`` is the first argument, whatever it is named."""
    found = []
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__init__" and code.co_argcount and frame.f_locals.get(code.co_varnames[0]) is obj:
            found.append(frame)
        frame = frame.f_back
    return found


def _frame_args(frame: types.FrameType) -> dict[str, Any]:
    """One ``__init__`` call's named arguments, its ``**kwargs`` flattened into them (``*args`` cannot be
    named: skipped)."""
    code, local_vars = frame.f_code, frame.f_locals
    n_args = code.co_argcount + code.co_kwonlyargcount
    args = {name: local_vars[name] for name in code.co_varnames[1:n_args] if name in local_vars and name != "__class__"}
    idx = n_args + (1 if code.co_flags & inspect.CO_VARARGS else 0)
    if code.co_flags & inspect.CO_VARKEYWORDS:
        args.update(local_vars.get(code.co_varnames[idx], {}) or {})
    return args


def is_picklable(obj: object) -> bool:
    """Whether ``pickle`` can serialise ``obj`` (a lambda or an open file cannot)."""
    import pickle

    try:
        pickle.dumps(obj)
    except (pickle.PicklingError, TypeError, AttributeError):
        return False
    return True


def collect_init_args(obj: object, frame: types.FrameType | None) -> dict[str, Any]:
    """The arguments of every ``__init__`` of ``obj`` on the stack: a parent's own defaults are kept, and
    where two levels name the same argument the outer (the subclass, what the user called) wins."""
    args: dict[str, Any] = {}
    for init_frame in _init_frames(obj, frame):  # innermost first: outer levels update it
        args.update(_frame_args(init_frame))
    return args


# (class, config) while a command-line config builds that class: see `given_init_config`
_GIVEN_CONFIG: contextvars.ContextVar[tuple[type, dict[str, Any]] | None] = contextvars.ContextVar(
    "fulmen_given_init_config", default=None
)


@contextlib.contextmanager
def given_init_config(cls: type, config: dict[str, Any]) -> Iterator[None]:
    """While ``cls`` is built from ``config`` (the plain values of a config file: class paths, dotted names),
    ``save_hyperparameters()`` records those values in place of the objects they became, and the config's
    ``_``-prefixed entries (how to rebuild it) with them. A checkpoint then holds what rebuilds the arguments
    (``load_from_checkpoint`` runs the config through the same parser) instead of leaving the objects out."""
    token = _GIVEN_CONFIG.set((cls, config))
    try:
        yield
    finally:
        _GIVEN_CONFIG.reset(token)


def _with_given_config(obj: object, hparams: dict[str, Any]) -> dict[str, Any]:
    given = _GIVEN_CONFIG.get()
    if given is None or type(obj) is not given[0]:
        return hparams
    config = given[1]
    merged = {k: config.get(k, v) for k, v in hparams.items()}
    merged.update({k: v for k, v in config.items() if k.startswith("_")})
    return merged


def save_hyperparameters(
    obj: Any,
    *args: Any,
    ignore: Sequence[str] | str | None = None,
    frame: types.FrameType | None = None,
    given_hparams: dict[str, Any] | None = None,
) -> None:
    """Store constructor arguments (all, or those named in ``args``) in ``obj._hparams``."""
    # names (str), or one object holding them (a dict, a Namespace): a number is neither
    one_object = len(args) == 1 and not isinstance(args[0], str)
    if any(isinstance(a, (bool, int, float)) for a in args) or (
        one_object and not isinstance(args[0], dict) and not hasattr(args[0], "__dict__")
    ):
        raise ValueError(
            f"Primitives {(bool, int, float, str)} are not allowed as the hyperparameters object: save_hyperparameters() got "
            f"{', '.join(repr(a) for a in args)}. Pass argument names as strings (`save_hyperparameters('lr')`), "
            "or one dict / Namespace of hyper-parameters."
        )
    if one_object:
        hp = args[0]
        if isinstance(hp, types.SimpleNamespace):
            hp = vars(hp)
        hparams = dict(hp) if isinstance(hp, dict) else dict(vars(hp))
        # the __init__ argument that carried the object, so load_from_checkpoint can pass it back by name
        init_args = collect_init_args(obj, frame) if frame is not None else {}
        obj._hparams_name = next((k for k, v in init_args.items() if v is args[0]), None)
    else:
        init_args = given_hparams if given_hparams is not None else collect_init_args(obj, frame)
        if args:
            missing = [a for a in args if a not in init_args]
            if missing:
                raise ValueError(
                    f"save_hyperparameters({', '.join(map(repr, args))}): {missing} are not arguments of "
                    f"{type(obj).__name__}.__init__. Available: {sorted(init_args)}."
                )
            hparams = {k: init_args[k] for k in args}
        else:
            hparams = dict(init_args)
        hparams = _with_given_config(obj, hparams)
        obj._hparams_name = "kwargs" if hparams else None
    for key, value in hparams.items():
        if isinstance(value, torch.nn.Module) and key not in (ignore or ()):
            rank_zero_warn(
                f"Attribute {key!r} is an instance of `nn.Module` and is already saved during checkpointing (in "
                f"the state_dict). It is recommended to ignore them using `self.save_hyperparameters(ignore="
                f"[{key!r}])`."
            )
    # a later call adds to what an earlier one saved (a parent's __init__ saved its own arguments, the
    # subclass adds its), and `ignore` removes from the whole, as Lightning does
    previous = getattr(obj, "_hparams", None)
    if isinstance(previous, dict):
        hparams = {**previous, **hparams}
    if isinstance(ignore, str):
        ignore = [ignore]
    for key in ignore or ():
        hparams.pop(key, None)
    obj._set_hparams(hparams)
    try:
        obj._hparams_initial = copy.deepcopy(obj._hparams)
    except Exception:  # un-copyable values (open files, modules): keep a shallow copy
        obj._hparams_initial = copy.copy(obj._hparams)


_TIME_UNITS = ("days", "hours", "minutes", "seconds", "milliseconds", "microseconds", "weeks")


def parse_time(value: Any, flag: str = "max_time") -> datetime.timedelta | None:
    """'DD:HH:MM:SS', a dict of timedelta keywords, or a timedelta."""
    if value is None or isinstance(value, datetime.timedelta):
        return value
    if isinstance(value, dict):
        bad = [k for k in value if k not in _TIME_UNITS]
        if bad:
            raise MisconfigurationException(
                f"{flag}={value!r} has keys {bad} that are not time units. Use keys from {list(_TIME_UNITS)}, "
                'e.g. {"days": 1, "hours": 5}.'
            )
        return datetime.timedelta(**value)
    if isinstance(value, str):
        match = re.fullmatch(r"\s*(\d+):(\d{1,2}):(\d{1,2}):(\d{1,2})\s*", value)
        if match:
            d, h, m, s = (int(x) for x in match.groups())
            return datetime.timedelta(days=d, hours=h, minutes=m, seconds=s)
    raise InvalidTypeError(
        f"{flag}={value!r} is not understood. Use a string in the format DD:HH:MM:SS (e.g. '00:12:00:00'), a dict like "
        '{"days": 1, "hours": 5}, or a datetime.timedelta.'
    )


def hparams_yaml(hparams: Any) -> str:
    """Hyperparameters as YAML with plain values; objects YAML cannot express are written as their repr."""
    from argparse import Namespace

    import yaml

    def plain(v: Any) -> Any:
        if isinstance(v, enum.Enum):  # by name, as Lightning writes it (also a `str, Enum` the dumper refuses)
            return v.name
        if isinstance(v, (int, float, str, bool)) or v is None:
            return v
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, Namespace):
            return plain(vars(v))
        return repr(v)

    return str(yaml.safe_dump(plain(dict(vars(hparams) if isinstance(hparams, Namespace) else hparams)), sort_keys=False))
