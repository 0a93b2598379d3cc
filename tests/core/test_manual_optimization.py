"""Manual optimization and the 2.x optimization hooks: every example of the pages runs under fulmen and
under Lightning 2.6.6 (the oracle) and ends with the same weights, global step and learning rates."""

from __future__ import annotations

import pytest
import torch

import fulmen
from fulmen.plugins import MixedPrecision
from tests.core.optimization_examples import N_BATCHES, examples, fit, weights
from tests.parity import oracle

pl_lightning = oracle.lightning()

FULMEN = examples(fulmen)
LIGHTNING = examples(pl_lightning)

# name -> what to check beyond weight parity: the number of optimizer steps the text implies
EXPECTED_STEPS = {
    "MyModel": 3 * N_BATCHES,
    "ManualAccumulation": 3 * 2,  # batches 2 and 5 of each 8-batch epoch
    "SimpleGAN": 3 * N_BATCHES * 2,  # two optimizers step on every batch
    "ToggledGAN": 3 * (N_BATCHES // 2) * 2,  # every second batch (8 is even: the last batch is one of them)
    "SchedulerEveryStep": 3 * N_BATCHES,
    "TwoSchedulersEveryStep": 3 * N_BATCHES,
    "SchedulerEveryN": 3 * N_BATCHES,
    "LBFGSClosure": 3 * N_BATCHES,
    "OwnOptimizer": 0,  # the raw optimizer's step bypasses the trainer: Lightning does not count it either
    "GradsToNone": 3 * N_BATCHES,
    "WarmupV2": 3 * N_BATCHES,
}


def _run(pl, classes, name):
    torch.manual_seed(0)
    model = classes[name]()
    trainer = fit(pl, model, max_epochs=3)
    lrs = [g["lr"] for opt in trainer.optimizers for g in opt.param_groups]
    return weights(model), trainer.global_step, lrs


@oracle.parity
@pytest.mark.parametrize("name", sorted(EXPECTED_STEPS))
def test_page_example_matches_lightning(name):
    assert set(FULMEN) == set(EXPECTED_STEPS)  # every example of the pages is listed above
    ours, our_steps, our_lrs = _run(fulmen, FULMEN, name)
    theirs, their_steps, their_lrs = _run(pl_lightning, LIGHTNING, name)
    assert our_steps == their_steps == EXPECTED_STEPS[name]
    assert our_lrs == pytest.approx(their_lrs, rel=1e-9)
    for key in theirs:
        torch.testing.assert_close(ours[key], theirs[key], atol=1e-6, rtol=0)
    torch.manual_seed(0)
    untrained = weights(FULMEN[name]())
    assert any(not torch.equal(untrained[k], ours[k]) for k in ours), "the example did not train"


def test_lr_schedules_are_stepped_by_the_user_only():
    """Manual optimization: schedulers move exactly as training_step steps them (interval keys ignored)."""
    model = FULMEN["SchedulerEveryN"]()
    trainer = fit(fulmen, model, max_epochs=4)
    # sch1: every 3 batches (2 per epoch), gamma 0.9; sch2: every 2nd epoch's last batch, gamma 0.5
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1 * 0.9**8 * 0.5**2)
    model = FULMEN["TwoSchedulersEveryStep"]()
    fit(fulmen, model, max_epochs=1)
    sch1, sch2 = model.lr_schedulers()
    assert sch1.last_epoch == sch2.last_epoch == N_BATCHES


def test_grads_are_none_after_zero_grad_by_default_and_with_the_override():
    seen = []

    def record(module):
        def on_before_backward(loss):
            if module.trainer.run_context.progress.window.pos == 1:  # right after optimizer_zero_grad
                seen.append(all(p.grad is None for p in module.parameters()))

        return on_before_backward

    default = FULMEN["GradsToNone"]
    plain = type("Plain", (default,), {"optimizer_zero_grad": fulmen.LightningModule.optimizer_zero_grad})
    for cls in (default, plain):
        model = cls()
        model.on_before_backward = record(model)
        fit(fulmen, model, max_epochs=1, accumulate_grad_batches=2)
    assert seen == [True] * (2 * N_BATCHES // 2)  # every window of both runs


def test_optimizer_zero_grad_override_runs_once_per_window():
    calls = []

    class Model(FULMEN["GradsToNone"]):
        def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
            calls.append((epoch, batch_idx))
            optimizer.zero_grad(set_to_none=True)

    fit(fulmen, Model(), max_epochs=2, accumulate_grad_batches=3)
    assert calls == [(e, b) for e in range(2) for b in (0, 3, 6)]


def test_lightning_optimizer_wraps_the_users_optimizer():
    seen = {}

    class Model(FULMEN["MyModel"]):
        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            seen["wrapper"] = opt
            seen["raw"] = self.optimizers(use_pl_optimizer=False)
            return super().training_step(batch, batch_idx)

    model = Model()
    trainer = fit(fulmen, model, max_epochs=1)
    opt = seen["wrapper"]
    assert isinstance(opt, fulmen.core.optimizer.LightningOptimizer)
    assert isinstance(opt, torch.optim.SGD)  # still an instance of the user's class
    assert opt.optimizer is seen["raw"] is trainer.optimizers[0]
    assert opt.param_groups is opt.optimizer.param_groups
    assert model.lr_schedulers() is None


def test_toggle_model_freezes_parameters_owned_only_by_other_optimizers():
    states = []

    class Model(fulmen.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.a = torch.nn.Linear(6, 1)
            self.b = torch.nn.Linear(6, 1)
            self.shared = torch.nn.Parameter(torch.zeros(1))
            self.frozen = torch.nn.Parameter(torch.zeros(1), requires_grad=False)

        def training_step(self, batch, batch_idx):
            opt_a, opt_b = self.optimizers()
            with opt_a.toggle_model():
                states.append(
                    (self.a.weight.requires_grad, self.b.weight.requires_grad, self.shared.requires_grad)
                )
                with pytest.raises(RuntimeError):  # b is frozen inside the block: no graph reaches it
                    self.b(batch[0]).sum().backward()
            states.append((self.b.weight.requires_grad, self.frozen.requires_grad))
            with self.toggled_optimizer(opt_b):
                states.append((self.a.weight.requires_grad, self.b.weight.requires_grad))

        def configure_optimizers(self):
            return (
                torch.optim.SGD([*self.a.parameters(), self.shared], lr=0.1),
                torch.optim.SGD([*self.b.parameters(), self.shared, self.frozen], lr=0.1),
            )

    model = Model()
    trainer = fulmen.Trainer(max_epochs=1, limit_train_batches=1, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    from tests.core.optimization_examples import data

    trainer.fit(model, data())
    assert states == [(True, False, True), (True, False), (False, True)]
    assert model.a.weight.requires_grad and model.b.weight.requires_grad and not model.frozen.requires_grad


def test_manual_backward_outside_manual_optimization_is_an_error():
    class Model(FULMEN["GradsToNone"]):
        def training_step(self, batch, batch_idx):
            loss = self.compute_loss(batch)
            self.manual_backward(loss)
            return loss

    with pytest.raises(
        fulmen.utilities.exceptions.MisconfigurationException, match="automatic_optimization = False"
    ):
        fit(fulmen, Model(), max_epochs=1)


@oracle.parity
@pytest.mark.parametrize("flags", [{"accumulate_grad_batches": 2}, {"gradient_clip_val": 0.5}])
def test_manual_optimization_refuses_trainer_flags_with_lightnings_message(flags):
    messages = []
    for pl, classes in ((fulmen, FULMEN), (pl_lightning, LIGHTNING)):
        with pytest.raises(Exception) as info:
            fit(pl, classes["MyModel"](), max_epochs=1, **flags)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


def test_closure_that_never_runs_is_reported():
    class Model(FULMEN["GradsToNone"]):
        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
            pass  # neither steps nor calls the closure

    with pytest.raises(
        fulmen.utilities.exceptions.MisconfigurationException, match="closure was never called"
    ):
        fit(fulmen, Model(), max_epochs=1)


def test_clip_gradients_in_manual_optimization():
    norms = []

    class Model(FULMEN["MyModel"]):
        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(self.compute_loss(batch) * 100)
            self.clip_gradients(opt, gradient_clip_val=0.01, gradient_clip_algorithm="norm")
            norms.append(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in self.parameters()])))
            opt.step()

    fit(fulmen, Model(), max_epochs=1)
    assert len(norms) == N_BATCHES and all(n <= 0.01 + 1e-6 for n in norms)


def _manual_hook_calls(pl) -> list[str]:
    calls: list[str] = []
    hooks = ["on_before_zero_grad", "on_before_backward", "on_after_backward", "on_before_optimizer_step",
             "on_train_batch_start", "on_train_batch_end", "configure_gradient_clipping", "optimizer_zero_grad",
             "optimizer_step", "lr_scheduler_step", "backward"]  # fmt: skip

    class Rec(pl.Callback):
        pass

    def wrap(name, prefix, original=None):
        def hook(self, *args, **kwargs):
            calls.append(f"{prefix}.{name}")
            if original is not None:
                return original(self, *args, **kwargs)

        return hook

    classes = examples(pl)
    Model = type("Model", (classes["SchedulerEveryStep"],), {})
    for name in hooks:
        if hasattr(pl.Callback, name):
            setattr(Rec, name, wrap(name, "cb"))
        setattr(Model, name, wrap(name, "m", getattr(Model, name)))
    fit(pl, Model(), max_epochs=1, callbacks=[Rec()], limit_train_batches=2)
    return calls


@oracle.parity
def test_manual_optimization_hook_order_matches_lightning():
    ours = _manual_hook_calls(fulmen)
    assert ours == _manual_hook_calls(pl_lightning)
    assert "m.optimizer_step" not in ours and "m.lr_scheduler_step" not in ours  # the user steps both


def test_toggle_model_without_sync_grad_blocks_gradient_synchronisation():
    """sync_grad=False enters the strategy's block_backward_sync (DDP no_sync); the DDP run itself is tested
    with the distributed strategy."""
    import contextlib

    from fulmen.strategies import SingleDeviceStrategy

    blocked: list[bool] = []
    inside: list[bool] = []

    class Recording(SingleDeviceStrategy):
        @contextlib.contextmanager
        def block_backward_sync(self):
            inside.append(True)
            yield
            inside.pop()

    class Model(FULMEN["ToggledGAN"]):
        def manual_backward(self, loss, *args, **kwargs):
            blocked.append(bool(inside))
            super().manual_backward(loss, *args, **kwargs)

    fit(fulmen, Model(), max_epochs=1, strategy=Recording())
    # two backward passes per batch; sync is blocked on the batches that only accumulate (0, 2, 4, 6)
    assert blocked == [b % 2 == 0 for b in range(N_BATCHES) for _ in range(2)]


def test_manual_backward_and_step_go_through_the_precision_plugin():
    """'16-mixed' with a GradScaler (on this CPU: float16 autocast and a CPU scaler, the path CUDA takes):
    manual_backward scales the loss, clip_gradients and opt.step() unscale it, as a hand-written AMP loop
    does; Lightning would clip the scaled gradients. (A step used to be skipped here, mistaken for a
    training_step that returned None.)"""
    grads = []

    class Model(FULMEN["MyModel"]):
        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            opt.zero_grad()
            self.manual_backward(self.compute_loss(batch))
            grads.append(self.net[0].weight.grad.abs().sum().item())
            self.clip_gradients(opt, gradient_clip_val=0.5)
            opt.step()

    model = Model()
    plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=1024.0))
    trainer = fulmen.Trainer(max_epochs=1, plugins=[plugin], logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    from tests.core.optimization_examples import compute_loss, data

    trainer.fit(model, data())

    ref = FULMEN["MyModel"]()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    ref_grads = []
    for batch in data():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = compute_loss(ref, batch)
        scaler.scale(loss).backward()
        ref_grads.append(ref.net[0].weight.grad.abs().sum().item())
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
        scaler.step(opt)
        scaler.update()
    assert grads == pytest.approx(ref_grads) and grads[0] > 100  # scaled by 1024 before the step
    for key, value in weights(ref).items():
        torch.testing.assert_close(weights(model)[key], value, atol=1e-6, rtol=0)


def test_manual_optimization_needs_no_monitor_and_warns_about_ignored_scheduler_keys():
    class Plateau(FULMEN["MyModel"]):
        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return [opt], [torch.optim.lr_scheduler.ReduceLROnPlateau(opt)]  # no monitor: the user steps it

    fit(fulmen, Plateau(), max_epochs=1)

    class Keys(FULMEN["MyModel"]):
        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.StepLR(opt, 1)
            return {
                "optimizer": opt,
                "lr_scheduler": {"scheduler": sched, "interval": "step", "frequency": 2},
            }

    with pytest.warns(RuntimeWarning, match=r"key\(s\) \['frequency'\], but the keys will be ignored"):  # interval is kept
        trainer = fit(fulmen, Keys(), max_epochs=1)
    assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == 0  # never stepped by the trainer
