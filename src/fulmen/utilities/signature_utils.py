"""Which arguments a user's hook method accepts, read from its signature."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


def is_param_in_hook_signature(
    hook_fx: Callable[..., Any], param: str, explicit: bool = False, min_args: int | None = None
) -> bool:
    """Whether the hook method ``hook_fx`` can be passed ``param``: it names it as a positional parameter, or
    (unless ``explicit``) takes ``*args``, or has at least ``min_args`` positional parameters besides
    ``self``. A decorated hook (``functools.wraps``) is judged by the function it wraps."""
    fn = getattr(hook_fx, "__wrapped__", hook_fx)
    spec = inspect.getfullargspec(fn)
    positional = spec.args[1:]  # the first is `self`, bound or not
    return (
        param in positional
        or (not explicit and spec.varargs is not None)
        or (isinstance(min_args, int) and len(positional) >= min_args)
    )
