"""The straight-through training step (``AutomaticOptimization.run_plain``: training_step, zero_grad, backward,
step, with nothing in between) against the general path (closure, strategy, precision plugin) and against a
reference loop written plainly: the same weights, step counts and logged values, in every case where the
straight-through step applies, and the general path wherever something needs it."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
import torch
from torch import nn

import fulmen
from fulmen.loops.optimization.automatic import AutomaticOptimization
from fulmen.strategies.strategy import Strategy

# the batches, the network and what training_step returns are the reference-step test's (one set for both)
from tests.loops.test_reference_step import BATCHES, _Batches, _net, _output


def _batches() -> _Batches:
    return _Batches()


OPTIMIZERS = {
    "sgd momentum": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    "adamw": lambda params: torch.optim.AdamW(params, lr=0.01),
}
# what training_step returns: a loss tensor (straight through), a dict (the general path from the output on),
# None on every third batch (that batch skipped)
RETURNS = ["tensor", "dict", "none every third"]


class _Module(fulmen.LightningModule):
    def __init__(self, optimizer: str, returns: str) -> None:
        super().__init__()
        self.net = _net()
        self.optimizer, self.returns = optimizer, returns

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("loss", loss, on_step=True, on_epoch=True)
        return _output(loss, self.returns, batch_idx)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return OPTIMIZERS[self.optimizer](self.parameters())


class _HookBetweenBackwardAndStep(fulmen.Callback):
    """Does nothing, but is a hook between backward and the step: the step then takes the general path."""

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        pass


def _fit(optimizer: str, returns: str, general: bool) -> tuple[_Module, fulmen.Trainer, int]:
    module = _Module(optimizer, returns)
    trainer = fulmen.Trainer(
        accelerator="cpu", max_epochs=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[_HookBetweenBackwardAndStep()] if general else [],
    )  # fmt: skip
    with mock.patch.object(AutomaticOptimization, "_run_one", autospec=True, side_effect=AutomaticOptimization._run_one) as run:
        trainer.fit(module, _batches())
    return module, trainer, run.call_count


def _reference(optimizer: str, returns: str) -> nn.Module:
    """The steps written plainly, two epochs."""
    net = _net()
    opt = OPTIMIZERS[optimizer](net.parameters())
    for _ in range(2):
        for batch_idx, (x, y) in enumerate(_batches()):
            out = _output(nn.functional.cross_entropy(net(x), y), returns, batch_idx)
            loss = out["loss"] if isinstance(out, dict) else out
            if loss is None:
                continue
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return net


@pytest.mark.parametrize("returns", RETURNS)
@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_the_straight_through_step_trains_as_the_general_path_and_the_reference(optimizer, returns):
    plain, plain_trainer, general_calls_in_plain = _fit(optimizer, returns, general=False)
    general, general_trainer, general_calls = _fit(optimizer, returns, general=True)
    assert general_calls == 2 * BATCHES  # every batch through the closure, the strategy and the precision
    # a loss tensor goes straight through; anything else hands its output to the general path
    assert general_calls_in_plain == {"tensor": 0, "dict": 2 * BATCHES, "none every third": 4}[returns]
    reference = _reference(optimizer, returns)
    for (name, value), expected, other in zip(plain.net.state_dict().items(), reference.state_dict().values(),
                                              general.net.state_dict().values()):  # fmt: skip
        assert torch.equal(value, expected), name
        assert torch.equal(value, other), name
    assert plain_trainer.global_step == general_trainer.global_step
    assert plain_trainer.callback_metrics.keys() == general_trainer.callback_metrics.keys()
    for key, value in general_trainer.callback_metrics.items():
        assert torch.equal(plain_trainer.callback_metrics[key], value), key


@pytest.mark.parametrize(
    "flags",
    [
        {"gradient_clip_val": 1.0},
        {"accumulate_grad_batches": 2},
        {"precision": "bf16-mixed"},
        {"enable_progress_bar": True},
    ],
    ids=["clipping", "accumulation", "bf16-mixed", "progress bar (a batch-end hook)"],
)
def test_whatever_runs_between_the_parts_takes_the_general_path(flags):
    module = _Module("sgd momentum", "tensor")
    options = dict(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False) | flags  # fmt: skip
    with mock.patch.object(AutomaticOptimization, "_run_one", autospec=True, side_effect=AutomaticOptimization._run_one) as run:
        fulmen.Trainer(**options).fit(module, _batches())
    assert run.call_count == BATCHES


def test_a_patched_strategy_step_is_called():
    """A patch of the strategy's methods (how tests watch them) is honoured: the step goes through them."""
    module = _Module("sgd momentum", "tensor")
    trainer = fulmen.Trainer(accelerator="cpu", max_epochs=1, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    with mock.patch.object(Strategy, "optimizer_step", autospec=True, side_effect=Strategy.optimizer_step) as step:
        trainer.fit(module, _batches())
    assert step.call_count == BATCHES
