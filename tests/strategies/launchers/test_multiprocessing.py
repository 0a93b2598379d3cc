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
    trainer = fulmen.Trainer(
        accelerator="cpu", strategy="ddp_fork", devices=2, max_epochs=1, limit_train_batches=2, limit_val_batches=0,
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
