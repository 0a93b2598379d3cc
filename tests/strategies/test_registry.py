"""strategies.registry: StrategyRegistry, names Trainer(strategy=...) accepts."""

from __future__ import annotations

import pytest
import torch

import fulmen
from fulmen.strategies import DDPStrategy, SingleDeviceStrategy, StrategyRegistry
from fulmen.utilities.exceptions import MisconfigurationException
from tests.parity import oracle


class Configured(SingleDeviceStrategy):
    def __init__(self, param1: str, param2: int) -> None:
        super().__init__(device=torch.device("cpu"))
        self.param1, self.param2 = param1, param2


@pytest.fixture
def registry():
    """The registry, with whatever a test adds (or replaces) undone afterwards."""
    saved = dict(StrategyRegistry)
    builtin = set(StrategyRegistry._builtin)
    yield StrategyRegistry
    StrategyRegistry.clear()
    StrategyRegistry.update(saved)
    StrategyRegistry._builtin = builtin


@oracle.parity
def test_the_same_names_and_answers_as_lightnings_registry(registry):
    theirs = oracle.lightning("lightning.pytorch.strategies").StrategyRegistry
    assert sorted(registry.available_strategies()) == sorted(theirs.available_strategies())
    assert str(registry).startswith("Registered Strategies: ddp, ")
    for name in ("ddp_find_unused_parameters_true", "fsdp_cpu_offload", "deepspeed_stage_3_offload", "xla_debug"):
        ours, their_entry = registry[name], theirs[name]
        assert sorted(ours) == sorted(their_entry) and ours["strategy_name"] == name
        assert ours["strategy"].__name__ == their_entry["strategy"].__name__
        expected = {k: v for k, v in their_entry["init_params"].items() if k != "start_method"}
        assert {k: v for k, v in ours["init_params"].items() if k != "start_method"} == expected
    for registry_ in (registry, theirs):
        with pytest.raises(KeyError, match="'nope' not found in registry. Available names: ddp, "):
            registry_.get("nope")
        assert registry_.get("nope", default="fallback") == "fallback"
        with pytest.raises(ValueError, match="'ddp' is already"):
            registry_.register("ddp", DDPStrategy)
        with pytest.raises(TypeError, match="`name` must be a str"):
            registry_.register(3, DDPStrategy)  # type: ignore[arg-type]


def test_a_registered_name_is_a_strategy_flag(registry):
    registry.register(name="configured", strategy=Configured, description="Test Strategy", param1="abc", param2=7)
    assert registry["configured"] == {"strategy": Configured, "strategy_name": "configured",
                                      "init_params": {"param1": "abc", "param2": 7}, "description": "Test Strategy"}  # fmt: skip
    trainer = fulmen.Trainer(strategy="configured", logger=False)
    assert isinstance(trainer.strategy, Configured) and (trainer.strategy.param1, trainer.strategy.param2) == ("abc", 7)
    assert fulmen.Trainer(strategy="configured", logger=False).strategy is not trainer.strategy  # built per Trainer

    @registry.register("ddp_bucketed", description="DDP with larger buckets", bucket_cap_mb=100)
    class Bucketed(DDPStrategy):
        pass

    trainer = fulmen.Trainer(strategy="ddp_bucketed", accelerator="cpu", devices=2, logger=False)
    assert type(trainer.strategy) is Bucketed and trainer.strategy._ddp_kwargs["bucket_cap_mb"] == 100
    assert trainer.world_size == 2  # the Trainer's devices still plan the processes
    registry.remove("ddp_bucketed")
    with pytest.raises(MisconfigurationException, match="StrategyRegistry.register"):
        fulmen.Trainer(strategy="ddp_bucketed", accelerator="cpu", devices=2, logger=False)


def test_built_in_names_are_built_from_the_flags_unless_replaced(registry):
    # "ddp" on one device outside a launcher trains as one process: the factory's rule, not the entry's class
    assert type(fulmen.Trainer(strategy="ddp", logger=False).strategy) is SingleDeviceStrategy
    with pytest.raises(ModuleNotFoundError, match="deepspeed"):  # a built-in name the factory has no recipe for
        fulmen.Trainer(strategy="deepspeed_stage_3", logger=False)

    class Mine(DDPStrategy):
        pass

    registry.register("ddp", Mine, override=True)
    assert type(fulmen.Trainer(strategy="ddp", accelerator="cpu", devices=2, logger=False).strategy) is Mine
