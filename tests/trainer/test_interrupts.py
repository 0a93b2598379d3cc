"""Ctrl-C during a run, compared with Lightning 2.6.6: a KeyboardInterrupt raised in a step and a real SIGINT
(``os.kill``) from a callback. The hooks receive a ``KeyboardInterrupt``, Ctrl-C is ignored while the run
shuts down, the trainer ends INTERRUPTED and ``fit`` ends the process with status 1."""

from __future__ import annotations

import logging
import os
import signal

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.parity import oracle


class _Recorder(logging.Handler):
    def __init__(self, events: list) -> None:
        super().__init__(logging.INFO)
        self.events = events

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "KeyboardInterrupt" in message:
            self.events.append(("log", record.levelname, message))


def _interrupted_fit(pl, mode: str, root) -> tuple[list, dict]:
    """Fit until global step 2, then Ctrl-C: ``mode="raise"`` raises KeyboardInterrupt in training_step,
    ``mode="kill"`` sends SIGINT to this process from on_train_batch_end."""
    events: list = []

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            if mode == "raise" and self.global_step == 2:
                raise KeyboardInterrupt
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Data(pl.LightningDataModule):
        def train_dataloader(self):
            return DataLoader(TensorDataset(torch.randn(12, 2)), batch_size=2)

        def on_exception(self, exception):
            events.append(("datamodule.on_exception", isinstance(exception, KeyboardInterrupt)))

    class Watch(pl.Callback):
        def on_train_batch_end(self, trainer, *args):
            if mode == "kill" and trainer.global_step == 2:
                os.kill(os.getpid(), signal.SIGINT)

        def on_exception(self, trainer, pl_module, exception):
            ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            events.append(("on_exception", isinstance(exception, KeyboardInterrupt), trainer.global_step,
                           trainer.state.status.value, trainer.interrupted, ignored))  # fmt: skip

    recorder = _Recorder(events)
    loggers = [logging.getLogger("fulmen"), logging.getLogger("lightning.pytorch")]
    for logger in loggers:
        logger.addHandler(recorder)
    trainer = pl.Trainer(max_epochs=1, callbacks=[Watch()], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=root)  # fmt: skip
    try:
        with pytest.raises(SystemExit) as exited:
            trainer.fit(Model(), datamodule=Data())
    except KeyboardInterrupt:  # escaped the trainer: fail this test, not the whole session
        pytest.fail(f"KeyboardInterrupt escaped {pl.__name__}'s fit ({mode})")
    finally:
        for logger in loggers:
            logger.removeHandler(recorder)
    after = {
        "exit_code": exited.value.code, "status": trainer.state.status.value, "interrupted": trainer.interrupted,
        "stage": str(trainer.state.stage.value), "sigint": signal.getsignal(signal.SIGINT),
    }  # fmt: skip
    return events, after


@pytest.fixture
def lightning_pytorch():
    return oracle.lightning()


@oracle.parity
def test_keyboard_interrupt_in_a_step_is_handled_as_lightning_does(tmp_path, lightning_pytorch):
    import fulmen

    theirs = _interrupted_fit(lightning_pytorch, "raise", tmp_path / "lightning")
    ours = _interrupted_fit(fulmen, "raise", tmp_path / "fulmen")
    assert ours == theirs
    events, after = ours
    # said first (on the console, at INFO), then the hooks with Ctrl-C ignored; fit ends the process with status 1
    assert events == [
        ("log", "INFO", "\nDetected KeyboardInterrupt, attempting graceful shutdown ..."),
        ("on_exception", True, 2, "interrupted", True, True),
        ("datamodule.on_exception", True),
    ]
    assert after == {"exit_code": 1, "status": "interrupted", "interrupted": True, "stage": "train",
                     "sigint": signal.default_int_handler}  # fmt: skip


@oracle.parity
def test_a_real_sigint_reaches_the_hooks_as_a_keyboard_interrupt(tmp_path, lightning_pytorch):
    import fulmen
    from fulmen.trainer.signals import CtrlCInterrupt

    their_events, their_after = _interrupted_fit(lightning_pytorch, "kill", tmp_path / "lightning")
    our_events, our_after = _interrupted_fit(fulmen, "kill", tmp_path / "fulmen")
    assert our_after == their_after
    # fulmen finishes the step in flight and saves a checkpoint first (a deliberate difference, see
    # docs/compatibility.md), and its message says so after Lightning's words
    assert [e[:2] for e in our_events] == [e[:2] for e in their_events]
    assert our_events[0][2].startswith(their_events[0][2])
    assert our_events[1:] == their_events[1:]
    assert (tmp_path / "fulmen" / "interrupted.ckpt").is_file()
    assert issubclass(CtrlCInterrupt, KeyboardInterrupt)


def test_sigterm_hands_the_hooks_a_sigterm_exception_and_exits_with_status_0(tmp_path):
    import fulmen
    from fulmen.trainer.signals import SignalInterrupt
    from fulmen.utilities.exceptions import SIGTERMException

    seen = []

    class Model(fulmen.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            if batch_idx == 1:
                os.kill(os.getpid(), signal.SIGTERM)
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Watch(fulmen.Callback):
        def on_exception(self, trainer, pl_module, exception):
            seen.append((isinstance(exception, SIGTERMException), isinstance(exception, KeyboardInterrupt),
                         getattr(exception, "checkpoint", None)))  # fmt: skip

    before = signal.getsignal(signal.SIGTERM)
    trainer = fulmen.Trainer(max_epochs=1, callbacks=[Watch()], logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    with pytest.raises(SystemExit) as exited:
        trainer.fit(Model(), DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2))
    assert exited.value.code == 0 and not isinstance(exited.value, SignalInterrupt)
    assert seen == [(True, False, str(tmp_path / "interrupted.ckpt"))]
    assert trainer.interrupted and signal.getsignal(signal.SIGTERM) == before


def test_ctrl_c_in_validate_is_ignored_during_shutdown_then_restored(tmp_path):
    import fulmen

    seen = []

    class Model(fulmen.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def validation_step(self, batch, batch_idx):
            raise KeyboardInterrupt

    class Watch(fulmen.Callback):
        def on_exception(self, trainer, pl_module, exception):
            seen.append(signal.getsignal(signal.SIGINT))

    trainer = fulmen.Trainer(callbacks=[Watch()], logger=False, enable_progress_bar=False, default_root_dir=tmp_path)
    with pytest.raises(SystemExit) as exited:
        trainer.validate(Model(), DataLoader(TensorDataset(torch.randn(4, 2))))
    assert exited.value.code == 1 and seen == [signal.SIG_IGN]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
