"""The multiprocessing launcher (``strategy="ddp_spawn"`` / ``"ddp_fork"``): ``fit`` starts the processes with
``torch.multiprocessing`` and waits.

Each worker gets a copy of the trainer and the module, joins the process group and runs the stage. Rank 0
writes what the caller needs (the trained weights, the counters, the metrics, the callbacks' state and the
stage's return value) to a private file, which the caller loads into its own trainer and module, so that code
after ``trainer.fit(model)`` sees the trained model as it would after a one-process run.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import shutil
import signal
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.multiprocessing as mp
from torch import Tensor

from fulmen.accelerators.cpu import CPUAccelerator as CPUAccelerator
from fulmen.strategies.launchers.launcher import FOLLOWS_ANOTHER_RANK, _Launcher
from fulmen.strategies.launchers.subprocess_script import free_port
from fulmen.utilities.apply_func import apply_to_collection
from fulmen.utilities.apply_func import move_data_to_device as move_data_to_device
from fulmen.utilities.cluster_layout import LAUNCHER_VARIABLE
from fulmen.utilities.exceptions import InvalidValueError, MisconfigurationException
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.rank_zero import rank_zero_debug as rank_zero_debug

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.strategies.parallel import ParallelStrategy

_RESULT_FILE = "rank0.pt"


# Code written for Lightning catches torch's own exceptions around a spawned fit (optuna-integration's tests
# expect ``ProcessRaisedException``); fulmen's message names the failing rank and its error first.
class _RankRaised(mp.ProcessRaisedException, RuntimeError):
    """A started process raised: torch's ``ProcessRaisedException`` (and a ``RuntimeError``)."""


class _RankExited(mp.ProcessExitedException, RuntimeError):
    """A started process died without raising (a signal, ``os._exit``): torch's ``ProcessExitedException``."""


class _MultiProcessingLauncher(_Launcher):
    """Runs the stage in one new process per device of ``strategy`` (``start_method``: ``'spawn'``,
    ``'fork'`` or ``'forkserver'``) and returns rank 0's result, its trained state loaded into this process."""

    def __init__(self, strategy: ParallelStrategy, start_method: str = "spawn") -> None:
        if start_method not in mp.get_all_start_methods():
            raise InvalidValueError(
                f"start_method={start_method!r} is not a start method this platform has; use one of "
                f"{mp.get_all_start_methods()}."
            )
        self._strategy = strategy
        self._start_method = start_method
        self.procs: list[Any] = []  # the worker processes of the last launch
        self.in_worker = False  # True in the started processes: the stage then runs where it is called

    @property
    def is_interactive_compatible(self) -> bool:
        return self._start_method == "fork"  # a notebook's objects cannot be pickled into a spawned process

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["procs"] = []  # process handles do not travel to the workers
        return state

    def launch(self, function: Callable[..., Any], *args: Any, trainer: Any = None, **kwargs: Any) -> Any:
        """Run ``function(*args, **kwargs)`` (the trainer's stage) in the new processes; return rank 0's result
        after loading its trained state into ``trainer`` and the module (``args[0]``)."""
        if self.in_worker:
            return function(*args, **kwargs)
        name = self._strategy.strategy_name
        self._check_start(name)
        processes = len(self._strategy.parallel_devices)
        env = _worker_environment(name, processes)
        result_dir = tempfile.mkdtemp(prefix="fulmen-spawn-")
        try:
            job: bytes | tuple[Any, ...] = (self, function, args, kwargs, trainer)
            if self._start_method != "fork":
                # pickled here, by value: torch.multiprocessing would pass tensors as shared memory, and every
                # worker would then train the same parameter storage
                job = pickle.dumps(job)
            context = mp.start_processes(
                _worker, args=(env, job, result_dir), nprocs=processes, start_method=self._start_method, join=False
            )
            self.procs = list(context.processes)
            _join(context, name)
            payload = torch.load(os.path.join(result_dir, _RESULT_FILE), map_location="cpu", weights_only=False)
        finally:
            shutil.rmtree(result_dir, ignore_errors=True)
        if trainer is None:
            return payload["result"]
        result = _recover(trainer, args[0], payload)
        self.update_main_process_results(trainer, payload["extra"])
        return result

    def _check_start(self, name: str) -> None:
        """Refuse a start that cannot work: a spawn from a process that is itself a spawned one importing the
        script, or a fork after CUDA was initialised here."""
        if self._start_method == "spawn" and getattr(mp.current_process(), "_inheriting", False) is True:
            # a spawned process imports the main module again before it runs its job: without a main guard,
            # that import reaches fit() once more (it would start processes of its own, forever)
            raise RuntimeError(
                f"strategy={name!r} starts new processes with 'spawn', which requires that your script guards the "
                "main code with `if __name__ == \"__main__\":` (the new processes import the script again; "
                "unguarded, they would start training themselves)."
            )
        if self._start_method != "spawn" and torch.cuda.is_initialized():
            raise MisconfigurationException(
                f"strategy={name!r} forks this process, but CUDA is already initialised in it, and a forked process "
                "cannot use CUDA then. Don't touch CUDA before fit(), or use strategy='ddp_spawn'."
            )

    def get_extra_results(self, trainer: Any) -> dict[str, Any]:
        """In rank 0's process, once the stage ran: what to send back to the main process besides the weights
        and the loop state, as a dict :meth:`update_main_process_results` reads there. By default the
        ``callback_metrics``, as bytes (tensors do not travel in shared memory). Override both to carry more."""
        callback_metrics = apply_to_collection(trainer.callback_metrics, Tensor, lambda t: t.cpu())
        buffer = io.BytesIO()
        torch.save(callback_metrics, buffer)
        return {"callback_metrics_bytes": buffer.getvalue()}

    def update_main_process_results(self, trainer: Any, extra: dict[str, Any]) -> None:
        """In the main process: restore on ``trainer`` what :meth:`get_extra_results` sent (by default the
        ``callback_metrics``)."""
        callback_metrics = torch.load(io.BytesIO(extra["callback_metrics_bytes"]), weights_only=True)
        trainer.callback_metrics.update(callback_metrics)

    def kill(self, signum: int) -> None:
        for proc in self.procs:
            if proc.is_alive() and proc.pid is not None:
                os.kill(proc.pid, signal.Signals(signum))


# once a rank failed, how long the others get to end by themselves, then again after SIGTERM, before SIGKILL.
# torch waits 30 s after its SIGTERM by default; a surviving rank blocked in a collective with the dead one
# cannot act on the signal there (fulmen stops a run at a batch boundary), so the whole wait was lost time
_GRACE_SECONDS = 5.0


def _worker_environment(name: str, processes: int) -> dict[str, str]:
    """The environment variables of the started processes (each adds its rank): where they meet, how many
    they are, and which launcher started them."""
    return {"MASTER_ADDR": os.environ.get("MASTER_ADDR", "127.0.0.1"),
            "MASTER_PORT": os.environ.get("MASTER_PORT") or str(free_port()),
            "WORLD_SIZE": str(processes), "LOCAL_WORLD_SIZE": str(processes), "GROUP_RANK": "0",
            LAUNCHER_VARIABLE: name}  # fmt: skip


def _join(context: Any, name: str) -> None:
    """Wait for the started processes to end; one that raised or died raises here, naming its rank and
    its error (torch's exception types, so that code catching those still does)."""
    try:
        while not context.join(grace_period=_GRACE_SECONDS):
            pass
    except mp.ProcessRaisedException as err:
        index, pid, text = _first_failure(context, err)
        # torch's message ends with the worker's traceback, whose "Type: message" line names the error
        # (notes such as the rank it was raised on may follow it)
        lines = [line.strip() for line in text.splitlines()]
        named = [line for line in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b", line)]
        cause = named[-1] if named else "an error"
        raise _RankRaised(
            f"strategy={name!r}: the process of rank {index} failed with {cause} (its traceback "
            f"is below).\n{text}",
            index,
            pid,
        ) from err
    except mp.ProcessExitedException as err:
        how = f"was killed by {err.signal_name}" if err.signal_name else f"exited with code {err.exit_code}"
        raise _RankExited(
            f"strategy={name!r}: the process of rank {err.error_index} {how} before the run ended; the "
            "other processes were stopped.",
            err.error_index,
            _pid(err),
            err.exit_code,
            err.signal_name,
        ) from err


def _first_failure(context: Any, err: mp.ProcessRaisedException) -> tuple[int, int, str]:
    """The rank whose error ended the job: torch reports the first process it found ended, which may be one
    that only failed because the real culprit had already gone (its error then carries fulmen's note). Then
    another rank's own error, from the file torch's worker wrapper wrote for it, names the cause."""
    if FOLLOWS_ANOTHER_RANK in str(err):
        for index, path in enumerate(getattr(context, "error_files", [])):
            if index == err.error_index or not os.access(path, os.R_OK):
                continue
            try:
                with open(path, "rb") as fh:
                    trace = pickle.load(fh)  # written by this job's own worker processes
            except (OSError, EOFError, pickle.UnpicklingError):
                continue
            if isinstance(trace, str) and trace and FOLLOWS_ANOTHER_RANK not in trace:
                message = f"\n\n-- Process {index:d} terminated with the following error:\n{trace}"
                return index, int(context.processes[index].pid or 0), message
    return err.error_index, _pid(err), str(err)


def _pid(err: mp.ProcessRaisedException | mp.ProcessExitedException) -> int:
    """The failed process's pid, which torch's exception carries: as ``error_pid``, or as ``pid`` in older torch
    (2.7 for one)."""
    pid = getattr(err, "error_pid", None)
    return int(pid if pid is not None else getattr(err, "pid", 0) or 0)


def _worker(local_rank: int, env: dict[str, str], job: bytes | tuple[Any, ...], result_dir: str) -> None:
    os.environ.update(env, RANK=str(local_rank), LOCAL_RANK=str(local_rank))
    launcher, function, args, kwargs, trainer = pickle.loads(job) if isinstance(job, bytes) else job
    launcher.in_worker = True
    strategy = launcher._strategy
    result = function(*args, **kwargs)
    if strategy.is_global_zero:
        # written to a temporary name first: the caller never reads a half-written file
        path = os.path.join(result_dir, _RESULT_FILE)
        payload = _collect(trainer, result)
        if trainer is not None:
            payload["extra"] = launcher.get_extra_results(trainer)
        torch.save(payload, path + ".tmp")
        os.replace(path + ".tmp", path)
    strategy.barrier()  # the file exists before any process ends
    torch.distributed.destroy_process_group()


def _collect(trainer: Any, result: Any) -> dict[str, Any]:
    if trainer is None:
        return {"result": result}
    module = trainer.lightning_module
    run = trainer.run_context
    return {
        "weights": module.state_dict() if module is not None else None,
        "state": (run.state.status, run.state.fn, run.state.stage),
        "progress": run.progress.state_dict(),
        "should_stop": run.stop.should_stop,
        "metrics": run.metrics.snapshot(),
        "callbacks": {cb.state_key: cb.state_dict() for cb in trainer.callbacks},
        "result": result,
    }


def _recover(trainer: Any, module: LightningModule, payload: dict[str, Any]) -> Any:
    run = trainer.run_context
    run.module = module
    module.trainer = trainer
    if payload["weights"] is not None:
        module.load_state_dict(payload["weights"])
    run.state.status, run.state.fn, run.state.stage = payload["state"]
    run.progress.load_state_dict(payload["progress"])
    run.stop.should_stop = payload["should_stop"]
    run.metrics.restore(payload["metrics"])
    states = payload["callbacks"]
    for cb in trainer.callbacks:
        state = states.get(cb.state_key)
        if state is None:
            continue
        if getattr(cb, "dirpath", "") is None and state.get("dirpath"):
            cb.dirpath = state["dirpath"]  # a checkpoint directory resolved in the worker (default_root_dir)
        cb.load_state_dict(state)
    return payload["result"]


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "TrainerFn": "fulmen.runtime.state.TrainerFn",
    "TrainerState": "fulmen.runtime.state.TrainerState",
})  # fmt: skip
