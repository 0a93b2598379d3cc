"""The trainer, callbacks, loggers and profiler as the run context holds them: small protocols stating exactly
what is read of each through a :class:`~fulmen.runtime.context.RunContext`.

The runtime may not import those layers (they sit above it), so a protocol is how it names them. Most members
are read by the runtime and the loops; a few only by the trainer's stage runner as a run starts and ends, which
reads the same attributes of the context (each member says who reads it). A member added here is a promise
every such object has to keep, so one is added only where something reads it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule


class RunOwner(Protocol):
    """The trainer: handed to every callback hook as its first argument (``hook(trainer, pl_module, ...)``);
    nothing of it is read through the context."""


class RunCallback(Protocol):
    """A callback. The dispatcher looks its hooks up by name (``getattr``), once per run, and calls those its
    class overrides or the instance carries."""

    @property
    def state_key(self) -> str:
        """Names the callback's hooks in a profiler's records (``[Callback]<state_key>.<hook>``)."""
        ...


class RunLogger(Protocol):
    """A logger."""

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """The logged values (the metrics hub), followed by :meth:`save`."""

    def save(self) -> None: ...

    def log_hyperparams(self, params: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        """The module's and data module's hyperparameters, as a fit starts (the stage runner)."""

    def finalize(self, status: str) -> None:
        """``"success"`` or ``"failed"``, as a run ends (the stage runner)."""


class RunProfiler(Protocol):
    """A profiler."""

    def profile(self, action_name: str) -> AbstractContextManager[Any]:
        """A block recorded as ``action_name``: each hook (the dispatcher) and loop stage (the loops)."""
        ...

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        """A run of ``stage`` begins (the stage runner, as :meth:`attach_module`, :meth:`teardown` and
        :meth:`describe`)."""

    def attach_module(self, module: LightningModule) -> None:
        """The LightningModule being run."""

    def teardown(self, stage: str | None) -> None:
        """The run ended before it started: nothing to report."""

    def describe(self) -> None:
        """The run ended: write the report."""
