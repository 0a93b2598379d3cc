"""The stage runner holds the torch-global settings a run's flags ask for during the run only."""

from __future__ import annotations

import os

import pytest
import torch
from torch.utils.data import DataLoader

import fulmen
from fulmen.demos.boring_classes import BoringModel


def _settings():
    return (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.backends.cudnn.benchmark, torch.is_anomaly_enabled(), torch.get_float32_matmul_precision(),
            os.environ.get("CUBLAS_WORKSPACE_CONFIG"))  # fmt: skip


class Probe(BoringModel):
    def __init__(self, fail=False):
        super().__init__()
        self.seen = None
        self.fail = fail

    def training_step(self, batch, batch_idx):
        self.seen = _settings()
        if self.fail:
            raise ValueError("boom")
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("fail", [False, True])
def test_settings_hold_during_the_run_and_are_put_back_after_it(monkeypatch, fail):
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    before = _settings()
    assert before[0] is False and before[3] is False  # the test starts from torch's defaults
    model = Probe(fail)
    trainer = fulmen.Trainer(max_steps=1, deterministic="warn", detect_anomaly=True, matmul_precision="medium",
                             logger=False, enable_checkpointing=False, enable_progress_bar=False)  # fmt: skip
    data = DataLoader(torch.randn(4, 32), batch_size=2)
    if fail:
        with pytest.raises(ValueError, match="boom"):
            trainer.fit(model, data)
    else:
        trainer.fit(model, data)
    assert model.seen == (True, True, False, True, "medium", ":4096:8")
    assert _settings() == before


def test_ctrl_c_tears_the_run_down_then_exits_with_status_1(tmp_path):
    from fulmen import Callback, Trainer
    from fulmen.demos.boring_classes import BoringModel

    seen = []

    class Interrupted(BoringModel):
        def training_step(self, batch, batch_idx):
            if batch_idx == 2:
                raise KeyboardInterrupt
            return super().training_step(batch, batch_idx)

    class Watch(Callback):
        def on_exception(self, trainer, pl_module, exception):
            seen.append(type(exception).__name__)

    trainer = Trainer(max_epochs=1, callbacks=[Watch()], logger=False, enable_progress_bar=False,
                      enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    with pytest.raises(SystemExit) as exited:  # the message is logged at INFO: see test_interrupts.py
        trainer.fit(Interrupted())
    assert exited.value.code == 1 and seen == ["KeyboardInterrupt"]
    assert trainer.interrupted


def test_a_failing_teardown_hook_is_called_once_and_the_run_still_tears_down(tmp_path):
    """A teardown hook that raises at the end of a run: the hooks are not called again by the exception path,
    the loggers are finalized once (as "failed", as Lightning does), the signal handlers are put back, and
    the hook's error is the one raised."""
    import signal

    from fulmen.callbacks import Callback
    from fulmen.loggers import CSVLogger

    calls = []

    class Logger(CSVLogger):
        def finalize(self, status):
            super().finalize(status)
            calls.append(f"finalize:{status}")

    class Hooked(BoringModel):
        def teardown(self, stage):
            calls.append("teardown")
            raise OSError("the teardown hook failed")

    class Watch(Callback):
        def on_exception(self, trainer, pl_module, exception):
            calls.append("on_exception")

    before = signal.getsignal(signal.SIGTERM)
    trainer = fulmen.Trainer(max_steps=2, logger=Logger(tmp_path), enable_checkpointing=False, callbacks=[Watch()],
                             enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    with pytest.raises(OSError, match="the teardown hook failed"):
        trainer.fit(Hooked())
    assert calls == ["teardown", "on_exception", "finalize:failed"]
    assert signal.getsignal(signal.SIGTERM) == before


@pytest.mark.parity
@pytest.mark.parametrize("case", ["loader without step", "step without loader", "sharded hook", "both model hooks"])
def test_the_checks_before_a_run_warn_and_raise_as_in_lightning(tmp_path, case):
    from tests.parity.recorded import boring_model, both, raised_as_lightning

    def program(pl):
        base = boring_model(pl)

        class Model(base):
            pass

        if case == "loader without step":
            Model.validation_step = None  # type: ignore[assignment]
            Model.val_dataloader = base.val_dataloader
        elif case == "step without loader":
            Model.val_dataloader = pl.LightningModule.val_dataloader  # type: ignore[method-assign]
        else:
            Model.configure_sharded_model = lambda self: None  # type: ignore[method-assign]
            if case == "both model hooks":
                Model.configure_model = lambda self: None  # type: ignore[method-assign]
        pl.Trainer(default_root_dir=tmp_path, max_steps=1, limit_val_batches=1, logger=False,
                   enable_progress_bar=False, enable_model_summary=False).fit(Model())  # fmt: skip

    ours, theirs = both(program, r"val_dataloader|validation_step|configure_sharded_model")
    assert raised_as_lightning(ours, theirs), (ours, theirs)
    assert ours.warnings == theirs.warnings and (ours.warnings or case == "both model hooks")
