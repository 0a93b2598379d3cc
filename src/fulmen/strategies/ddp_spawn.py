"""``strategy="ddp_spawn"``: DDP in processes that ``torch.multiprocessing`` starts from inside ``fit``.

The calling process only starts the workers and waits: each worker gets a pickled copy of the trainer and
the module, joins the process group and runs the stage as under ``strategy="ddp"``. Rank 0 writes what the
caller needs (the trained weights, the counters, the metrics, the callbacks' state and the stage's return
value) to a private file, which the caller loads into its own trainer and module, so that code after
``trainer.fit(model)`` sees the trained model as it would after a one-process run.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from fulmen.accelerators import Accelerator
from fulmen.precision import Precision
from fulmen.strategies.ddp import DDPStrategy
from fulmen.strategies.environment import LAUNCHER_VARIABLE, ClusterLayout
from fulmen.strategies.parallel import _free_port
from fulmen.utilities.exceptions import MisconfigurationException

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer

_START_METHODS = ("spawn", "fork", "forkserver")
_RESULT_FILE = "rank0.pt"


class DDPSpawnStrategy(DDPStrategy):
    """DDP whose processes ``fit`` starts with ``torch.multiprocessing`` (``start_method`` 'spawn' by
    default; 'fork' is what ``strategy="ddp_fork"``/``"ddp_notebook"`` use, e.g. in notebooks)."""

    strategy_name = "ddp_spawn"

    def __init__(
        self,
        accelerator: Accelerator | None = None,
        precision_plugin: Precision | None = None,
        start_method: str = "spawn",
        **kwargs: Any,
    ) -> None:
        """``kwargs`` are DDPStrategy's: process_group_backend, timeout, find_unused_parameters, ..."""
        if start_method not in _START_METHODS:
            raise MisconfigurationException(
                f"DDPSpawnStrategy(start_method={start_method!r}) is not a start method; use one of {_START_METHODS}."
            )
        super().__init__(accelerator=accelerator, precision_plugin=precision_plugin, **kwargs)
        self.start_method = start_method
        self._in_worker = False

    def check_launch(
        self, parallel_devices: list[torch.device], num_nodes: int, cluster: ClusterLayout | None
    ) -> None:
        if cluster is not None:
            raise MisconfigurationException(
                f"strategy={self.strategy_name!r} starts its own processes, but this one was already started by "
                f"{cluster.launcher} (one of {cluster.world_size}). Use strategy='ddp' under a launcher."
            )
        if num_nodes > 1:
            raise MisconfigurationException(
                f"strategy={self.strategy_name!r} starts processes on this machine only, but num_nodes={num_nodes}. "
                "For several machines use strategy='ddp' with torchrun or SLURM."
            )
        self.parallel_devices = list(parallel_devices)
        self._devices, self.num_nodes = len(parallel_devices), 1

    def setup_environment(self) -> None:
        if not self._in_worker:
            raise MisconfigurationException(
                f"strategy={self.strategy_name!r} runs inside the processes it starts; call trainer.fit/validate/"
                "test/predict, which start them."
            )
        super().setup_environment()

    def prepare_for_tuning(self) -> None:
        """Nothing: the processes (and their group) exist only inside fit; a tuner run before it is this
        process's alone."""

    # -- the launcher ----------------------------------------------------------------------------------
    def launch(self, trainer: Trainer, function: Callable[..., Any], *args: Any) -> Any:
        """Run ``function(*args)`` (the trainer's stage) in ``devices`` new processes; return rank 0's result
        after loading its trained state into this process's trainer and module."""
        if self._in_worker:
            return function(*args)
        import torch.multiprocessing as mp

        if self.start_method == "fork" and torch.cuda.is_initialized():
            raise MisconfigurationException(
                f"strategy={self.strategy_name!r} forks this process, but CUDA is already initialised in it, and "
                "a forked process cannot use CUDA then. Don't touch CUDA before fit(), or use strategy='ddp_spawn'."
            )
        env = {"MASTER_ADDR": os.environ.get("MASTER_ADDR", "127.0.0.1"),
               "MASTER_PORT": os.environ.get("MASTER_PORT") or str(_free_port()),
               "WORLD_SIZE": str(self._devices), "LOCAL_WORLD_SIZE": str(self._devices), "GROUP_RANK": "0",
               LAUNCHER_VARIABLE: self.strategy_name}  # fmt: skip
        result_dir = tempfile.mkdtemp(prefix="fulmen-spawn-")
        try:
            try:
                # pickled here, by value: torch.multiprocessing would pass tensors as shared memory, and every
                # worker would then train the same parameter storage
                job = pickle.dumps((function, args)) if self.start_method != "fork" else (function, args)
                mp.start_processes(
                    _worker, args=(env, job, result_dir), nprocs=self._devices, start_method=self.start_method
                )
            except mp.ProcessRaisedException as err:
                # torch's message ends with the worker's traceback, whose "Type: message" line names the error
                # (notes such as the rank it was raised on may follow it)
                lines = [line.strip() for line in str(err).splitlines()]
                named = [line for line in lines if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b", line)]
                cause = named[-1] if named else "an error"
                raise RuntimeError(
                    f"strategy={self.strategy_name!r}: the process of rank {err.error_index} failed with {cause} "
                    "(its traceback is below)."
                ) from err
            except mp.ProcessExitedException as err:
                how = (
                    f"was killed by {err.signal_name}"
                    if err.signal_name
                    else f"exited with code {err.exit_code}"
                )
                raise RuntimeError(
                    f"strategy={self.strategy_name!r}: the process of rank {err.error_index} {how} before the run "
                    "ended; the other processes were stopped."
                ) from err
            payload = torch.load(
                os.path.join(result_dir, _RESULT_FILE), map_location="cpu", weights_only=False
            )
        finally:
            shutil.rmtree(result_dir, ignore_errors=True)
        return _recover(trainer, args[0], payload)


def _worker(local_rank: int, env: dict[str, str], job: bytes | tuple[Any, Any], result_dir: str) -> None:
    os.environ.update(env, RANK=str(local_rank), LOCAL_RANK=str(local_rank))
    function, args = pickle.loads(job) if isinstance(job, bytes) else job
    trainer = function.__self__  # type: ignore[attr-defined]
    strategy = trainer.strategy
    assert isinstance(strategy, DDPSpawnStrategy)
    strategy._in_worker = True
    result = function(*args)
    if trainer.is_global_zero:
        # written to a temporary name first: the caller never reads a half-written file
        path = os.path.join(result_dir, _RESULT_FILE)
        torch.save(_collect(trainer, result), path + ".tmp")
        os.replace(path + ".tmp", path)
    strategy.barrier()  # the file exists before any process ends
    torch.distributed.destroy_process_group()


def _collect(trainer: Trainer, result: Any) -> dict[str, Any]:
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


def _recover(trainer: Trainer, module: LightningModule, payload: dict[str, Any]) -> Any:
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
            cb.dirpath = state["dirpath"]  # type: ignore[attr-defined]  # a checkpoint directory resolved in the worker (default_root_dir)
        cb.load_state_dict(state)
    return payload["result"]
