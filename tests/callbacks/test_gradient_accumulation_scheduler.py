"""GradientAccumulationScheduler as seed 003 states it: validation, epoch mode (vs Lightning), step mode
(vs a hand-written loop), the on_train_start checks, and resuming mid-schedule."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.nn.functional import binary_cross_entropy_with_logits as bce

import fulmen
from fulmen.callbacks import GradientAccumulationScheduler
from fulmen.utilities.exceptions import MisconfigurationException
from tests.core.optimization_examples import N_BATCHES, data, weights
from tests.parity import oracle


def model_class(pl: Any) -> type:
    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(1)
            self.net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

        def training_step(self, batch, batch_idx):
            return bce(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.2, momentum=0.9)

    return Model


Model = model_class(fulmen)


def fit(
    pl: Any, model: Any, callbacks: list[Any], max_epochs: int = 3, ckpt_path: Any = None, **kwargs: Any
) -> Any:
    trainer = pl.Trainer(max_epochs=max_epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", devices=1, callbacks=callbacks,
                         **kwargs)  # fmt: skip
    trainer.fit(model, data(), ckpt_path=ckpt_path)
    return trainer


# -- construction --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("scheduling", "mode", "error"),
    [
        ({}, "epoch", TypeError),
        ([(0, 2)], "epoch", TypeError),
        ({0.5: 2}, "epoch", TypeError),
        ({0: 2.0}, "epoch", TypeError),
        ({True: 2}, "epoch", TypeError),
        ({0: False}, "step", TypeError),
        ({-1: 2}, "epoch", IndexError),
        ({0: 2}, "batch", MisconfigurationException),
        ({0: 0}, "epoch", MisconfigurationException),
        ({0: 1, 3: -2}, "step", MisconfigurationException),
    ],
)
def test_invalid_schedules_are_refused(scheduling, mode, error):
    with pytest.raises(error):
        GradientAccumulationScheduler(scheduling, mode=mode)


def test_the_pages_examples_and_an_implicit_factor_of_one():
    # Epoch-based: from epoch 5, accumulate every 2 batches (use 4 for zero-indexed).
    accumulator = GradientAccumulationScheduler(scheduling={4: 2})
    assert [accumulator.get_accumulate_grad_batches(e) for e in range(7)] == [1, 1, 1, 1, 2, 2, 2]
    assert accumulator.scheduling == {0: 1, 4: 2}
    fulmen.Trainer(callbacks=[accumulator], logger=False)
    # Step-based: for single-epoch pretraining, schedule by global step.
    accumulator = GradientAccumulationScheduler(scheduling={0: 8, 1000: 4, 5000: 1}, mode="step")
    factors = {s: accumulator.get_accumulate_grad_batches(s) for s in (0, 999, 1000, 4999, 5000, 10**6)}
    assert factors == {0: 8, 999: 8, 1000: 4, 4999: 4, 5000: 1, 10**6: 1}
    fulmen.Trainer(callbacks=[accumulator], logger=False)


# -- epoch mode: the same as Lightning's own callback -----------------------------------------------------------
@oracle.parity
def test_epoch_mode_matches_lightning():
    pl = oracle.lightning()
    runs = []
    for framework in (fulmen, pl):
        factors: list[int] = []

        class Record(framework.Callback):
            def __init__(self, factors: list[int]):
                self.factors = factors

            def on_train_epoch_end(self, trainer, pl_module):
                self.factors.append(trainer.accumulate_grad_batches)

        model = model_class(framework)()
        schedule = framework.callbacks.GradientAccumulationScheduler({1: 3, 2: 2})
        trainer = fit(framework, model, [schedule, Record(factors)])
        runs.append((weights(model), trainer.global_step, factors))
    (ours, our_steps, our_factors), (theirs, their_steps, their_factors) = runs
    assert our_factors == their_factors == [1, 3, 2]
    assert our_steps == their_steps == 8 + 3 + 4  # the last batch of an epoch always steps
    for key in theirs:
        torch.testing.assert_close(ours[key], theirs[key], atol=1e-6, rtol=0)


def test_trainer_accepts_the_1x_dict_spelling():
    by_callback = Model()
    fit(fulmen, by_callback, [GradientAccumulationScheduler({1: 3, 2: 2})])
    by_dict = Model()
    trainer = fit(fulmen, by_dict, [], accumulate_grad_batches={1: 3, 2: 2})
    assert trainer.accumulate_grad_batches == 2
    for key, value in weights(by_callback).items():
        assert torch.equal(weights(by_dict)[key], value)
    with pytest.raises(MisconfigurationException, match="Keep one"):
        fulmen.Trainer(accumulate_grad_batches={0: 2}, callbacks=[GradientAccumulationScheduler({0: 2})])


# -- step mode: windows take their factor when they open ------------------------------------------------------
def step_mode_reference(schedule: dict[int, int], epochs: int) -> tuple[torch.nn.Module, list[int]]:
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    thresholds = sorted(schedule)
    step, sizes = 0, []
    for _ in range(epochs):
        open_window, size, pos = False, 1, 0
        for batch_idx, batch in enumerate(data()):
            if not open_window:
                size = schedule[max(t for t in thresholds if t <= step)]
                pos = 0
                opt.zero_grad()
                sizes.append(size)
            pos += 1
            (bce(model.net(batch[0]), batch[1]) / size).backward()
            open_window = pos < size and batch_idx < N_BATCHES - 1
            if not open_window:
                opt.step()
                step += 1
    return model, sizes


def test_step_mode_matches_a_hand_written_loop():
    schedule = {0: 3, 4: 2, 7: 1}
    sizes: list[int] = []

    class Record(fulmen.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if not trainer.fit_loop.epoch_loop.accumulation_window_open:
                sizes.append(trainer.accumulate_grad_batches)

    model = Model()
    trainer = fit(fulmen, model, [GradientAccumulationScheduler(schedule, mode="step"), Record()])
    ref, ref_sizes = step_mode_reference(schedule, 3)
    # epoch 0: 3+3+2(closed by the epoch end); epoch 1: 3, then from step 4: 2+2+1(epoch end); then 1s
    assert ref_sizes[:7] == [3, 3, 3, 3, 2, 2, 2]
    assert sizes == ref_sizes
    assert trainer.global_step == len(ref_sizes)
    for key, value in weights(ref).items():
        torch.testing.assert_close(weights(model)[key], value, atol=1e-6, rtol=0)


def test_step_mode_resumes_mid_window_exactly(tmp_path):
    schedule = {0: 3, 4: 2, 7: 1}
    straight = Model()
    fit(fulmen, straight, [GradientAccumulationScheduler(schedule, mode="step")])

    class SaveAt(fulmen.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.current_epoch == 1 and batch_idx == 3:  # inside the window that opened at batch 3
                assert trainer.fit_loop.epoch_loop.accumulation_window_open
                trainer.save_checkpoint(tmp_path / "mid.ckpt")

    fit(fulmen, Model(), [GradientAccumulationScheduler(schedule, mode="step"), SaveAt()], max_epochs=2)
    ckpt = torch.load(tmp_path / "mid.ckpt", weights_only=True)
    assert ckpt["callbacks"]["GradientAccumulationScheduler"] == {"scheduling": schedule, "mode": "step"}

    resumed = Model()
    # the checkpoint's schedule wins over the new callback's, with a warning
    replacement = GradientAccumulationScheduler({0: 5}, mode="epoch")
    with pytest.warns(UserWarning, match="checkpoint's schedule"):
        fit(fulmen, resumed, [replacement], ckpt_path=tmp_path / "mid.ckpt")
    assert replacement.mode == "step" and replacement.scheduling == schedule
    for key, value in weights(straight).items():
        assert torch.equal(weights(resumed)[key], value), key


# -- on_train_start checks ---------------------------------------------------------------------------------------
def test_refused_with_manual_optimization_or_a_trainer_factor():
    class Manual(Model):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            pass

    with pytest.raises(RuntimeError, match="automatic optimization"):
        fit(fulmen, Manual(), [GradientAccumulationScheduler({0: 2})])
    with pytest.raises(ValueError, match="Remove `accumulate_grad_batches`"):
        fit(fulmen, Model(), [GradientAccumulationScheduler({0: 2})], accumulate_grad_batches=2)


def test_a_second_fit_with_the_same_trainer_works():
    trainer = fulmen.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, callbacks=[GradientAccumulationScheduler({1: 4})])  # fmt: skip
    trainer.fit(Model(), data())
    assert trainer.accumulate_grad_batches == 4 and trainer.global_step == 8 + 2
    trainer.fit(Model(), data())  # starts from the Trainer's factor (1) again: no ValueError
    assert trainer.global_step == 8 + 2


def test_warns_when_optimizer_hooks_are_overridden():
    class Hooked(Model):
        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
            optimizer.step(closure=optimizer_closure)

    with pytest.warns(UserWarning, match="once per accumulation window"):
        fit(fulmen, Hooked(), [GradientAccumulationScheduler({0: 2})], max_epochs=1)
