"""``fulmen.loops.<module>`` for each module of ``lightning.pytorch.loops``: the modules import, stand for
fulmen's own loop objects, and their public names (the finite-loss check, the restart stages, the closure and
its results) behave as Lightning's do."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.parity import oracle

_LOOP_MODULES = ["fit_loop", "evaluation_loop", "training_epoch_loop", "prediction_loop", "loop", "progress",
                 "fetchers", "utilities", "optimization", "optimization.automatic", "optimization.closure",
                 "optimization.manual"]  # fmt: skip


@oracle.parity
@pytest.mark.parametrize("name", _LOOP_MODULES)
def test_each_lightning_loops_module_has_its_fulmen_counterpart(name):
    oracle.lightning()
    theirs = importlib.import_module(f"lightning.pytorch.loops.{name}")
    ours = importlib.import_module(f"fulmen.loops.{name}")
    assert ours.__doc__  # says which fulmen module does the job
    public = [n for n, obj in vars(theirs).items() if not n.startswith("_") and inspect.isclass(obj)
              and obj.__module__ == theirs.__name__]  # fmt: skip
    assert [n for n in public if not hasattr(ours, n)] == []
    for exported in getattr(ours, "__all__", []):
        assert getattr(ours, exported).__module__.startswith("fulmen.")


def test_the_modules_re_export_fulmen_objects_not_copies():
    from fulmen.loops import (
        evaluation_loop,
        fetchers,
        fit_loop,
        loop,
        prediction_loop,
        progress,
        resume,
        training_epoch_loop,
        utilities,
    )
    from fulmen.runtime import state

    assert fit_loop.FitLoop is loop.FitLoop
    assert prediction_loop.PredictionLoop is evaluation_loop.PredictionLoop is loop.PredictionLoop
    assert progress.FitProgress is state.FitProgress and progress.loops_state_dict is resume.loops_state_dict
    assert fetchers.prefetch_iterator.__module__ == "fulmen.loops.fetchers"
    assert utilities.no_grad_context is evaluation_loop.no_grad_context
    assert utilities.max_steps_reached is training_epoch_loop.max_steps_reached


def test_the_optimization_package_keeps_its_names():
    from fulmen.loops import optimization
    from fulmen.loops.optimization import automatic, closure, manual

    assert optimization.AutomaticOptimization is automatic.AutomaticOptimization
    assert optimization.ManualOptimization is manual.ManualOptimization
    assert optimization.Closure is automatic.Closure and optimization.ClosureResult is automatic.ClosureResult
    assert optimization.AbstractClosure is closure.AbstractClosure and optimization.ManualResult is manual.ManualResult
    assert issubclass(automatic.Closure, closure.AbstractClosure)
    assert issubclass(automatic.ClosureResult, closure.OutputResult)
    assert issubclass(manual.ManualResult, closure.OutputResult)


# -- check_finite_loss ---------------------------------------------------------------------------------------
_LOSSES = {
    "none": None, "finite": torch.tensor(1.5), "int": torch.tensor(3), "nan": torch.tensor(float("nan")),
    "inf_in_vector": torch.tensor([1.0, float("inf")]), "neg_inf_with_grad": torch.tensor(0.0, requires_grad=True).log(),
    "nan_with_grad": torch.tensor(-1.0, requires_grad=True).sqrt(),
}  # fmt: skip


def _outcome(fn, *args):
    try:
        fn(*args)
    except Exception as err:
        return type(err).__name__, str(err)
    return "ok", ""


@oracle.parity
@pytest.mark.parametrize("case", sorted(_LOSSES))
def test_check_finite_loss_raises_as_lightning_does(case):
    from lightning.pytorch.loops.utilities import check_finite_loss as lightning_check

    from fulmen.loops.utilities import check_finite_loss

    loss = _LOSSES[case]
    theirs, ours = _outcome(lightning_check, loss), _outcome(check_finite_loss, loss)
    assert ours[0] == theirs[0]
    # Lightning's sentence starts ours, so a filter written for it matches; ours then says what to do
    assert ours[1].startswith(theirs[1].rstrip("."))
    if ours[0] == "ValueError":
        assert "detect_anomaly" in ours[1]


# -- RestartStage --------------------------------------------------------------------------------------------
def _constants(cls):
    return {k: v for k, v in vars(cls).items() if not k.startswith("_")}


@oracle.parity
@pytest.mark.parametrize("name", ["fit_loop", "evaluation_loop", "training_epoch_loop"])
def test_restart_stages_are_lightnings(name):
    theirs = importlib.import_module(f"lightning.pytorch.loops.{name}").RestartStage
    ours = importlib.import_module(f"fulmen.loops.{name}").RestartStage
    assert _constants(ours) == _constants(theirs)
    assert ours.NONE == "none" and isinstance(ours.NONE, str)


# -- ClosureResult / ManualResult ----------------------------------------------------------------------------
def _step_outputs():
    loss = torch.tensor(2.0, requires_grad=True) * 3
    return {
        "tensor": loss, "dict": {"loss": loss, "acc": torch.tensor(0.5), "name": "x"}, "none": None,
        "dict_without_loss": {"acc": 1.0}, "dict_with_none_loss": {"loss": None}, "list": [loss], "float": 1.0,
    }  # fmt: skip


def _result_outcome(factory):
    try:
        result = factory()
    except Exception as err:
        return type(err).__name__
    return {k: (float(v), v.requires_grad) if isinstance(v, torch.Tensor) else v for k, v in result.asdict().items()}


@oracle.parity
@pytest.mark.parametrize("case", sorted(_step_outputs()))
@pytest.mark.parametrize("normalize", [1, 4])
def test_closure_result_reads_training_step_output_as_lightning(case, normalize):
    from lightning.pytorch.loops.optimization.automatic import ClosureResult as Theirs

    from fulmen.loops.optimization.automatic import ClosureResult as Ours

    output = _step_outputs()[case]
    theirs = _result_outcome(lambda: Theirs.from_training_step_output(output, normalize))
    ours = _result_outcome(lambda: Ours.from_training_step_output(output, normalize))
    assert ours == theirs


@oracle.parity
def test_closure_result_fields_are_lightnings():
    from lightning.pytorch.loops.optimization.automatic import ClosureResult as Theirs

    from fulmen.loops.optimization.automatic import ClosureResult as Ours

    def fields(cls):
        return [(f.name, f.init) for f in dataclasses.fields(cls)]

    assert fields(Ours) == fields(Theirs) == [("closure_loss", True), ("loss", False), ("extra", True)]
    loss = torch.tensor(4.0, requires_grad=True) * 2
    result = Ours(loss)
    assert result.closure_loss is loss and result.extra == {}
    assert not result.loss.requires_grad and float(result.loss) == 8.0
    assert Ours(None).loss is None and Ours(None).asdict() == {"loss": None}
    scaled = Ours.from_training_step_output(loss, 4)
    assert float(scaled.closure_loss.detach()) == 2.0 and scaled.closure_loss.requires_grad
    assert float(loss.detach()) == 8.0  # the user's loss is not divided in place


@oracle.parity
@pytest.mark.parametrize("case", sorted(_step_outputs()))
def test_manual_result_reads_training_step_output_as_lightning(case):
    from lightning.pytorch.loops.optimization.manual import ManualResult as Theirs

    from fulmen.loops.optimization.manual import ManualResult as Ours

    output = _step_outputs()[case]
    if case == "dict_with_none_loss":  # Lightning calls None.detach() here: an AttributeError, not a rule
        assert Ours.from_training_step_output(output).asdict() == {"loss": None}
        return
    theirs = _result_outcome(lambda: Theirs.from_training_step_output(output))
    ours = _result_outcome(lambda: Ours.from_training_step_output(output))
    assert ours == theirs
    if isinstance(output, dict):  # the user's dict is left as it was
        assert Ours.from_training_step_output(output).extra is not output


def test_output_result_base_asks_for_asdict():
    from fulmen.loops.optimization.closure import OutputResult

    with pytest.raises(NotImplementedError, match="asdict"):
        OutputResult().asdict()


# -- the closures ---------------------------------------------------------------------------------------------
@oracle.parity
@pytest.mark.parametrize("framework", ["lightning.pytorch", "fulmen"])
def test_abstract_closure_keeps_the_result_until_consumed(framework):
    closure_module = importlib.import_module(f"{framework}.loops.optimization.closure")
    exceptions = importlib.import_module(f"{framework}.utilities.exceptions")

    class Doubling(closure_module.AbstractClosure):
        def closure(self, x):
            return 2 * x

    closure = Doubling()
    with pytest.raises(exceptions.MisconfigurationException, match="closure"):
        closure.consume_result()
    assert closure(3) is closure
    assert closure.consume_result() == 6
    with pytest.raises(exceptions.MisconfigurationException):
        closure.consume_result()  # consumed: the closure holds nothing any more
    with pytest.raises(TypeError):
        closure_module.AbstractClosure()  # abstract


def _closure_run(framework, returns_none=False, grad_enabled=True):
    automatic = importlib.import_module(f"{framework}.loops.optimization.automatic")
    weight = torch.nn.Parameter(torch.tensor(3.0))
    calls = []

    def step_fn():
        calls.append("step")
        loss = None if returns_none else weight * 2
        return automatic.ClosureResult(loss)

    def backward_fn(loss):
        calls.append("backward")
        loss.backward()

    def zero_grad_fn():
        calls.append("zero_grad")
        weight.grad = None

    closure = automatic.Closure(step_fn, backward_fn, zero_grad_fn)
    automatic.Closure.warning_cache.clear()
    with torch.set_grad_enabled(grad_enabled), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        returned = closure()
    result = closure.consume_result()
    grad = None if weight.grad is None else float(weight.grad)
    return {
        "calls": calls, "returned": None if returned is None else (float(returned), returned.requires_grad),
        "result_is_last": returned is result.loss, "grad": grad,
        "warned_none": any("returned `None`" in str(w.message) for w in caught),
    }  # fmt: skip


@oracle.parity
@pytest.mark.parametrize("returns_none", [False, True])
@pytest.mark.parametrize("grad_enabled", [True, False])
def test_closure_runs_step_zero_grad_backward_as_lightning(returns_none, grad_enabled):
    theirs = _closure_run("lightning.pytorch", returns_none, grad_enabled)
    ours = _closure_run("fulmen", returns_none, grad_enabled)
    assert ours == theirs
    assert ours["calls"] == (["step", "zero_grad"] if returns_none else ["step", "zero_grad", "backward"])


def test_closure_without_backward_or_zero_grad_only_steps():
    from fulmen.loops.optimization.automatic import Closure, ClosureResult

    loss = torch.tensor(2.0, requires_grad=True) * 1
    closure = Closure(lambda: ClosureResult(loss))
    assert float(closure()) == 2.0 and loss.grad_fn is not None and closure.skip_step_without_loss


# -- the loop's closure inside a fit ---------------------------------------------------------------------------
class _NoGradStepSGD(torch.optim.SGD):
    """An optimizer from elsewhere whose step calls the closure under no_grad (no enable_grad of its own)."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                p.add_(p.grad, alpha=-group["lr"])
        return loss


def _fit_record(framework):
    pl = importlib.import_module(framework)
    automatic = importlib.import_module(f"{framework}.loops.optimization.automatic")
    seen = []

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.layer = torch.nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            return {"loss": self.layer(batch[0]).pow(2).mean(), "extra": torch.tensor(float(batch_idx))}

        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
            seen.append(isinstance(optimizer_closure, automatic.Closure))
            optimizer.step(closure=optimizer_closure)

        def on_train_batch_end(self, outputs, batch, batch_idx):
            seen.append(sorted(outputs))

        def configure_optimizers(self):
            return _NoGradStepSGD(self.parameters(), lr=0.1)

    data = DataLoader(TensorDataset(torch.arange(12.0).reshape(4, 3) / 10), batch_size=2)
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)  # fmt: skip
    model = Model()
    trainer.fit(model, data)
    return seen, trainer.global_step, [p.detach().clone() for p in model.parameters()]


@oracle.parity
def test_the_loops_closure_is_a_closure_and_runs_with_gradients_under_a_no_grad_step():
    theirs, ours = _fit_record("lightning.pytorch"), _fit_record("fulmen")
    assert ours[0] == theirs[0] == [True, ["extra", "loss"]] * 2
    assert ours[1] == theirs[1] == 2
    for mine, their in zip(ours[2], theirs[2]):
        torch.testing.assert_close(mine, their)


def test_the_loops_closure_hands_its_result_over_once():
    import fulmen

    consumed = []

    class Model(fulmen.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None):
            optimizer.step(closure=optimizer_closure)
            consumed.append(optimizer_closure.closure())  # runs it again: a ClosureResult, not consumed

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = DataLoader(TensorDataset(torch.randn(4, 3)), batch_size=2)
    trainer = fulmen.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False)  # fmt: skip
    trainer.fit(Model(), data)
    assert len(consumed) == 2 and all(type(r).__name__ == "ClosureResult" for r in consumed)
    assert all(r.loss is not None and not r.loss.requires_grad and r.closure_loss.requires_grad for r in consumed)


def _manual_outputs(framework):
    pl = importlib.import_module(framework)
    seen = []

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.layer = torch.nn.Linear(3, 1)

        def training_step(self, batch, batch_idx):
            opt = self.optimizers()
            out = self.layer(batch[0])
            loss = out.pow(2).mean()
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()
            return {"loss": loss, "out": out}

        def on_train_batch_end(self, outputs, batch, batch_idx):
            seen.append({k: v.requires_grad for k, v in outputs.items()})

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = DataLoader(TensorDataset(torch.randn(4, 3)), batch_size=2)
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)  # fmt: skip
    trainer.fit(Model(), data)
    return seen, trainer.global_step


@oracle.parity
def test_manual_optimization_outputs_are_lightnings():
    theirs, ours = _manual_outputs("lightning.pytorch"), _manual_outputs("fulmen")
    assert ours == theirs
    assert ours[0][0] == {"loss": False, "out": True}  # only the loss is detached


@oracle.parity
def test_lightnings_private_loop_names_are_fulmens_loops():
    """``from lightning.pytorch.loops import _EvaluationLoop`` (test suites patch and check against these)."""
    theirs = importlib.import_module("lightning.pytorch.loops")
    import fulmen.loops
    from fulmen.loops.evaluation_loop import EvaluationLoop, PredictionLoop
    from fulmen.loops.fit_loop import FitLoop
    from fulmen.loops.training_epoch_loop import TrainingEpochLoop

    ours = {"_EvaluationLoop": EvaluationLoop, "_FitLoop": FitLoop, "_PredictionLoop": PredictionLoop,
            "_TrainingEpochLoop": TrainingEpochLoop}  # fmt: skip
    for name, loop in ours.items():
        assert hasattr(theirs, name)
        assert getattr(fulmen.loops, name) is loop
    assert not hasattr(fulmen.loops, "_Loop")  # fulmen's loops share no base class to subclass


@oracle.parity
def test_a_fit_loop_built_with_lightnings_constructor_runs_the_trainers_fit():
    """``trainer.fit_loop = _FitLoop(trainer, min_epochs=..., max_epochs=...)``: the loop's limits are the fit's."""

    def program(pl: Any) -> tuple[Any, ...]:
        loops = importlib.import_module(f"{pl.__name__}.loops")
        boring = importlib.import_module(f"{pl.__name__}.demos.boring_classes")
        trainer = pl.Trainer(max_epochs=5, limit_train_batches=2, limit_val_batches=0, logger=False,
                             enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
        trainer.fit_loop = loops._FitLoop(trainer, min_epochs=1, max_epochs=2)
        trainer.fit(boring.BoringModel())
        return trainer.current_epoch, trainer.global_step, trainer.max_epochs, trainer.min_epochs

    assert program(importlib.import_module("fulmen")) == program(oracle.lightning()) == (2, 4, 2, 1)
