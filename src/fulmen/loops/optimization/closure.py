"""The optimizer closure's base types (``lightning.pytorch.loops.optimization.closure``).

An optimizer's ``step(closure)`` calls the closure with no arguments, possibly several times (LBFGS,
SAM-like optimizers). A closure object keeps what its last call produced, so the loop can read it after the
step: :meth:`AbstractClosure.consume_result` hands it over once.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from fulmen.utilities.exceptions import MisconfigurationException

T = TypeVar("T")

# what a program that overrides ``optimizer_step`` most often gets wrong, said where it shows up
CLOSURE_NOT_RUN = (
    "The optimizer closure was never called, so training_step and backward did not run for this batch. An "
    "`optimizer_step` override must call `optimizer.step(closure=optimizer_closure)`, or `optimizer_closure()` "
    "itself when it skips the step."
)


@dataclass
class OutputResult:
    """What one training step produced, in the form the hooks receive (see :meth:`asdict`)."""

    def asdict(self) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} must define asdict(): the outputs the batch hooks receive.")


class AbstractClosure(ABC, Generic[T]):
    """A callable without arguments that runs :meth:`closure` and keeps its result until it is consumed.

    Calling the object returns the object itself; subclasses may return something else (an optimizer such as
    LBFGS wants the loss).
    """

    def __init__(self) -> None:
        super().__init__()
        self._result: T | None = None

    def consume_result(self) -> T:
        """The result of the last call; the closure forgets it (so it holds no tensors after the step)."""
        result = self._result
        if result is None:
            raise MisconfigurationException(CLOSURE_NOT_RUN)
        self._result = None
        return result

    @abstractmethod
    def closure(self, *args: Any, **kwargs: Any) -> T:
        """What one call computes."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._result = self.closure(*args, **kwargs)
        return self
