"""Lightning's import path ``lightning.pytorch.trainer.connectors.signal_connector``: SIGTERM, SIGUSR1 (SLURM
requeue) and Ctrl-C during fit are handled by :class:`fulmen.trainer.signals.SignalConnector`.

The trainer's connector is ``_SignalConnector`` (``trainer._signal_connector``), that class with Lightning's
names: test suites written against Lightning save and restore every signal handler around each test with
``_SignalConnector._valid_signals()`` (Lightning's own, and the libraries that copied it), call its handlers
directly, and patch this module's ``call`` to see the SLURM requeue command."""

from __future__ import annotations

import signal
from subprocess import call
from typing import TYPE_CHECKING

from fulmen.trainer.signals import SignalConnector
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import rank_prefixed_message as rank_prefixed_message
from fulmen.utilities.rank_zero import rank_zero_info as rank_zero_info

if TYPE_CHECKING:
    from types import FrameType

    from fulmen.runtime.context import StopRequests
    from fulmen.trainer.trainer import Trainer


class _SignalConnector(SignalConnector):
    """The trainer's signal connector under Lightning's name and with Lightning's extra methods: the ``scontrol``
    command goes through this module's ``call`` (``mock.patch("...signal_connector.call")`` sees the requeue
    without a cluster)."""

    def __init__(self, trainer: Trainer, stop: StopRequests | None = None) -> None:
        super().__init__(trainer, stop if stop is not None else trainer.run_context.stop)

    @property
    def received_sigterm(self) -> bool:
        return self.received == signal.SIGTERM

    def register_signal_handlers(self) -> None:
        """Install the handlers (fit does it itself when it starts)."""
        self.install()

    def teardown(self) -> None:
        """Put back the handlers there were before :meth:`register_signal_handlers`."""
        self.restore()

    def _slurm_sigusr_handler_fn(self, signum: int | None, frame: FrameType | None) -> None:
        """What SLURM's requeue signal leads to, at once: a checkpoint saved, then the job requeued (from global
        rank zero). During fit the installed handler defers both to the next batch boundary instead."""
        self._save()
        if self.trainer.is_global_zero:
            self._requeue()

    def _scontrol(self, command: list[str]) -> int:
        return call(command)

    @staticmethod
    def _valid_signals() -> set[signal.Signals]:
        """Every signal this platform knows (SIGKILL and SIGSTOP included, though no handler can be set for them)."""
        return signal.valid_signals()

    @staticmethod
    def _has_already_handler(signum: int) -> bool:
        """Whether something other than the default action handles ``signum``."""
        return signal.getsignal(signum) not in (None, signal.SIG_DFL)


__all__ = ["SignalConnector"]


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "SLURMEnvironment": "fulmen.plugins.environments.SLURMEnvironment",
})  # fmt: skip
