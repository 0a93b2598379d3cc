"""A failing started process surfaces as torch's own exception, as under Lightning: code written for Lightning
catches ``ProcessRaisedException`` around a spawned fit (optuna-integration's tests do)."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from torch.multiprocessing import ProcessExitedException, ProcessRaisedException

import fulmen
from fulmen.demos.boring_classes import BoringModel


class _FailsOnRankOne(BoringModel):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.global_rank == 1:
            raise ValueError("only rank 1 hits this")
        return super().training_step(batch, batch_idx)


class _DiesOnRankOne(BoringModel):
    def training_step(self, batch: Any, batch_idx: int) -> Any:
        if self.global_rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        return super().training_step(batch, batch_idx)


def _fit(model: BoringModel, tmp_path: Any) -> None:
    # spawned, not forked: a fork of the test process (threads of earlier tests' loggers in it) can leave the
    # surviving rank unresponsive to the launcher's SIGTERM, which then waits its grace period before killing it
    trainer = fulmen.Trainer(
        accelerator="cpu", strategy="ddp_spawn", devices=2, max_epochs=1, limit_train_batches=2, limit_val_batches=0,
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(model)


@pytest.mark.slow
def test_a_raising_rank_is_torchs_process_raised_exception(tmp_path: Any) -> None:
    with pytest.raises(ProcessRaisedException, match="rank 1 failed with ValueError: only rank 1 hits this") as info:
        _fit(_FailsOnRankOne(), tmp_path)
    assert isinstance(info.value, RuntimeError)  # what fulmen raised before: code catching that still works
    assert info.value.error_index == 1
    assert "Traceback" in str(info.value)  # the worker's traceback is in the message, as in torch's


@pytest.mark.slow
def test_a_killed_rank_is_torchs_process_exited_exception(tmp_path: Any) -> None:
    with pytest.raises(ProcessExitedException, match="rank 1 was killed by SIGKILL") as info:
        _fit(_DiesOnRankOne(), tmp_path)
    assert isinstance(info.value, RuntimeError) and info.value.signal_name == "SIGKILL"


def test_the_rank_that_failed_first_is_named_when_torch_finds_a_follower_first(tmp_path: Any) -> None:
    """torch reports the first process it sees ended; when that one only failed because another rank had gone
    (fulmen's note on its error), the launcher names the other rank's own error instead."""
    import pickle
    from types import SimpleNamespace

    from torch.multiprocessing import ProcessRaisedException

    from fulmen.strategies.launchers.launcher import FOLLOWS_ANOTHER_RANK
    from fulmen.strategies.launchers.multiprocessing import _first_failure

    files = [tmp_path / "rank0.pickle", tmp_path / "rank1.pickle"]
    files[0].write_bytes(pickle.dumps(f"Traceback ...\nRuntimeError: Connection closed by peer\n({FOLLOWS_ANOTHER_RANK})"))
    files[1].write_bytes(pickle.dumps("Traceback ...\nValueError: only rank 1 hits this\n"))
    context = SimpleNamespace(error_files=[str(f) for f in files],
                              processes=[SimpleNamespace(pid=100), SimpleNamespace(pid=101)])  # fmt: skip
    follower = ProcessRaisedException(f"-- Process 0 ...\nRuntimeError: closed ({FOLLOWS_ANOTHER_RANK})", 0, 100)
    index, pid, text = _first_failure(context, follower)
    assert (index, pid) == (1, 101) and "ValueError: only rank 1 hits this" in text
    own = ProcessRaisedException("-- Process 0 ...\nValueError: rank 0's own error", 0, 100)
    assert _first_failure(context, own)[:2] == (0, 100)  # a rank's own error is kept


def test_the_others_get_a_short_grace_once_a_rank_failed(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's join waits 30 s after its SIGTERM before it kills a surviving rank, and a rank blocked in a
    collective with the failed one cannot act on the signal: the launcher asks for a few seconds instead."""
    from fulmen.strategies.launchers import multiprocessing as launcher_module

    grace = []

    class _Joined:
        processes: list[Any] = []

        def join(self, timeout: float | None = None, grace_period: float | None = None) -> bool:
            grace.append(grace_period)
            raise ProcessExitedException("process 1 terminated with signal SIGKILL", error_index=1, error_pid=1,
                                         exit_code=-9, signal_name="SIGKILL")  # fmt: skip

    monkeypatch.setattr(launcher_module.mp, "start_processes", lambda *args, **kwargs: _Joined())
    with pytest.raises(ProcessExitedException):
        _fit(BoringModel(), tmp_path)
    assert grace == [launcher_module._GRACE_SECONDS] and 0 < launcher_module._GRACE_SECONDS <= 10
