"""``fulmen.trainer.<module>`` for each module of ``lightning.pytorch.trainer``: the modules import and stand for
fulmen's own objects; ``fulmen.trainer.connectors`` keeps the names the Trainer imports from it."""

from __future__ import annotations

import importlib

import pytest

from tests.parity import oracle

_TRAINER_MODULES = [
    "call", "setup", "configuration_validator", "states", "connectors", "connectors.accelerator_connector",
    "connectors.callback_connector", "connectors.checkpoint_connector", "connectors.data_connector",
    "connectors.signal_connector", "connectors.logger_connector", "connectors.logger_connector.fx_validator",
    "connectors.logger_connector.logger_connector", "connectors.logger_connector.result",
]  # fmt: skip


@oracle.parity
@pytest.mark.parametrize("name", _TRAINER_MODULES)
def test_each_lightning_trainer_module_has_its_fulmen_counterpart(name):
    theirs = importlib.import_module(f"lightning.pytorch.trainer.{name}")
    ours = importlib.import_module(f"fulmen.trainer.{name}")
    assert ours.__doc__  # says which fulmen module does the job
    assert [n for n in getattr(theirs, "__all__", []) if not hasattr(ours, n)] == []
    exported = getattr(ours, "__all__", [])
    assert all(getattr(ours, n).__module__.startswith("fulmen.") for n in exported)


def test_the_modules_re_export_fulmen_objects_not_copies():
    from fulmen import accelerators, precision
    from fulmen.runtime import data, hooks, metrics, results
    from fulmen.strategies import factory
    from fulmen.trainer import (
        call,
        checkpointing,
        configuration_validator,
        connectors,
        flags,
        runner,
        setup,
        signals,
    )
    from fulmen.trainer.connectors import (
        accelerator_connector,
        callback_connector,
        checkpoint_connector,
        data_connector,
        logger_connector,
        signal_connector,
    )
    from fulmen.trainer.connectors.logger_connector import fx_validator, result
    from fulmen.utilities import model_helpers

    assert call.HookDispatcher is hooks.HookDispatcher and call.StageRunner is runner.StageRunner
    assert configuration_validator.is_overridden is model_helpers.is_overridden
    assert setup.parse_flags is flags.parse_flags
    assert accelerator_connector.select_accelerator is accelerators.select_accelerator
    assert accelerator_connector.select_strategy is factory.select_strategy
    assert accelerator_connector.select_precision is precision.select_precision
    assert checkpoint_connector.dump_checkpoint is checkpointing.dump_checkpoint
    assert data_connector.DataSource is data.DataSource
    assert signal_connector.SignalConnector is signals.SignalConnector
    assert logger_connector.MetricsHub is metrics.MetricsHub
    assert result.ResultCollection is results.ResultCollection is fx_validator.ResultCollection
    # what the Trainer imports from the package stays importable from it
    assert connectors.build_callbacks is callback_connector.build_callbacks
    assert connectors.attach_model_callbacks is callback_connector.attach_model_callbacks
    assert connectors.build_loggers is logger_connector.build_loggers
    assert connectors.prepare_model is setup.prepare_model


def test_seed_everything_is_reachable_from_the_trainer_package():
    import torch

    from fulmen.trainer import Trainer, seed_everything
    from fulmen.trainer.trainer import Trainer as TrainerClass
    from fulmen.utilities.seed import seed_everything as seed_function

    assert seed_everything is seed_function and Trainer is TrainerClass
    assert seed_everything(7, verbose=False) == 7
    first = torch.rand(3)
    seed_everything(7, verbose=False)
    assert torch.equal(torch.rand(3), first)


@oracle.parity
def test_trainer_states_are_lightnings():
    from lightning.pytorch.trainer import states as theirs

    from fulmen.trainer import states as ours

    for name in ("TrainerStatus", "TrainerFn", "RunningStage"):
        assert {m.name: m.value for m in getattr(ours, name)} == {m.name: m.value for m in getattr(theirs, name)}
    state = ours.TrainerState()
    assert (state.status, state.fn, state.stage) == (ours.TrainerStatus.INITIALIZING, None, None)
    assert ours.RunningStage.VALIDATING.dataloader_prefix == theirs.RunningStage.VALIDATING.dataloader_prefix


def test_prepare_model_refuses_what_is_not_a_lightning_module():
    import torch

    from fulmen.trainer.setup import prepare_model

    with pytest.raises(TypeError, match=r"trainer\.fit\(\) got `Linear`"):
        prepare_model(torch.nn.Linear(2, 2), False, "fit")


@oracle.parity
def test_signal_connector_helpers_that_test_suites_call_answer_as_lightnings():
    """Lightning's conftest.py (and libraries that copied it) saves every signal handler around each test."""
    import signal

    from lightning.pytorch.trainer.connectors.signal_connector import _SignalConnector as Theirs

    from fulmen.trainer.connectors.signal_connector import _SignalConnector

    assert _SignalConnector._valid_signals() == Theirs._valid_signals()
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
        assert _SignalConnector._has_already_handler(signum) == Theirs._has_already_handler(signum)
