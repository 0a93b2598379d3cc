"""Every fast path of fulmen's training step, and every general twin, against one training loop written plainly.

The loop skips work nothing observes (default hooks run inline, batches go straight through, the step plan
leaves out contexts and hooks nobody overrides). Each case below switches one of those paths off the way real
code does (a hook, an override, a flag), or several at once, and checks that fulmen ends with exactly the
reference's weights (``torch.equal``: both sides run the same CPU operations on the same values in the same order,
which gives the same bits in float32, float64 and under bfloat16 autocast alike; no case needs a tolerance), its
``global_step`` and its logged losses; and that the switches the run read are the ones the case meant to flip, and
the batches took the path they say (straight through or the general one), so every path provably ran.
``test_every_switch_is_exercised`` fails when the code grows a switch that no case turns off.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import pytest
import torch
from torch import nn

import fulmen
from fulmen.loggers.logger import Logger
from fulmen.loops.optimization.automatic import AutomaticOptimization
from fulmen.precision import Precision, closure_runs_first
from fulmen.strategies.single_device import SingleDeviceStrategy

BATCHES = 8
CLIP = {"norm": torch.nn.utils.clip_grad_norm_, "value": torch.nn.utils.clip_grad_value_}


def _output(loss: torch.Tensor, returns: str, batch_idx: int) -> Any:
    """What training_step returns: the loss, a dict holding it, or None (skip the batch) on every third batch."""
    if returns == "dict":
        return {"loss": loss, "extra": loss.detach()}
    if returns == "none every third" and batch_idx % 3 == 2:
        return None
    return loss


# -- the reference: a training loop as one writes it by hand -------------------------------------------------
def reference_fit(
    net: nn.Module, optimizer: torch.optim.Optimizer, batches: _Batches, returns: str = "tensor", k: int = 1,
    clip: tuple[str, float] | None = None, autocast: Callable[[], Any] = contextlib.nullcontext,
) -> tuple[int, list[float]]:  # fmt: skip
    """Forward, loss, backward (of loss / k), every k batches (and at the end) clipping, step and zero_grad.
    Returns the steps taken and the loss of each batch that ended with a step (what fulmen logs)."""
    steps, logged = 0, []
    for i, (x, y) in enumerate(batches):
        with autocast():
            loss = nn.functional.cross_entropy(net(x), y)
        out = _output(loss, returns, i)
        if out is not None:
            ((out["loss"] if isinstance(out, dict) else out) / k).backward()
        if (i + 1) % k and i + 1 < len(batches):
            continue  # the window is still open: gradients add up
        if clip is not None:
            CLIP[clip[0]](net.parameters(), clip[1])
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        steps += 1
        logged.append(loss.item())
    return steps, logged


def reference_fit_with_closure(
    net: nn.Module, optimizer: torch.optim.Optimizer, batches: _Batches, clip: tuple[str, float] | None = None
) -> tuple[int, list[float]]:
    """The same for an optimizer that evaluates the loss itself, possibly several times (LBFGS)."""
    steps, logged, evaluated = 0, [], []
    for x, y in batches:

        def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(net(x), y)
            loss.backward()
            if clip is not None:
                CLIP[clip[0]](net.parameters(), clip[1])
            evaluated.append(loss.item())
            return loss

        optimizer.step(closure)
        steps += 1
        logged.append(evaluated[-1])  # the last evaluation is the one the step logged
    return steps, logged


# -- the switches a step plans with, in their fast state ------------------------------------------------------
FAST = {
    # the epoch loop's plan (TrainingEpochLoop.step_flags)
    "batch_hooks": False, "collect_outputs": False, "strategy_batch_start": False, "plain_steps": True,
    # automatic optimization's (AutomaticOptimization.step_flags)
    "pass_optimizer_idx": False, "inline_zero_grad": True, "inline_step": True, "post_step": False,
    "outputs_unread": True,
    # the strategy's step plan (Strategy.step_plan)
    "default_transfer": True, "keeps_inputs": True, "plain_forward": True, "inline_backward": True,
    "plain_backward": True, "strategy_pre_backward": False, "strategy_post_backward": False,
    "own_precision_step": True, "nothing_after_closure": True,
    # the precision's: the optimizer calls its closure first thing (precision.closure_runs_first)
    "closure_first": True,
}  # fmt: skip
# what a reader of batch outputs turns off with itself
_READS_OUTPUTS = {"batch_hooks", "outputs_unread", "plain_steps"}


def _switches(trainer: fulmen.Trainer) -> dict[str, bool]:
    """Every switch the last run's steps read, by name."""
    epoch_loop = trainer.fit_loop.epoch_loop
    sources = (epoch_loop.step_flags, epoch_loop.automatic.step_flags, trainer.strategy.step_plan,
               {"closure_first": closure_runs_first(trainer.optimizers[0])})  # fmt: skip
    switches = {name: value for source in sources for name, value in source.items()}
    assert len(switches) == sum(map(len, sources)), "two switches share a name: one would hide the other"
    return switches


# -- what the cases put into the run -------------------------------------------------------------------------
class _SGDOutsideTorch(torch.optim.SGD):
    """SGD under another module's name: not known to call its closure first, so it gets the closure."""


OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    "adamw": lambda params: torch.optim.AdamW(params, lr=0.01),
    "sgd outside torch": lambda params: _SGDOutsideTorch(params, lr=0.1, momentum=0.9),
    "lbfgs": lambda params: torch.optim.LBFGS(params, lr=0.5, max_iter=3),
}


class _Module(fulmen.LightningModule):
    def __init__(self, optimizer: str, returns: str) -> None:
        super().__init__()
        self.net = _net()
        self.optimizer_name, self.returns = optimizer, returns

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("loss", loss)
        return _output(loss, self.returns, batch_idx)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return OPTIMIZERS[self.optimizer_name](self.parameters())


class _OnBeforeZeroGrad(_Module):
    def on_before_zero_grad(self, optimizer):
        pass


class _OptimizerZeroGrad(_Module):
    def optimizer_zero_grad(self, epoch, batch_idx, optimizer):
        optimizer.zero_grad(set_to_none=True)


class _OptimizerStep(_Module):
    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)


class _OnTrainBatchStart(_Module):
    def on_train_batch_start(self, batch, batch_idx):
        return None


class _TrainingEpochEnd(_Module):  # the 1.x hook: every batch's outputs kept for it
    def training_epoch_end(self, outputs):
        assert len(outputs) == BATCHES


class _Backward(_Module):
    def backward(self, loss, *args, **kwargs):
        loss.backward()


class _OnAfterBackward(_Module):
    def on_after_backward(self):
        pass


class _TransferBatch(_Module):
    def transfer_batch_to_device(self, batch, device, dataloader_idx):
        return super().transfer_batch_to_device(batch, device, dataloader_idx)


class _ConfigureGradientClipping(_Module):
    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)


class _OptimizerIdx(_Module):  # the 1.x signature, the index required: 0 is passed
    def training_step(self, batch: Any, batch_idx: int, optimizer_idx: int) -> Any:
        assert optimizer_idx == 0
        return super().training_step(batch, batch_idx)


class _EveryHook(_OnBeforeZeroGrad, _OptimizerStep, _OnTrainBatchStart, _Backward, _ConfigureGradientClipping):
    pass


class _ReadsOutputs(fulmen.Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        assert outputs == {} or outputs["loss"].ndim == 0  # {}: training_step skipped the batch


class _OnBeforeBackward(fulmen.Callback):
    def on_before_backward(self, trainer, pl_module, loss):
        pass


class _OnBeforeOptimizerStep(fulmen.Callback):
    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        pass


class _StrategyPreBackward(SingleDeviceStrategy):
    def pre_backward(self, closure_loss):
        pass


class _StrategyPostBackward(SingleDeviceStrategy):
    def post_backward(self, closure_loss):
        pass


class _StrategyPostTrainingStep(SingleDeviceStrategy):
    def post_training_step(self):
        pass


class _StrategyEveryHook(_StrategyPreBackward, _StrategyPostTrainingStep):
    pass


class _StrategyBatchStart(SingleDeviceStrategy):
    def on_train_batch_start(self, batch, batch_idx):
        pass


class _StrategyTrainingStep(SingleDeviceStrategy):
    def training_step(self, *args, **kwargs):
        return super().training_step(*args, **kwargs)


class _PrecisionPreBackward(Precision):
    def pre_backward(self, tensor, module):
        return super().pre_backward(tensor, module)


class _PrecisionOptimizerStep(Precision):
    def optimizer_step(self, optimizer, model, closure, **kwargs):
        return super().optimizer_step(optimizer, model, closure, **kwargs)


@dataclass
class _Case:
    slow: set[str]  # the switches the case expects off their fast state
    module: type[_Module] = _Module
    optimizer: str = "sgd"
    returns: str = "tensor"
    callbacks: tuple[type[fulmen.Callback], ...] = ()
    strategy: type[SingleDeviceStrategy] | None = None
    precision: type[Precision] | None = None
    flags: dict[str, Any] = field(default_factory=dict)  # the Trainer's

    @property
    def accumulate(self) -> int:
        return int(self.flags.get("accumulate_grad_batches", 1))

    @property
    def clip(self) -> tuple[str, float] | None:
        value = self.flags.get("gradient_clip_val")
        return None if value is None else (self.flags.get("gradient_clip_algorithm", "norm"), value)


_PLAIN = {"plain_steps"}
CASES = {
    # all fast: the straight-through step (a dict or None goes on along the general path from the output on)
    "straight through": _Case(set()),
    "straight through, dict": _Case(set(), returns="dict"),
    "straight through, None every third": _Case(set(), returns="none every third"),
    "straight through, adamw": _Case(set(), optimizer="adamw"),
    "straight through, adamw, dict": _Case(set(), optimizer="adamw", returns="dict"),
    # one switch off at a time, by what turns it off in real code
    "on_before_zero_grad": _Case({"inline_zero_grad"} | _PLAIN, _OnBeforeZeroGrad),
    "optimizer_zero_grad": _Case({"inline_zero_grad"} | _PLAIN, _OptimizerZeroGrad),
    "optimizer_step calling super": _Case({"inline_step"} | _PLAIN, _OptimizerStep),
    "on_train_batch_end reads outputs": _Case(_READS_OUTPUTS, callbacks=(_ReadsOutputs,)),
    "on_train_batch_start": _Case(_READS_OUTPUTS, _OnTrainBatchStart),
    "training_epoch_end (1.x)": _Case({"collect_outputs", "outputs_unread"} | _PLAIN, _TrainingEpochEnd),
    "training_step takes optimizer_idx (1.x)": _Case({"pass_optimizer_idx"} | _PLAIN, _OptimizerIdx),
    "on_before_backward": _Case({"inline_backward"} | _PLAIN, callbacks=(_OnBeforeBackward,)),
    "backward": _Case({"inline_backward"} | _PLAIN, _Backward),
    "on_after_backward": _Case({"inline_backward"} | _PLAIN, _OnAfterBackward),
    "precision's pre_backward": _Case({"inline_backward"} | _PLAIN, precision=_PrecisionPreBackward),
    "transfer_batch_to_device": _Case({"default_transfer"}, _TransferBatch),
    "strategy's pre_backward": _Case({"strategy_pre_backward"} | _PLAIN, strategy=_StrategyPreBackward),
    "strategy's post_backward": _Case({"strategy_post_backward"} | _PLAIN, strategy=_StrategyPostBackward),
    "strategy's post_training_step": _Case({"post_step"} | _PLAIN, strategy=_StrategyPostTrainingStep),
    "strategy's on_train_batch_start": _Case({"strategy_batch_start"}, strategy=_StrategyBatchStart),
    "strategy's training_step": _Case(_PLAIN, strategy=_StrategyTrainingStep),
    "precision's optimizer_step": _Case({"own_precision_step"} | _PLAIN, precision=_PrecisionOptimizerStep),
    "on_before_optimizer_step": _Case({"nothing_after_closure"} | _PLAIN, callbacks=(_OnBeforeOptimizerStep,)),
    "configure_gradient_clipping": _Case({"nothing_after_closure"} | _PLAIN, _ConfigureGradientClipping),
    "clip norm": _Case({"nothing_after_closure"} | _PLAIN, flags={"gradient_clip_val": 0.5}),
    "clip value": _Case(
        {"nothing_after_closure"} | _PLAIN, flags={"gradient_clip_val": 0.05, "gradient_clip_algorithm": "value"}
    ),
    "accumulate 2": _Case(_PLAIN, flags={"accumulate_grad_batches": 2}),
    "accumulate 3 (the last window short)": _Case(_PLAIN, flags={"accumulate_grad_batches": 3}),
    "64-true": _Case({"keeps_inputs", "plain_forward"} | _PLAIN, flags={"precision": "64-true"}),
    "bf16-mixed": _Case({"plain_forward", "plain_backward"} | _PLAIN, flags={"precision": "bf16-mixed"}),
    "sgd outside torch.optim": _Case({"closure_first"} | _PLAIN, optimizer="sgd outside torch"),
    "lbfgs": _Case({"closure_first"} | _PLAIN, optimizer="lbfgs"),
    # several at once
    "lbfgs, clip norm": _Case(
        {"closure_first", "nothing_after_closure"} | _PLAIN, optimizer="lbfgs", flags={"gradient_clip_val": 0.5}
    ),
    "adamw, accumulate 3, clip norm, None every third": _Case(
        {"nothing_after_closure"} | _PLAIN, optimizer="adamw", returns="none every third",
        flags={"accumulate_grad_batches": 3, "gradient_clip_val": 0.5},
    ),
    "bf16-mixed, accumulate 2, clip value, dict": _Case(
        {"plain_forward", "plain_backward", "nothing_after_closure"} | _PLAIN, returns="dict",
        flags={"precision": "bf16-mixed", "accumulate_grad_batches": 2, "gradient_clip_val": 0.05,
               "gradient_clip_algorithm": "value"},
    ),
    "optimizer_step, outputs read, accumulate 2, None every third": _Case(
        {"inline_step"} | _READS_OUTPUTS, _OptimizerStep, returns="none every third",
        callbacks=(_ReadsOutputs,), flags={"accumulate_grad_batches": 2},
    ),
    "every hook, sgd outside torch, accumulate 3, clip norm, dict": _Case(
        {"inline_zero_grad", "inline_step", "inline_backward", "nothing_after_closure", "closure_first",
         "post_step", "strategy_pre_backward"} | _READS_OUTPUTS,
        _EveryHook, optimizer="sgd outside torch", returns="dict", callbacks=(_ReadsOutputs, _OnBeforeBackward),
        strategy=_StrategyEveryHook,
        flags={"accumulate_grad_batches": 3, "gradient_clip_val": 0.5},
    ),
}  # fmt: skip


# -- the runs -------------------------------------------------------------------------------------------------
def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


class _Batches:
    """Prepared batches (an iterable: a list would be a collection of loaders to the Trainer)."""

    def __init__(self, dtype: torch.dtype = torch.float32) -> None:
        g = torch.Generator().manual_seed(0)
        self.batches = [(torch.randn(4, 6, generator=g).to(dtype), torch.randint(0, 3, (4,), generator=g))
                        for _ in range(BATCHES)]  # fmt: skip

    def __len__(self) -> int:
        return BATCHES

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return iter(self.batches)


class _LoggedLosses(Logger):
    """Keeps every logged ``loss`` (the logger changes no step path: only the metrics hub reads loggers)."""

    name, version = "losses", 0

    def __init__(self) -> None:
        self.losses: list[float] = []

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if "loss" in metrics:
            self.losses.append(metrics["loss"])

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass


def _fit(case: _Case) -> tuple[_Module, fulmen.Trainer, list[float], dict[str, int]]:
    module = case.module(case.optimizer, case.returns)
    logger = _LoggedLosses()
    trainer = fulmen.Trainer(
        accelerator="cpu", max_epochs=1, logger=logger, log_every_n_steps=1, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, callbacks=[cb() for cb in case.callbacks],
        strategy=case.strategy() if case.strategy is not None else "auto",
        plugins=[case.precision()] if case.precision is not None else None, **case.flags,
    )  # fmt: skip
    # which path the batches took (the public entry points: patching them changes no plan)
    with (
        mock.patch.object(AutomaticOptimization, "run", autospec=True, side_effect=AutomaticOptimization.run) as run,
        mock.patch.object(
            AutomaticOptimization, "run_plain", autospec=True, side_effect=AutomaticOptimization.run_plain
        ) as run_plain,
    ):
        trainer.fit(module, _Batches())
    return module, trainer, logger.losses, {"run": run.call_count, "run_plain": run_plain.call_count}


def _reference(case: _Case) -> tuple[nn.Module, int, list[float]]:
    precision = case.flags.get("precision")
    dtype = torch.float64 if precision == "64-true" else torch.float32
    net = _net().to(dtype)
    optimizer = OPTIMIZERS[case.optimizer](net.parameters())
    batches = _Batches(dtype)
    if case.optimizer == "lbfgs":
        steps, logged = reference_fit_with_closure(net, optimizer, batches, case.clip)
        return net, steps, logged
    autocast = contextlib.nullcontext
    if precision == "bf16-mixed":  # the autocast fulmen's MixedPrecision enters around training_step

        def autocast() -> Any:
            return torch.autocast("cpu", dtype=torch.bfloat16)

    steps, logged = reference_fit(net, optimizer, batches, case.returns, case.accumulate, case.clip, autocast)
    return net, steps, logged


@pytest.mark.parametrize("name", list(CASES))
def test_fulmen_trains_exactly_as_the_reference(name):
    case = CASES[name]
    module, trainer, logged, ran = _fit(case)
    net, steps, expected_logged = _reference(case)
    switches = _switches(trainer)
    assert {key for key, fast in FAST.items() if switches[key] != fast} == case.slow
    # the batches took the path the switches say: straight through, or the general one
    straight = "plain_steps" not in case.slow
    assert ran == ({"run": 0, "run_plain": BATCHES} if straight else {"run": BATCHES, "run_plain": 0})
    for (key, value), expected in zip(module.net.state_dict().items(), net.state_dict().values(), strict=True):
        assert value.dtype == expected.dtype, key
        assert torch.equal(value, expected), key
    assert trainer.global_step == steps
    assert logged == expected_logged


def test_every_switch_is_exercised():
    """Each switch the code plans a step with is known here, and some case turns it off: a fast path added
    later fails this test until a case runs its general twin against the reference."""
    trainer = fulmen.Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(_Module("sgd", "tensor"), _Batches())
    assert _switches(trainer).keys() == FAST.keys()
    assert {key for key, fast in _switches(trainer).items() if fast != FAST[key]} == set()  # the defaults: all fast
    turned_off = set().union(*(case.slow for case in CASES.values()))
    assert turned_off == FAST.keys(), f"no case turns off {sorted(FAST.keys() - turned_off)}"
