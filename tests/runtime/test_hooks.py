"""The hook dispatcher: which hooks it skips, what it caches, the 1.x signatures, and that the inline fast
path (every step hook left at its default) trains exactly like the dispatched one."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import fulmen
from fulmen.runtime.context import RunContext
from fulmen.runtime.hooks import HookDispatcher, takes_optimizer_idx


class Model(fulmen.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        return [opt], [{"scheduler": torch.optim.lr_scheduler.StepLR(opt, 3, 0.5), "interval": "step"}]


class Overridden(Model):
    """Every step hook overridden with what the default does: the loops must dispatch each one."""

    def __init__(self):
        super().__init__()
        self.calls: dict[str, int] = {}

    def _count(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1

    def on_before_batch_transfer(self, batch, dataloader_idx):
        self._count("on_before_batch_transfer")
        return batch

    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        self._count("transfer_batch_to_device")
        return super().transfer_batch_to_device(batch, device, dataloader_idx)

    def on_after_batch_transfer(self, batch, dataloader_idx):
        self._count("on_after_batch_transfer")
        return batch

    def on_train_batch_start(self, batch, batch_idx):
        self._count("on_train_batch_start")

    def on_train_batch_end(self, outputs, batch, batch_idx):
        self._count("on_train_batch_end")

    def on_before_zero_grad(self, optimizer):
        self._count("on_before_zero_grad")

    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        self._count("optimizer_zero_grad")
        super().optimizer_zero_grad(epoch, batch_idx, optimizer)

    def on_before_backward(self, loss):
        self._count("on_before_backward")

    def backward(self, loss, *args, **kwargs):
        self._count("backward")
        super().backward(loss, *args, **kwargs)

    def on_after_backward(self):
        self._count("on_after_backward")

    def on_before_optimizer_step(self, optimizer):
        self._count("on_before_optimizer_step")

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        self._count("configure_gradient_clipping")
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        self._count("optimizer_step")
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)

    def lr_scheduler_step(self, scheduler, metric):
        self._count("lr_scheduler_step")
        super().lr_scheduler_step(scheduler, metric)


class CountingCallback(fulmen.Callback):
    """The callback side of the same hooks, doing nothing: still, they must be dispatched."""

    def __init__(self):
        self.calls = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.calls += 1

    def on_before_backward(self, trainer, pl_module, loss):
        self.calls += 1

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.calls += 1


def _data():
    g = torch.Generator().manual_seed(1)
    return DataLoader(TensorDataset(torch.randn(40, 4, generator=g), torch.randn(40, 1, generator=g)), batch_size=4)


def _fit(model, callbacks=(), **flags):
    trainer = fulmen.Trainer(max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, callbacks=list(callbacks), **flags)  # fmt: skip
    trainer.fit(model, _data())
    return trainer


@pytest.mark.parametrize("flags", [{}, {"accumulate_grad_batches": 3, "gradient_clip_val": 0.05}])
def test_inline_and_dispatched_paths_give_identical_weights(flags):
    inline, dispatched = Model(), Overridden()
    callback = CountingCallback()
    _fit(inline, **flags)
    trainer = _fit(dispatched, [callback], **flags)
    for p, q in zip(inline.parameters(), dispatched.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    steps = trainer.global_step
    assert steps == (20 if not flags else 2 * 4)  # 10 batches per epoch; windows of 3 close at the epoch end
    # each overridden hook really ran, as often as it should: the dispatched path was taken
    calls = dispatched.calls
    assert calls["on_train_batch_start"] == calls["backward"] == calls["on_after_batch_transfer"] == 20
    assert calls["optimizer_step"] == calls["optimizer_zero_grad"] == calls["lr_scheduler_step"] == steps
    assert calls["configure_gradient_clipping"] == calls["on_before_optimizer_step"] == steps
    assert callback.calls == 20 + 20 + steps


def test_defaults_only_and_the_cache_follow_the_module_and_callbacks():
    trainer = fulmen.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, max_epochs=1)
    context: RunContext = trainer.run_context
    hooks: HookDispatcher = context.hooks
    context.module = Model()
    assert hooks.defaults_only("optimizer_step", "on_train_batch_start")
    assert hooks.defaults_only("optimizer_step")
    assert hooks.call_module("on_train_start") is None  # a no-op hook is skipped
    context.module = Overridden()
    assert hooks.defaults_only("optimizer_step")  # cached until reset()
    hooks.reset()
    assert not hooks.defaults_only("optimizer_step")
    context.module = Model()
    context.callbacks = [CountingCallback()]
    hooks.reset()
    assert not hooks.defaults_only("on_before_backward")
    assert hooks.defaults_only("optimizer_step")


def test_current_fx_name_is_set_while_a_hook_runs_and_restored_after():
    seen = []

    class Recorder(Model):
        def on_train_start(self):
            seen.append(self._current_fx_name)

    class CallbackRecorder(fulmen.Callback):
        def on_train_start(self, trainer, pl_module):
            seen.append(pl_module._current_fx_name)

    model = Recorder()
    _fit(model, [CallbackRecorder()], max_steps=1)
    assert seen == ["on_train_start", "on_train_start"]
    assert model._current_fx_name is None


def test_one_x_signatures_receive_the_optimizer_index():
    class OneX(Model):
        def __init__(self):
            super().__init__()
            self.indices = []

        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_idx, optimizer_closure, on_tpu=False,
                           using_native_amp=False, using_lbfgs=False):  # fmt: skip
            self.indices.append((optimizer_idx, using_lbfgs))
            optimizer.step(closure=optimizer_closure)

        def on_before_optimizer_step(self, optimizer, optimizer_idx):
            self.indices.append(optimizer_idx)

    model = OneX()
    _fit(model, max_steps=2)
    assert model.indices == [(0, False), 0, (0, False), 0]  # optimizer_step, then inside its step the hook
    assert takes_optimizer_idx(OneX().optimizer_step, 4)
    assert not takes_optimizer_idx(Model().optimizer_step, 4)


def test_overriding_a_hook_on_the_instance_counts():
    model = Model()
    trained = copy.deepcopy(model)
    calls = []
    trained.on_train_batch_end = lambda outputs, batch, batch_idx: calls.append(batch_idx)  # type: ignore[method-assign]
    _fit(trained, max_steps=3)
    assert calls == [0, 1, 2]


def test_is_overridden_sees_through_wrappers_and_none():
    import functools
    from unittest import mock

    from fulmen.utilities.model_helpers import is_overridden

    def wrap(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            return fn(*args, **kwargs)

        return wrapper

    model = Model()
    assert is_overridden("training_step", model) and not is_overridden("on_fit_start", model)
    model.on_fit_start = wrap(model.on_fit_start)  # a wrapper of the default is not an override
    assert not is_overridden("on_fit_start", model)
    model.training_step = wrap(model.training_step)  # ... of the class's own method it is
    assert is_overridden("training_step", model)
    model.on_train_start = lambda: None
    assert is_overridden("on_train_start", model)
    model.on_train_end = None  # switched off
    assert not is_overridden("on_train_end", model)

    class Off(Model):
        configure_model = None

    assert not is_overridden("configure_model", Off())
    assert not is_overridden("on_fit_start", mock.Mock(spec=fulmen.Callback))


def test_wrapped_defaults_and_mock_callbacks_are_still_called():
    """A wrapper on the instance runs even around a default the dispatcher would skip; a Mock(spec=Callback)
    receives every callback hook (tests record calls that way)."""
    from unittest import mock

    calls = []
    model = Model()
    default = model.on_train_epoch_start

    def recording():
        calls.append("on_train_epoch_start")
        return default()

    model.on_train_epoch_start = recording  # type: ignore[method-assign]
    callback = mock.Mock(spec=fulmen.Callback)
    _fit(model, max_steps=2, callbacks=[callback])
    assert calls == ["on_train_epoch_start"]
    names = [c[0] for c in callback.method_calls]
    assert names.index("setup") < names.index("on_fit_start") < names.index("on_train_batch_end")
    assert names.count("on_train_batch_end") == 2


def test_a_one_x_hook_runs_only_when_the_class_defines_it():
    import functools

    seen = []

    class Sharded(Model):
        def configure_sharded_model(self):
            seen.append("configure_sharded_model")

    model = Model()
    default = model.configure_sharded_model

    @functools.wraps(default)
    def wrapper():  # a wrapper of the default (a tool recording every hook): not a 1.x model
        seen.append("wrapped default")
        return default()

    model.configure_sharded_model = wrapper  # type: ignore[method-assign]
    _fit(model, max_steps=1)
    _fit(Sharded(), max_steps=1)
    assert seen == ["configure_sharded_model"]


@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_a_stage_limited_to_zero_batches_does_not_build_its_dataloader(stage):
    from fulmen.demos.boring_classes import BoringModel

    asked = []

    class Lazy(BoringModel):
        def val_dataloader(self):
            asked.append("val")
            return super().val_dataloader()

        def test_dataloader(self):
            asked.append("test")
            return super().test_dataloader()

        def predict_dataloader(self):
            asked.append("predict")
            return super().predict_dataloader()

    limits = {"validate": "limit_val_batches", "test": "limit_test_batches", "predict": "limit_predict_batches"}
    trainer = fulmen.Trainer(logger=False, enable_progress_bar=False, **{limits[stage]: 0})
    getattr(trainer, stage)(Lazy())
    assert asked == []


def test_each_stage_starts_without_gradients_left_over():
    model = Model()
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    grads = {}

    class Look(fulmen.Callback):
        def on_validation_start(self, trainer, pl_module):
            grads["validate"] = [p.grad for p in pl_module.parameters()]

    trainer = fulmen.Trainer(logger=False, enable_progress_bar=False, callbacks=[Look()])
    model.validation_step = lambda batch, batch_idx: None  # type: ignore[method-assign]
    trainer.validate(model, _data())
    assert grads["validate"] == [None] * len(grads["validate"])
