"""SIGTERM, SIGUSR1 (SLURM) and Ctrl-C during fit: finish the step, save a checkpoint, stop cleanly.

The handler only records the signal; the training loop looks at it after each batch, so the checkpoint is
written at a batch boundary (a point exact resume continues from) and never from inside a signal handler.
A second Ctrl-C stops at once.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any

from fulmen.utilities import cloud_io
from fulmen.utilities.exceptions import SIGTERMException
from fulmen.utilities.rank_zero import rank_zero_info, rank_zero_warn

if TYPE_CHECKING:
    from fulmen.runtime.context import StopRequests
    from fulmen.trainer.trainer import Trainer


class SignalInterrupt(BaseException):
    """Raised by the loop after a handled signal, once the checkpoint is written.

    What the run's ``on_exception`` hooks receive is of the kind a user's code checks for: Ctrl-C (SIGINT) a
    :class:`KeyboardInterrupt` (``isinstance(e, KeyboardInterrupt)`` holds, as for an unhandled Ctrl-C), SIGTERM
    and the SLURM requeue signal a :class:`~fulmen.utilities.exceptions.SIGTERMException`. Make one with
    :meth:`for_signal`.
    """

    def __init__(self, signum: int, checkpoint: str | None) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}; checkpoint: {checkpoint}")
        self.signum = signum
        self.checkpoint = checkpoint

    @staticmethod
    def for_signal(signum: int, checkpoint: str | None) -> SignalInterrupt:
        if signum == signal.SIGINT:
            return CtrlCInterrupt(signum, checkpoint)
        return TerminationInterrupt(signum, checkpoint)


class CtrlCInterrupt(SignalInterrupt, KeyboardInterrupt):
    """Ctrl-C stopped the run at a batch boundary, after saving a checkpoint."""


class TerminationInterrupt(SignalInterrupt, SIGTERMException):
    """SIGTERM (or SLURM's requeue signal) stopped the run at a batch boundary, after saving a checkpoint."""

    def __init__(self, signum: int, checkpoint: str | None) -> None:
        super().__init__(signum, checkpoint)
        self.code = None  # a SystemExit's status: not the message (the trainer ends the process itself)


def _on_slurm() -> bool:
    return "SLURM_JOB_ID" in os.environ


class SignalConnector:
    """Installs the handlers for a fit; the handler writes into the run's stop requests, which the training
    loop reads after each batch (and then calls :meth:`stop`)."""

    def __init__(self, trainer: Trainer, stop: StopRequests) -> None:
        self.trainer = trainer
        self._stop = stop
        stop.on_signal = self.stop
        self._previous: dict[int, Any] = {}

    @property
    def received(self) -> int | None:
        return self._stop.signal

    def _requeue_signal(self) -> int | None:
        """The signal SLURM sends before the time limit: SIGUSR1, or a SLURMEnvironment plugin's choice."""
        plugin = self.trainer.config.cluster_environment
        chosen = getattr(plugin, "requeue_signal", None)
        if chosen is not None:
            return int(chosen)
        usr1 = getattr(signal, "SIGUSR1", None)
        return int(usr1) if usr1 is not None and _on_slurm() else None

    def _auto_requeue(self) -> bool:
        return bool(getattr(self.trainer.config.cluster_environment, "auto_requeue", True))

    def _signals(self) -> list[int]:
        wanted: list[int] = [signal.SIGTERM, signal.SIGINT]
        requeue = self._requeue_signal()
        if requeue is not None:
            wanted.append(requeue)
        return wanted

    def install(self) -> None:
        self._stop.signal = None
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread
        for sig in self._signals():
            previous = signal.getsignal(sig)
            if sig == signal.SIGINT and previous is not signal.default_int_handler:
                continue  # someone else handles Ctrl-C (e.g. a notebook kernel): leave it to them
            self._previous[sig] = previous
            signal.signal(sig, self._handle)

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._stop.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # second Ctrl-C: stop now
        self._stop.signal = signum
        rank_zero_info(
            ("\nDetected KeyboardInterrupt, attempting graceful shutdown ... " if signum == signal.SIGINT else "")
            + f"Received {signal.Signals(signum).name}: finishing the current step, then saving a checkpoint "
            "and stopping." + (" Press Ctrl-C again to stop at once." if signum == signal.SIGINT else "")
        )

    def stop(self) -> None:
        """Save a checkpoint at this batch boundary and unwind the run."""
        signum = self.received
        assert signum is not None
        path = self._save()
        raise SignalInterrupt.for_signal(signum, path)

    def ignore_ctrl_c(self) -> None:
        """Ctrl-C does nothing while a run that Ctrl-C (or a KeyboardInterrupt) ended shuts down: pressing it
        again must not cut the ``on_exception`` hooks and the teardown short. :meth:`restore` puts the handler
        back."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._previous.setdefault(signal.SIGINT, signal.getsignal(signal.SIGINT))
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    def _save(self) -> str | None:
        trainer = self.trainer
        for cb in trainer.checkpoint_callbacks:
            save = getattr(cb, "save_interrupt_checkpoint", None)
            if save is not None and getattr(cb, "dirpath", None):
                path: str = save(trainer)
                break
        else:
            path = cloud_io.join(trainer.default_root_dir, "interrupted.ckpt")
            trainer.save_checkpoint(path)
        rank_zero_info(f"Saved checkpoint {path!r}; resume with trainer.fit(..., ckpt_path={path!r}).")
        return path

    def after_teardown(self, interrupt: SignalInterrupt) -> None:
        """Ctrl-C (SIGINT) ends the process with status 1, as with Lightning (the script does not go on as if
        training had finished); SIGTERM / SIGUSR1 end it with status 0 (a requeued job resumes)."""
        if interrupt.signum == signal.SIGINT:
            raise SystemExit(1)
        self.requeue_if_asked(interrupt)
        raise SystemExit(0)

    def requeue_if_asked(self, interrupt: SignalInterrupt) -> None:
        """SLURM's requeue signal with ``auto_requeue`` on: requeue the job (from global rank zero). Also when
        the run's checkpoint then failed to save: the requeued job resumes from the last complete one."""
        if (
            interrupt.signum == self._requeue_signal()
            and _on_slurm()
            and self._auto_requeue()
            and self.trainer.is_global_zero
        ):
            self._requeue()

    def _requeue(self) -> None:
        array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
        if array_job and "SLURM_ARRAY_TASK_ID" in os.environ:
            job = f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}"
        else:
            job = os.environ["SLURM_JOB_ID"]
        if re.fullmatch(r"[0-9_-]+", job) is None:  # never hand scontrol an argument it could take for an option
            rank_zero_warn(f"SLURM job id {job!r} is not a job id (digits, '_' and '-'): the job is not requeued.")
            return
        try:
            code = self._scontrol(["scontrol", "requeue", job])
        except FileNotFoundError:
            rank_zero_warn("SIGUSR1 under SLURM, but `scontrol` is not on PATH: the job is not requeued.")
            return
        if code == 0:
            rank_zero_info(f"Requeued SLURM job {job}; it resumes from the last checkpoint.")
        else:
            rank_zero_warn(f"`scontrol requeue {job}` failed with exit status {code}: the job is not requeued.")

    def _scontrol(self, command: list[str]) -> int:
        """Run ``scontrol`` (found on PATH), its output going where this process's goes; its exit status."""
        return subprocess.call(command)


def slurm_requeued() -> bool:
    """True in a SLURM job that was requeued (it should continue from its last checkpoint)."""
    try:
        return int(os.environ.get("SLURM_RESTART_COUNT", "0")) > 0
    except ValueError:
        return False
