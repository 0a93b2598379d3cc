"""``lightning.pytorch.trainer.connectors.signal_connector``: SIGTERM, SIGUSR1 (SLURM requeue) and Ctrl-C
during fit are handled by :class:`fulmen.trainer.signals.SignalConnector`.

``_SignalConnector`` is here for test suites written against Lightning: their ``conftest.py`` saves and restores
every signal handler around each test with ``_SignalConnector._valid_signals()`` (Lightning's own, and the
libraries that copied it)."""

from __future__ import annotations

import signal

from fulmen.trainer.signals import SignalConnector
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import rank_prefixed_message as rank_prefixed_message
from fulmen.utilities.rank_zero import rank_zero_info as rank_zero_info


class _SignalConnector(SignalConnector):
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
