"""Several optimizers under automatic optimization (the 1.x API Lightning 2.x removed) and the 1.x hook
signatures. Lightning 2.6.6 cannot serve as the oracle here, so each run is compared with the same training
written as a plain PyTorch loop."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.nn.functional import binary_cross_entropy_with_logits as bce

import fulmen
from fulmen.utilities.exceptions import MisconfigurationException
from tests.core.optimization_examples import N_BATCHES, data, weights

EPOCHS = 3


class TwoPart(fulmen.LightningModule):
    """A generator-like part G and a critic-like part D; optimizer 0 trains G, optimizer 1 trains D."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.G = torch.nn.Linear(6, 6)
        self.D = torch.nn.Sequential(torch.nn.Tanh(), torch.nn.Linear(6, 1))

    def training_step(self, batch, batch_idx, optimizer_idx):
        return part_loss(self, batch, optimizer_idx)


def part_loss(model: Any, batch: Any, idx: int) -> torch.Tensor:
    x, y = batch
    if idx == 0:  # G: fool D (gradient flows through D, whose parameters are toggled off)
        return bce(model.D(model.G(x)), 1 - y)
    return bce(model.D(model.G(x).detach()), y)


def trainer(**kwargs: Any) -> fulmen.Trainer:
    defaults: dict[str, Any] = dict(max_epochs=EPOCHS, logger=False, enable_checkpointing=False,
                                    enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    defaults.update(kwargs)
    return fulmen.Trainer(**defaults)


def reference(
    model: Any,
    optimizers: list[torch.optim.Optimizer],
    loss_fn: Callable[[Any, Any, int, int], torch.Tensor],
    epochs: int = EPOCHS,
    frequencies: list[int] | None = None,
    steps: Callable[[int, int], bool] = lambda batch_idx, idx: True,
    before_step: Callable[[int], None] = lambda idx: None,
    epoch_end: Callable[[list[list[float]]], None] = lambda losses: None,
    batch_end: Callable[[list[int]], None] = lambda active: None,
    accumulate: int = 1,
) -> None:
    """The 1.x loop by hand: per batch, per active optimizer: freeze parameters only other optimizers own,
    compute the loss, zero the grads (to None), backward, ``before_step``, step if ``steps`` says so."""
    owned = [{id(p) for g in opt.param_groups for p in g["params"]} for opt in optimizers]
    for _ in range(epochs):
        losses: list[list[float]] = [[] for _ in optimizers]
        for batch_idx, batch in enumerate(data()):
            if frequencies:
                place = batch_idx % sum(frequencies)
                active = [next(i for i, end in enumerate(itertools.accumulate(frequencies)) if place < end)]
            else:
                active = list(range(len(optimizers)))
            for idx in active:
                frozen = [p for i, opt in enumerate(optimizers) if i != idx for g in opt.param_groups
                          for p in g["params"] if id(p) not in owned[idx] and p.requires_grad]  # fmt: skip
                for p in frozen:
                    p.requires_grad = False
                loss = loss_fn(model, batch, batch_idx, idx)
                losses[idx].append(float(loss.detach()))
                if batch_idx % accumulate == 0:
                    optimizers[idx].zero_grad(set_to_none=True)
                (loss / accumulate).backward()
                window_end = (batch_idx + 1) % accumulate == 0 or batch_idx == N_BATCHES - 1
                if window_end:
                    before_step(idx)
                if window_end and steps(batch_idx, idx):
                    optimizers[idx].step()
                for p in frozen:
                    p.requires_grad = True
            batch_end(active)
        epoch_end(losses)


def assert_same(model: torch.nn.Module, ref: torch.nn.Module) -> None:
    ours, theirs = weights(model), weights(ref)
    for key in theirs:
        torch.testing.assert_close(ours[key], theirs[key], atol=1e-6, rtol=0)
    torch.manual_seed(1)
    assert any(not torch.equal(ours[k], v) for k, v in weights(type(model)()).items()), "did not train"


def two_optimizers(model: Any) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer]:
    return torch.optim.Adam(model.G.parameters(), lr=0.01), torch.optim.SGD(model.D.parameters(), lr=0.1)


# -- seed 002: "Use multiple optimizers (like GANs)": the three configure_optimizers forms ------------------
class NoSchedulers(TwoPart):
    # two optimizers, no schedulers
    def configure_optimizers(self):
        return two_optimizers(self)


class PlateauForAdam(TwoPart):
    def training_step(self, batch, batch_idx, optimizer_idx):
        loss = part_loss(self, batch, optimizer_idx)
        if optimizer_idx == 0:
            self.log("metric_to_track", loss, on_step=False, on_epoch=True)
        return loss

    # two optimizers, one scheduler for adam only
    def configure_optimizers(self):
        opt1, opt2 = two_optimizers(self)
        optimizers = [opt1, opt2]
        lr_schedulers = {
            "scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt1, patience=0, factor=0.5),
            "monitor": "metric_to_track",
        }
        return optimizers, lr_schedulers


class TwoSchedulers(TwoPart):
    # two optimizers, two schedulers
    def configure_optimizers(self):
        opt1, opt2 = two_optimizers(self)
        return [opt1, opt2], [
            torch.optim.lr_scheduler.StepLR(opt1, step_size=1, gamma=0.5),
            torch.optim.lr_scheduler.OneCycleLR(opt2, max_lr=0.2, total_steps=EPOCHS + 1),
        ]


@pytest.mark.parametrize("cls", [NoSchedulers, PlateauForAdam, TwoSchedulers], ids=lambda c: c.__name__)
def test_two_optimizers_match_a_hand_written_loop(cls):
    model = cls()
    run = trainer()
    run.fit(model, data())
    assert run.global_step == EPOCHS * N_BATCHES * 2  # every optimizer step counts (Lightning >= 1.6)

    ref = cls()
    opts = list(two_optimizers(ref))
    schedulers: list[Any] = []
    if cls is PlateauForAdam:
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opts[0], patience=0, factor=0.5)
        schedulers = [lambda losses: plateau.step(sum(losses[0]) / len(losses[0]))]
    elif cls is TwoSchedulers:
        s1 = torch.optim.lr_scheduler.StepLR(opts[0], step_size=1, gamma=0.5)
        s2 = torch.optim.lr_scheduler.OneCycleLR(opts[1], max_lr=0.2, total_steps=EPOCHS + 1)
        schedulers = [lambda losses: s1.step(), lambda losses: s2.step()]

    def epoch_end(losses: list[list[float]]) -> None:
        for step in schedulers:
            step(losses)

    reference(ref, opts, lambda m, b, i, idx: part_loss(m, b, idx), epoch_end=epoch_end)
    assert_same(model, ref)
    assert [g["lr"] for o in run.optimizers for g in o.param_groups] == pytest.approx(
        [g["lr"] for o in opts for g in o.param_groups]
    )


def test_two_optimizers_accumulate_with_each_optimizers_parameters_toggled():
    """Accumulating over 3 batches, G's pass must not leave gradients on D: toggling freezes D for it."""
    model = NoSchedulers()
    run = trainer(accumulate_grad_batches=3)
    run.fit(model, data())
    assert run.global_step == EPOCHS * 3 * 2  # windows end at batches 2, 5 and the last one (7)
    ref = NoSchedulers()
    opts = list(two_optimizers(ref))
    reference(ref, opts, lambda m, b, i, idx: part_loss(m, b, idx), accumulate=3)
    assert_same(model, ref)


# -- seed 002: "Step optimizers at arbitrary intervals" ------------------------------------------------------
class Alternating(NoSchedulers):
    # Alternating schedule for optimizer steps (e.g. GANs)
    def optimizer_step(
        self,
        epoch,
        batch_idx,
        optimizer,
        optimizer_idx,
        optimizer_closure,
        on_tpu=False,
        using_native_amp=False,
        using_lbfgs=False,
    ):
        # update generator every step
        if optimizer_idx == 0:
            optimizer.step(closure=optimizer_closure)

        # update discriminator every 2 steps
        if optimizer_idx == 1:
            if (batch_idx + 1) % 2 == 0:
                # the closure (which includes the training_step) will be executed by optimizer.step
                optimizer.step(closure=optimizer_closure)
            else:
                # call the closure by itself to run training_step + backward without an optimizer step
                optimizer_closure()

        # ...
        # add as many optimizers as you want


def test_step_a_every_batch_and_b_every_two_batches():
    model = Alternating()
    run = trainer()
    run.fit(model, data())
    # Lightning counts a step per optimizer_step call, stepped or not
    assert run.global_step == EPOCHS * N_BATCHES * 2
    ref = Alternating()
    opts = list(two_optimizers(ref))
    reference(
        ref, opts, lambda m, b, i, idx: part_loss(m, b, idx), steps=lambda b, idx: idx == 0 or b % 2 == 1
    )
    assert_same(model, ref)


class Warmup(fulmen.LightningModule):
    def __init__(self, learning_rate: float = 0.5):
        super().__init__()
        self.save_hyperparameters()
        torch.manual_seed(1)
        self.net = torch.nn.Linear(6, 1)

    def training_step(self, batch, batch_idx):
        return bce(self.net(batch[0]), batch[1])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.learning_rate)

    # learning rate warm-up
    def optimizer_step(
        self,
        epoch,
        batch_idx,
        optimizer,
        optimizer_idx,
        optimizer_closure,
        on_tpu=False,
        using_native_amp=False,
        using_lbfgs=False,
    ):
        # skip the first 500 steps
        if self.trainer.global_step < 500:
            lr_scale = min(1.0, float(self.trainer.global_step + 1) / 500.0)
            for pg in optimizer.param_groups:
                pg["lr"] = lr_scale * self.hparams.learning_rate

        # update params
        optimizer.step(closure=optimizer_closure)


class RawOptimizerStep(Warmup):
    # optimizer is a LightningOptimizer wrapping the optimizer.
    # To access it, do the following.
    # However, it won't work on TPU, AMP, etc...
    def optimizer_step(
        self,
        epoch,
        batch_idx,
        optimizer,
        optimizer_idx,
        optimizer_closure,
        on_tpu=False,
        using_native_amp=False,
        using_lbfgs=False,
    ):
        optimizer = optimizer.optimizer
        optimizer.step(closure=optimizer_closure)


@pytest.mark.parametrize("cls", [Warmup, RawOptimizerStep], ids=lambda c: c.__name__)
def test_single_optimizer_with_the_1x_optimizer_step_signature(cls):
    model = cls()
    run = trainer()
    run.fit(model, data())
    assert run.global_step == EPOCHS * N_BATCHES
    ref = cls()
    opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    step = 0
    for _ in range(EPOCHS):
        for batch in data():
            if cls is Warmup:
                for pg in opt.param_groups:
                    pg["lr"] = min(1.0, (step + 1) / 500.0) * 0.5
            opt.zero_grad()
            bce(ref.net(batch[0]), batch[1]).backward()
            opt.step()
            step += 1
    assert_same(model, ref)


# -- seed 002: "Configure gradient clipping" ----------------------------------------------------------------
class ClipFirstOnly(NoSchedulers):
    def training_step(self, batch, batch_idx, optimizer_idx):
        return part_loss(self, batch, optimizer_idx) * 50  # large gradients: clipping changes the result

    def configure_gradient_clipping(
        self, optimizer, optimizer_idx, gradient_clip_val, gradient_clip_algorithm
    ):
        if optimizer_idx == 0:
            # Lightning will handle the gradient clipping
            self.clip_gradients(
                optimizer,
                gradient_clip_val=gradient_clip_val,
                gradient_clip_algorithm=gradient_clip_algorithm,
            )


class ClipBothDifferently(ClipFirstOnly):
    def configure_gradient_clipping(
        self, optimizer, optimizer_idx, gradient_clip_val, gradient_clip_algorithm
    ):
        if optimizer_idx == 0:
            # Lightning will handle the gradient clipping
            self.clip_gradients(
                optimizer,
                gradient_clip_val=gradient_clip_val,
                gradient_clip_algorithm=gradient_clip_algorithm,
            )

        elif optimizer_idx == 1:
            self.clip_gradients(
                optimizer,
                gradient_clip_val=gradient_clip_val * 2,
                gradient_clip_algorithm=gradient_clip_algorithm,
            )


@pytest.mark.parametrize("cls", [ClipFirstOnly, ClipBothDifferently], ids=lambda c: c.__name__)
def test_configure_gradient_clipping_per_optimizer(cls):
    model = cls()
    trainer(gradient_clip_val=0.05).fit(model, data())
    ref = cls()
    opts = list(two_optimizers(ref))

    def clip(idx: int) -> None:
        limit = {0: 0.05, 1: 0.1 if cls is ClipBothDifferently else None}[idx]
        if limit is not None:
            params = [p for g in opts[idx].param_groups for p in g["params"]]
            torch.nn.utils.clip_grad_norm_(params, limit)

    reference(ref, opts, lambda m, b, i, idx: part_loss(m, b, idx) * 50, before_step=clip)
    assert_same(model, ref)


# -- optimizer frequencies (1.x) ------------------------------------------------------------------------------
class Frequencies(TwoPart):
    def configure_optimizers(self):
        opt_g, opt_d = two_optimizers(self)
        sched = torch.optim.lr_scheduler.StepLR(opt_d, step_size=1, gamma=0.8)
        return [
            {"optimizer": opt_g, "frequency": 2},
            {"optimizer": opt_d, "frequency": 1, "lr_scheduler": {"scheduler": sched, "interval": "step"}},
        ]


def test_optimizer_frequencies_take_turns_and_step_their_schedulers():
    model = Frequencies()
    run = trainer()
    run.fit(model, data())
    assert run.global_step == EPOCHS * N_BATCHES  # one optimizer per batch
    ref = Frequencies()
    opts = list(two_optimizers(ref))
    sched = torch.optim.lr_scheduler.StepLR(opts[1], step_size=1, gamma=0.8)

    def batch_end(active: list[int]) -> None:
        if 1 in active:
            sched.step()

    reference(ref, opts, lambda m, b, i, idx: part_loss(m, b, idx), frequencies=[2, 1], batch_end=batch_end)
    assert_same(model, ref)
    # batches 2 and 5 of each 8-batch epoch belong to optimizer 1
    assert run.optimizers[1].param_groups[0]["lr"] == pytest.approx(0.1 * 0.8 ** (2 * EPOCHS))


def test_frequency_must_be_given_to_every_optimizer_and_only_under_automatic_optimization():
    class Missing(TwoPart):
        def configure_optimizers(self):
            opt_g, opt_d = two_optimizers(self)
            return [{"optimizer": opt_g, "frequency": 2}, {"optimizer": opt_d}]

    with pytest.raises(MisconfigurationException, match="frequency"):
        trainer().fit(Missing(), data())

    class Manual(Frequencies):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch, batch_idx):
            pass

    with pytest.raises(MisconfigurationException, match="frequencies"):
        trainer().fit(Manual(), data())


# -- errors --------------------------------------------------------------------------------------------------
def test_several_optimizers_need_optimizer_idx_or_manual_optimization():
    class NoIdx(NoSchedulers):
        def training_step(self, batch, batch_idx):
            return part_loss(self, batch, 0)

    with pytest.raises(MisconfigurationException, match="optimizer_idx") as info:
        trainer().fit(NoIdx(), data())
    assert "automatic_optimization = False" in str(info.value)

    class ManualWithIdx(NoSchedulers):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

    with pytest.raises(MisconfigurationException, match="remove the argument"):
        trainer().fit(ManualWithIdx(), data())


# -- training_epoch_end (1.x) --------------------------------------------------------------------------------
def test_training_epoch_end_gets_every_output_per_optimizer_before_on_train_epoch_end():
    seen: list[Any] = []
    order: list[str] = []

    class Model(Frequencies):
        def training_step(self, batch, batch_idx, optimizer_idx):
            loss = part_loss(self, batch, optimizer_idx)
            return {"loss": loss, "idx": optimizer_idx, "batch_idx": batch_idx}

        def training_epoch_end(self, outputs):
            order.append("training_epoch_end")
            seen.append(outputs)
            self.log("mean_g", torch.stack([o["loss"] for o in outputs[0]]).mean())

        def on_train_epoch_end(self):
            order.append("on_train_epoch_end")

    class Cb(fulmen.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            order.append("callback.on_train_epoch_end")

    model = Model()
    run = trainer(max_epochs=2, callbacks=[Cb()])
    run.fit(model, data())
    assert order == ["training_epoch_end", "callback.on_train_epoch_end", "on_train_epoch_end"] * 2
    outputs = seen[0]
    assert len(outputs) == 2
    assert [o["batch_idx"] for o in outputs[0]] == [0, 1, 3, 4, 6, 7]
    assert [o["batch_idx"] for o in outputs[1]] == [2, 5]
    assert all(o["idx"] == 0 for o in outputs[0]) and all(o["idx"] == 1 for o in outputs[1])
    assert all(not o["loss"].requires_grad for o in outputs[0] + outputs[1])
    assert "mean_g" in run.callback_metrics


def test_training_epoch_end_single_optimizer_and_manual_and_only_when_overridden():
    got: dict[str, Any] = {}

    class Single(Warmup):
        def training_epoch_end(self, outputs):
            got["single"] = outputs

    trainer(max_epochs=1).fit(Single(), data())
    assert len(got["single"]) == N_BATCHES and all(set(o) == {"loss"} for o in got["single"])

    class Plain(Warmup):
        pass

    run = trainer(max_epochs=1)
    run.fit(Plain(), data())
    assert run.fit_loop.epoch_loop.outputs == []  # nothing kept without the override

    # seed 002: "schedulers that require a metric value after each epoch" under manual optimization
    class PlateauManual(fulmen.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            torch.manual_seed(1)
            self.net = torch.nn.Linear(6, 1)

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            opt.zero_grad()
            loss = bce(self.net(batch[0]), batch[1])
            self.manual_backward(loss)
            opt.step()
            self.log("loss", loss, on_step=False, on_epoch=True)
            return loss

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=2.0)
            sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
            return {"optimizer": opt, "lr_scheduler": sched, "monitor": "loss"}

        def training_epoch_end(self, outputs):
            got.setdefault("manual", []).append(len(outputs))
            sch = self.lr_schedulers()

            # If the selected scheduler is a ReduceLROnPlateau scheduler.
            if isinstance(sch, torch.optim.lr_scheduler.ReduceLROnPlateau):
                sch.step(self.trainer.callback_metrics["loss"])

    model = PlateauManual()
    trainer(max_epochs=4).fit(model, data())
    assert got["manual"] == [N_BATCHES] * 4
    ref = PlateauManual()
    opt = torch.optim.SGD(ref.parameters(), lr=2.0)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0, factor=0.5)
    for _ in range(4):
        losses = []
        for batch in data():
            opt.zero_grad()
            loss = bce(ref.net(batch[0]), batch[1])
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        plateau.step(torch.stack(losses).mean())
    assert_same(model, ref)
    assert model.lr_schedulers().optimizer.param_groups[0]["lr"] == opt.param_groups[0]["lr"]


def test_on_train_batch_end_gets_one_output_per_optimizer():
    seen = []

    class Model(Frequencies):
        def on_train_batch_end(self, outputs, batch, batch_idx):
            seen.append([None if o is None else sorted(o) for o in outputs])

    trainer(max_epochs=1).fit(Model(), data())
    assert seen[:3] == [[["loss"], None], [["loss"], None], [None, ["loss"]]]


# -- 1.x hook signatures -------------------------------------------------------------------------------------
def test_1x_hook_signatures_receive_the_optimizer_index():
    calls: list[tuple[Any, ...]] = []

    class Legacy(TwoSchedulers):
        def on_before_optimizer_step(self, optimizer, optimizer_idx):
            calls.append(
                (
                    "on_before_optimizer_step",
                    optimizer_idx,
                    optimizer is self.trainer.optimizers[optimizer_idx],
                )
            )

        def optimizer_zero_grad(self, epoch, batch_idx, optimizer, optimizer_idx):
            calls.append(("optimizer_zero_grad", optimizer_idx))
            optimizer.zero_grad()

        def backward(self, loss, optimizer, optimizer_idx, *args, **kwargs):
            calls.append(("backward", optimizer_idx))
            super().backward(loss, optimizer, optimizer_idx, *args, **kwargs)

        def lr_scheduler_step(self, scheduler, optimizer_idx, metric):
            calls.append(("lr_scheduler_step", optimizer_idx))
            super().lr_scheduler_step(scheduler, optimizer_idx, metric)

        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_idx, optimizer_closure,
                           on_tpu=False, using_native_amp=False, using_lbfgs=False):  # fmt: skip
            calls.append(("optimizer_step", optimizer_idx, on_tpu, using_native_amp, using_lbfgs))
            super().optimizer_step(epoch, batch_idx, optimizer, optimizer_idx, optimizer_closure, on_tpu,
                                   using_native_amp, using_lbfgs)  # fmt: skip

        def configure_gradient_clipping(
            self, optimizer, optimizer_idx, gradient_clip_val, gradient_clip_algorithm
        ):
            calls.append(("configure_gradient_clipping", optimizer_idx, gradient_clip_val))
            super().configure_gradient_clipping(
                optimizer, optimizer_idx, gradient_clip_val, gradient_clip_algorithm
            )

    class LegacyCallback(fulmen.Callback):
        def on_before_optimizer_step(self, trainer, pl_module, optimizer, opt_idx):
            calls.append(("callback", opt_idx))

    model = Legacy()
    trainer(max_epochs=1, limit_train_batches=1, gradient_clip_val=1.0, callbacks=[LegacyCallback()]).fit(
        model, data()
    )
    expected: list[tuple[Any, ...]] = []
    for idx in (0, 1):
        expected += [
            ("optimizer_step", idx, False, False, False),
            ("optimizer_zero_grad", idx),
            ("backward", idx),
            ("callback", idx),
            ("on_before_optimizer_step", idx, True),
            ("configure_gradient_clipping", idx, 1.0),
        ]
    expected += [("lr_scheduler_step", 0), ("lr_scheduler_step", 1)]
    assert calls == expected

    # the same run through fulmen's defaults and a plain 2.x override ends with the same weights
    class Modern(TwoSchedulers):
        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
            optimizer.step(closure=optimizer_closure)

    modern = Modern()
    trainer(max_epochs=1, limit_train_batches=1, gradient_clip_val=1.0).fit(modern, data())
    assert_same(model, modern)


def test_resume_with_two_optimizers_is_exact(tmp_path):
    straight = Frequencies()
    trainer().fit(straight, data())

    class SaveAt(fulmen.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.current_epoch == 1 and batch_idx == 3:
                trainer.save_checkpoint(tmp_path / "mid.ckpt")

    first = Frequencies()
    trainer(max_epochs=2, callbacks=[SaveAt()]).fit(first, data())
    ckpt = torch.load(tmp_path / "mid.ckpt", weights_only=True)
    assert len(ckpt["optimizer_states"]) == 2 and len(ckpt["lr_schedulers"]) == 1
    resumed = Frequencies()
    trainer().fit(resumed, data(), ckpt_path=tmp_path / "mid.ckpt")
    for key, value in weights(straight).items():
        assert torch.equal(weights(resumed)[key], value), key


@pytest.mark.parity
@pytest.mark.parametrize("manual", [False, True])
def test_refusing_optimizer_idx_raises_lightnings_class(tmp_path, manual):
    """fulmen keeps the 1.x ``optimizer_idx``; where it refuses a setup (several optimizers without the argument,
    the argument under manual optimization), ``except RuntimeError`` written for Lightning catches it."""
    from tests.parity.recorded import boring_model, both, raised_as_lightning

    def program(pl):
        class Two(boring_model(pl)):
            def __init__(self):
                super().__init__()
                self.automatic_optimization = not manual

            def configure_optimizers(self):
                return [torch.optim.SGD(self.parameters(), lr=0.1), torch.optim.SGD(self.parameters(), lr=0.1)]

        if manual:
            Two.training_step = lambda self, batch, batch_idx, optimizer_idx: None  # type: ignore[method-assign]
        pl.Trainer(default_root_dir=tmp_path, max_steps=1, logger=False, enable_progress_bar=False,
                   enable_model_summary=False).fit(Two())  # fmt: skip

    ours, theirs = both(program, r"^$")
    assert theirs.error == "RuntimeError" and raised_as_lightning(ours, theirs), (ours, theirs)
    assert "MisconfigurationException" in ours.classes
