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
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import torch

from fulmen.utilities.exceptions import InvalidTypeError, MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_warn


class AttributeDict(dict):
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
    except (pickle.PickleError, AttributeError, RuntimeError, TypeError):
        return False
    return True


def clean_namespace(hparams: MutableMapping[Any, Any]) -> None:
    """Remove (in place, with a warning naming each) the entries of ``hparams`` that cannot be pickled: a
    checkpoint could not hold them."""
    for key in [k for k, v in hparams.items() if not is_picklable(v)]:
        rank_zero_warn(
            f"Attribute '{key}' removed from hparams because it cannot be pickled. You can suppress this warning "
            f"by setting `self.save_hyperparameters(ignore=['{key}'])`."
        )
        del hparams[key]


def parse_class_init_keys(cls: type) -> tuple[str, str | None, str | None]:
    """The names ``cls.__init__`` gives to ``self``, ``*args`` and ``**kwargs`` (None for those it lacks):
    ``def __init__(me, a, *rest, **options)`` -> ``("me", "rest", "options")``."""
    params = list(inspect.signature(cls.__init__).parameters.values())  # type: ignore[misc]
    if not params:
        raise TypeError(f"{cls.__qualname__}.__init__ takes no parameters: it cannot be a method taking `self`.")
    var_args = next((p.name for p in params if p.kind is inspect.Parameter.VAR_POSITIONAL), None)
    var_kwargs = next((p.name for p in params if p.kind is inspect.Parameter.VAR_KEYWORD), None)
    return params[0].name, var_args, var_kwargs


def _collect_init_args(obj: object, frame: types.FrameType | None) -> dict[str, Any]:
    """The arguments of every ``__init__`` of ``obj`` on the stack: a parent's own defaults are kept, and
    where two levels name the same argument the outer (the subclass, what the user called) wins."""
    args: dict[str, Any] = {}
    for init_frame in _init_frames(obj, frame):  # innermost first: outer levels update it
        args.update(_frame_args(init_frame))
    return args


# `_get_init_args` leaves these out besides self, *args and **kwargs: names a helper's own locals may use
_NOT_INIT_ARGS = ("__class__", "frame", "frame_args")


def _get_init_args(frame: types.FrameType) -> tuple[Any | None, dict[str, Any]]:
    """``(self, arguments)`` of the ``__init__`` running in ``frame``; ``(None, {})`` for any other frame.

    Only an ``__init__`` defined in a class body counts (its frame holds the ``__class__`` cell that
    ``super()`` uses): a function that happens to be named ``__init__`` is not a constructor."""
    if frame.f_code.co_name != "__init__" or "__class__" not in frame.f_locals:
        return None, {}
    code = frame.f_code
    self_arg = frame.f_locals.get(code.co_varnames[0]) if code.co_argcount else None
    return self_arg, {k: v for k, v in _frame_args(frame).items() if k not in _NOT_INIT_ARGS}


def get_init_args(frame: types.FrameType) -> dict[str, Any]:
    """The named arguments of the ``__init__`` running in ``frame`` (its ``**kwargs`` flattened into them),
    ``{}`` if ``frame`` is not a constructor's."""
    return _get_init_args(frame)[1]


def collect_init_args(
    frame: types.FrameType,
    path_args: list[dict[str, Any]],
    inside: bool = False,
    classes: tuple[type, ...] = (),
) -> list[dict[str, Any]]:
    """Append to ``path_args`` (and return it) the arguments of each constructor in the chain of ``__init__``
    calls on the stack, starting at ``frame`` or at the first constructor frame above it: the innermost (the
    base class's) first, the most specific class's last. ``inside=True`` means ``frame`` is already within the
    chain, which then ends at the first frame that is not a constructor. With ``classes``, only constructors
    of instances of those classes belong to the chain. The outermost frame of the stack is never read."""
    current: types.FrameType | None = frame
    while current is not None and current.f_back is not None:
        self_arg, args = _get_init_args(current)
        if "__class__" in current.f_locals and (not classes or isinstance(self_arg, classes)):
            path_args.append(args)
            inside = True
        elif inside:
            break
        current = current.f_back
    return path_args


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
    _check_hparams_args(args, one_object)
    if one_object:
        hparams = _hparams_of_object(obj, args[0], frame)
    else:
        hparams = _hparams_of_init_args(obj, args, frame, given_hparams)
    for key, value in hparams.items():
        if isinstance(value, torch.nn.Module) and key not in (ignore or ()):
            rank_zero_warn(
                f"Attribute {key!r} is an instance of `nn.Module` and is already saved during checkpointing (in "
                f"the state_dict). It is recommended to ignore them using `self.save_hyperparameters(ignore="
                f"[{key!r}])`."
            )
    _store_hparams(obj, hparams, ignore)


def _check_hparams_args(args: tuple[Any, ...], one_object: bool) -> None:
    """Refuse numbers, and a single object that holds no named values (neither a dict nor one with attributes)."""
    if any(isinstance(a, (bool, int, float)) for a in args) or (
        one_object and not isinstance(args[0], dict) and not hasattr(args[0], "__dict__")
    ):
        raise ValueError(
            f"Primitives {(bool, int, float, str)} are not allowed as the hyperparameters object: save_hyperparameters() got "
            f"{', '.join(repr(a) for a in args)}. Pass argument names as strings (`save_hyperparameters('lr')`), "
            "or one dict / Namespace of hyper-parameters."
        )


def _hparams_of_object(obj: Any, given: Any, frame: types.FrameType | None) -> dict[str, Any]:
    """The values of one dict / Namespace passed to ``save_hyperparameters``; sets ``obj._hparams_name``."""
    hp = vars(given) if isinstance(given, types.SimpleNamespace) else given
    hparams = dict(hp) if isinstance(hp, dict) else dict(vars(hp))
    # the __init__ argument that carried the object, so load_from_checkpoint can pass it back by name
    init_args = _collect_init_args(obj, frame) if frame is not None else {}
    obj._hparams_name = next((k for k, v in init_args.items() if v is given), None)
    return hparams


def _hparams_of_init_args(
    obj: Any, names: tuple[Any, ...], frame: types.FrameType | None, given_hparams: dict[str, Any] | None
) -> dict[str, Any]:
    """The constructor's arguments (those in ``names``, else all), with the values of a command-line config
    that builds ``obj`` in place of the objects they became; sets ``obj._hparams_name``."""
    init_args = given_hparams if given_hparams is not None else _collect_init_args(obj, frame)
    if names:
        missing = [a for a in names if a not in init_args]
        if missing:
            raise ValueError(
                f"save_hyperparameters({', '.join(map(repr, names))}): {missing} are not arguments of "
                f"{type(obj).__name__}.__init__. Available: {sorted(init_args)}."
            )
        hparams = {k: init_args[k] for k in names}
    else:
        hparams = dict(init_args)
    hparams = _with_given_config(obj, hparams)
    obj._hparams_name = "kwargs" if hparams else None
    return hparams


def _store_hparams(obj: Any, hparams: dict[str, Any], ignore: Sequence[str] | str | None) -> None:
    """``hparams`` added to what ``obj`` saved before, ``ignore`` left out, and the initial copy taken."""
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


# -- a field of the model, wherever the user keeps it (the tuners read and write fields through these) -------
def attribute_holders(model: Any, attribute: str, datamodule: Any = None) -> list[Any]:
    """Every place ``attribute`` lives, in this order: the model itself, its ``hparams``, the data module,
    the data module's ``hparams`` (objects, or ``hparams`` mappings). Reading takes the last, writing goes to
    all, so that the value a tuner finds reaches whichever of them builds the dataloaders or optimizers."""
    holders: list[Any] = []
    for holder in (model, datamodule):
        if holder is None:
            continue
        if hasattr(holder, attribute):
            holders.append(holder)
        hparams = getattr(holder, "hparams", None)
        if hparams is not None and attribute in hparams:
            holders.append(hparams)
    return holders


def _attached_datamodule(model: Any) -> Any:
    """The data module of the trainer ``model`` is attached to; None when it has no trainer."""
    try:
        trainer = model.trainer
    except (AttributeError, RuntimeError):  # not a LightningModule, or not attached to a Trainer
        return None
    return getattr(trainer, "datamodule", None) if trainer is not None else None


def _holders_or_raise(model: Any, attribute: str) -> list[Any]:
    holders = attribute_holders(model, attribute, _attached_datamodule(model))
    if not holders:
        raise AttributeError(
            f"{attribute} is neither stored in the model namespace nor the `hparams` namespace/dict, nor the "
            f"datamodule. Looked in {type(model).__name__}, its hparams and (when a trainer is attached) the "
            f"datamodule: define `{attribute}` in one of them, e.g. `self.{attribute} = ...` in __init__."
        )
    return holders


def lightning_hasattr(model: Any, attribute: str) -> bool:
    """Whether ``attribute`` is on the model, in its ``hparams``, or on the attached data module or its
    ``hparams``."""
    return bool(attribute_holders(model, attribute, _attached_datamodule(model)))


def lightning_getattr(model: Any, attribute: str) -> Any | None:
    """The value of ``attribute`` from the last of the places :func:`attribute_holders` lists that has it;
    ``AttributeError`` when none has."""
    holder = _holders_or_raise(model, attribute)[-1]
    return holder[attribute] if isinstance(holder, Mapping) else getattr(holder, attribute)


def lightning_setattr(model: Any, attribute: str, value: Any) -> None:
    """Set ``attribute`` to ``value`` in every place :func:`attribute_holders` finds it; ``AttributeError``
    when none has it (nothing would read a new attribute)."""
    for holder in _holders_or_raise(model, attribute):
        set_attribute(holder, attribute, value)


def set_attribute(holder: Any, attribute: str, value: Any) -> None:
    """Write ``value`` where :func:`attribute_holders` found ``attribute``: a key of an ``hparams`` mapping,
    else an attribute."""
    if isinstance(holder, MutableMapping):
        holder[attribute] = value
    else:
        setattr(holder, attribute, value)
