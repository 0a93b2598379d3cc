"""Making a user's DataLoader again with other arguments (a batch size, a sampler, a batch sampler): the loader's
own class and ``__init__`` arguments, recorded while the user's code builds it."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from torch.utils.data import BatchSampler, DataLoader, RandomSampler

from fulmen.utilities.data import is_iterable_dataset
from fulmen.utilities.exceptions import InvalidTypeError, MisconfigurationException
from fulmen.utilities.rank_zero import rank_zero_warn
from fulmen.utilities.warnings import PossibleUserWarning

if TYPE_CHECKING:
    pass




def rebuild_dataloader(loader: Any, **changes: Any) -> Any:
    """A new DataLoader of ``loader``'s class with the same arguments as ``loader`` except ``changes``
    (``batch_size``, ``sampler``, ...): how fulmen changes a loader the user built (a loader's batch size
    cannot be changed once it exists). A subclass of ``DataLoader`` is made again through its own ``__init__``,
    its other arguments read from the attributes of the same names."""
    batches_by_size = loader.batch_sampler is not None and loader.batch_size is not None
    unbatched = loader.batch_sampler is None and "batch_size" not in changes  # batch_size=None: one sample each
    by_batch_sampler = "batch_sampler" in changes  # the new batch sampler makes the batches
    if not isinstance(loader, DataLoader) or not (batches_by_size or unbatched or by_batch_sampler):
        raise MisconfigurationException(
            f"A {type(loader).__name__} with {type(getattr(loader, 'batch_sampler', None)).__name__} cannot be "
            "rebuilt with other arguments: only a torch DataLoader built with batch_size= can. Let the module "
            "or data module build it (train_dataloader() reading self.batch_size), or build it yourself."
        )
    workers = loader.num_workers
    arguments: dict[str, Any] = {
        "batch_size": loader.batch_size, "num_workers": workers, "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory, "drop_last": loader.drop_last, "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn, "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator, "prefetch_factor": loader.prefetch_factor if workers > 0 else None,
        "persistent_workers": loader.persistent_workers if workers > 0 else False,
    }  # fmt: skip
    if by_batch_sampler:  # the arguments a DataLoader takes beside a batch sampler
        arguments.update(batch_size=1, drop_last=False)
    elif "sampler" not in changes:  # keep the order: shuffled stays shuffled, a custom sampler stays
        if isinstance(loader.sampler, RandomSampler) and loader.sampler.generator is loader.generator:
            arguments["shuffle"] = True
        elif not is_iterable_dataset(loader):
            arguments["sampler"] = loader.sampler
    arguments.update(changes)
    if type(loader) is DataLoader:
        return DataLoader(loader.dataset, **arguments)
    return _made_again(loader, arguments)


_RECORDED = "_fulmen_init_arguments"  # where a loader made while recording keeps its __init__ arguments


@contextlib.contextmanager
def recording_loader_arguments() -> Iterator[None]:
    """While held, each ``DataLoader`` and ``BatchSampler`` made (of any subclass defined by then) remembers the
    arguments its ``__init__`` was called with, so that fulmen can make it again with another sampler even when
    its class does not keep them as attributes. Held while a module's or data module's ``*_dataloader`` hook
    runs."""
    classes: list[Any] = []
    todo: list[Any] = [DataLoader, BatchSampler]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if "__init__" in vars(cls):
            classes.append(cls)
    originals = {cls: vars(cls)["__init__"] for cls in classes}

    def recording(original: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(original)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            if _RECORDED not in self.__dict__:  # the outermost __init__: the loader's own class
                self.__dict__[_RECORDED] = (args, kwargs)
            original(self, *args, **kwargs)

        return __init__

    for cls, original in originals.items():
        cls.__init__ = recording(original)
    try:
        yield
    finally:
        for cls, original in originals.items():
            cls.__init__ = original


def _recorded_arguments(loader: Any) -> dict[str, Any]:
    """The arguments ``loader``'s (a DataLoader's or batch sampler's) ``__init__`` was called with (by name; what
    went to ``**kwargs`` flattened), when it was made while recording (:func:`recording_loader_arguments`)."""
    recorded = loader.__dict__.get(_RECORDED)
    if recorded is None:
        return {}
    args, kwargs = recorded
    try:
        bound = inspect.signature(type(loader).__init__).bind(loader, *args, **kwargs)
    except TypeError:
        return {}
    found: dict[str, Any] = {}
    for name, value in list(bound.arguments.items())[1:]:
        kind = bound.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            found.update(value)
        elif kind is not inspect.Parameter.VAR_POSITIONAL:
            found[name] = value
    return found


def _made_again(loader: DataLoader, arguments: dict[str, Any]) -> DataLoader:
    """``type(loader)(...)``: the DataLoader arguments its ``__init__`` takes from ``arguments``, its own from
    the arguments it was made with (when made in a ``*_dataloader`` hook), else from ``loader``'s attributes of
    the same names (a subclass that keeps them, as most do)."""
    cls = type(loader)
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    named = {p.name: p for p in parameters
             if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)}  # fmt: skip
    given = _recorded_arguments(loader)
    attributes = {k: v for k, v in vars(loader).items() if not k.startswith("_")}
    call: dict[str, Any] = {}
    missing = []
    for name, parameter in named.items():
        if name == "dataset":  # as given (a subclass may have wrapped it before handing it on)
            call[name] = given.get(name, loader.dataset)
        elif name in arguments:
            call[name] = arguments[name]
        elif name in _ORDER_ARGUMENTS:  # the order is the new one (`arguments`), never the old loader's
            if parameter.default is inspect.Parameter.empty:
                missing.append(name)
        elif name in given:
            call[name] = given[name]
        elif name in attributes:
            call[name] = attributes[name]
        elif parameter.default is inspect.Parameter.empty:
            missing.append(name)
    refused = [] if takes_any else sorted(k for k in ("sampler", "batch_size") if k in arguments and k not in named)
    if missing or refused:
        problem = (
            f"its __init__ requires {', '.join(map(repr, missing))}, which it does not keep as attributes of the "
            "same names" if missing else f"its __init__ takes no {', '.join(map(repr, refused))}"
        )  # fmt: skip
        raise MisconfigurationException(
            f"fulmen must make the {cls.__name__} again with another sampler or batch size, but {problem}. Make it "
            f"in a `*_dataloader` hook of the module or data module (its arguments are then recorded), or store "
            f"each __init__ argument as an attribute of the same name (self.{(missing or refused)[0]} = ...), or "
            "set Trainer(use_distributed_sampler=False) and give it a DistributedSampler yourself."
        )
    if takes_any:  # what went to **kwargs: the DataLoader's arguments, and the subclass's own passed on
        call.update({k: v for k, v in given.items() if k not in named and k not in _LOADER_ARGUMENTS})
        call.update({k: v for k, v in arguments.items() if k not in named})
    if call.get("sampler") is not None:
        call.pop("shuffle", None)  # a sampler given: `shuffle` must not be
    return cls(**call)


def batch_sampler_over(batch_sampler: Any, sampler: Any, predicting: bool = False) -> Any:
    """``batch_sampler``'s class made again over ``sampler`` (a process's share of the indices), with its batch size
    and ``drop_last`` (``False`` when predicting: every sample is predicted): from the arguments it was made with
    (in a ``*_dataloader`` hook), else as a ``BatchSampler`` takes them. A batch sampler that takes no sampler is
    refused (``TypeError``), except for prediction, where it is kept as it is (with a warning)."""
    cls = type(batch_sampler)
    given = _recorded_arguments(batch_sampler)
    how = (
        "Give it BatchSampler's arguments (sampler, batch_size, drop_last), or set Trainer(use_distributed_sampler="
        "False) and share the indices out among the processes in your batch sampler yourself."
    )
    if given:
        if "sampler" not in given:
            raise InvalidTypeError(
                f"fulmen must make the batch sampler {cls.__qualname__} again over each process's share of the "
                f"data, but its __init__ takes no `sampler` argument. {how}"
            )
        given["sampler"] = sampler
        if predicting and "drop_last" in given:
            given["drop_last"] = False
        return cls(**given)
    if hasattr(batch_sampler, "batch_size") and hasattr(batch_sampler, "drop_last"):
        drop_last = False if predicting else batch_sampler.drop_last
        try:
            return cls(sampler, batch_size=batch_sampler.batch_size, drop_last=drop_last)
        except TypeError as err:
            raise InvalidTypeError(
                f"fulmen must make the batch sampler {cls.__qualname__} again over each process's share of the data "
                f"as `{cls.__qualname__}(sampler, batch_size=..., drop_last=...)`, which failed ({err}). Make it in a "
                f"`*_dataloader` hook of the module or data module (its arguments are then recorded). {how}"
            ) from err
    if predicting:
        rank_zero_warn(
            f"The batch sampler {cls.__qualname__} of the predict dataloader is not a BatchSampler: it is kept as it "
            "is, so each process predicts the batches it gives (and `drop_last` cannot be turned off). Make sure "
            "it yields every index once over the processes.",
            category=PossibleUserWarning,
        )
        return batch_sampler
    raise InvalidTypeError(
        f"fulmen cannot share the batches of {cls.__qualname__} out among the processes: it is not a BatchSampler "
        f"(it has no `batch_size` and `drop_last`). {how}"
    )


_ORDER_ARGUMENTS = frozenset({"batch_sampler", "sampler", "shuffle"})
_LOADER_ARGUMENTS = frozenset(inspect.signature(DataLoader.__init__).parameters) - {"self"}


def with_batch_sampler(loader: DataLoader, batch_sampler: Any, dataset: Any = None, persistent: bool | None = None) -> DataLoader:
    """A DataLoader that loads like ``loader`` (workers, collation, pinning, generator) over ``batch_sampler``
    (and ``dataset`` when given): how fulmen starts an epoch at a later batch or seeds each sample."""
    workers = loader.num_workers
    kwargs: dict[str, Any] = {
        "batch_sampler": batch_sampler, "num_workers": workers, "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory, "timeout": loader.timeout, "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context, "generator": loader.generator,
        "prefetch_factor": loader.prefetch_factor if workers > 0 else None,
        "persistent_workers": loader.persistent_workers if persistent is None else persistent,
        "pin_memory_device": loader.pin_memory_device,
    }  # fmt: skip
    if hasattr(loader, "in_order"):
        kwargs["in_order"] = loader.in_order
    return DataLoader(loader.dataset if dataset is None else dataset, **kwargs)
