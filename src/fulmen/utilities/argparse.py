"""Constructor defaults from environment variables: ``PL_TRAINER_DEVICES=2`` acts as ``Trainer(devices=2)``.

A cluster job or a CI matrix can then change a run's settings without editing the script. An argument
passed in the code wins over the environment.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import os
from argparse import Namespace
from collections.abc import Callable
from typing import Any, TypeVar, cast

_T = TypeVar("_T", bound=Callable[..., Any])


def _parse_env_variables(cls: type, template: str = "PL_%(cls_name)s_%(cls_argument)s") -> Namespace:
    """The arguments of ``cls`` set in the environment (``PL_<CLASS>_<ARGUMENT>``, upper case; empty values
    ignored). A value that reads as a Python literal (``42``, ``1e-3``, ``True``, ``[0, 1]``) is that value,
    anything else the string."""
    found: dict[str, Any] = {}
    for name in inspect.signature(cls).parameters:
        raw = os.environ.get(template % {"cls_name": cls.__name__.upper(), "cls_argument": name.upper()})
        if raw is None or raw == "":
            continue
        value: Any = raw
        with contextlib.suppress(ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            value = ast.literal_eval(raw)
        found[name] = value
    return Namespace(**found)


def _defaults_from_env_vars(fn: _T) -> _T:
    """Decorate a class's ``__init__`` so that arguments not passed come from :func:`_parse_env_variables`.

    Positional arguments are passed on by name (the class's signature names them), so that one given
    positionally is not also filled in from the environment."""

    @functools.wraps(fn)
    def init_with_env_defaults(self: Any, *args: Any, **kwargs: Any) -> Any:
        cls = type(self)
        if args:
            kwargs.update(zip(inspect.signature(cls).parameters, args))
        return fn(self, **{**vars(_parse_env_variables(cls)), **kwargs})

    return cast(_T, init_with_env_defaults)
