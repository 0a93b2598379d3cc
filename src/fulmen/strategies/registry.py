"""``StrategyRegistry``: strategy names ``Trainer(strategy="...")`` accepts, and the names users add.

A team registers its configured strategy once (``StrategyRegistry.register("ddp_bucketed", DDPStrategy,
bucket_cap_mb=100)``) and every script then picks it by name, from code or from a CLI config. The registry is
a dict: name -> ``{"strategy": class, "strategy_name": name, "init_params": {...}, "description": str}``.

Built-in names are listed here too (``available_strategies()`` shows them all), but the strategy factory
builds those itself from the Trainer's flags (``"ddp"`` on one device trains as one process, ...); a name a
user registered, or a built-in name a user replaced with ``override=True``, is built from its entry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fulmen.strategies.ddp import DDPStrategy
from fulmen.strategies.ddp_spawn import DDPSpawnStrategy
from fulmen.strategies.deepspeed import DeepSpeedStrategy
from fulmen.strategies.fsdp import FSDPStrategy
from fulmen.strategies.single_device import SingleDeviceStrategy
from fulmen.strategies.single_xla import SingleDeviceXLAStrategy
from fulmen.strategies.xla import XLAStrategy
from fulmen.utilities.registry import _NameRegistry


class _StrategyRegistry(_NameRegistry):  # name -> entry, as Lightning's registry is a dict
    """Strategy names and how to build each (a class and the keyword arguments it is called with)."""

    _kind = "strategy"
    _entry_keys = ("strategy", "strategy_name", "init_params", "description")

    def register(
        self,
        name: str,
        strategy: Callable[..., Any] | None = None,
        description: str | None = None,
        override: bool = False,
        **init_params: Any,
    ) -> Callable[..., Any]:
        """Register ``strategy`` (a class or any callable returning a strategy) under ``name``, to be called with
        ``init_params``. Without ``strategy`` it returns a decorator for the class. A name already registered
        is refused unless ``override=True``."""
        if not isinstance(name, str):
            raise TypeError(f"StrategyRegistry.register(name={name!r}): `name` must be a str, found {type(name).__name__}.")
        if name in self and not override:
            raise ValueError(
                f"StrategyRegistry.register: {name!r} is already registered (as {self[name]['strategy'].__name__}). "
                "Pass override=True to replace it, or choose another name."
            )
        return self._adder(name, strategy, description if description is not None else "", init_params)

    def available_strategies(self) -> list[str]:
        return list(self)

    def __str__(self) -> str:
        return f"Registered Strategies: {', '.join(self)}"


def _register_builtins(registry: _StrategyRegistry) -> None:
    for launch, cls, start in (("ddp", DDPStrategy, None), ("ddp_spawn", DDPSpawnStrategy, "spawn"),
                               ("ddp_fork", DDPSpawnStrategy, "fork"), ("ddp_notebook", DDPSpawnStrategy, "fork")):  # fmt: skip
        started = {} if start is None else {"start_method": start}
        how = f"processes started with start_method={start!r}" if start else "processes started by fulmen or a launcher"
        registry._register_builtin(launch, cls, f"DDP, {how}", **started)
        for unused in (False, True):
            registry._register_builtin(f"{launch}_find_unused_parameters_{str(unused).lower()}", cls,
                                       f"DDP, {how}, find_unused_parameters={unused}",
                                       find_unused_parameters=unused, **started)  # fmt: skip
    stages: dict[str, dict[str, Any]] = {
        "deepspeed": {}, "deepspeed_stage_1": {"stage": 1}, "deepspeed_stage_2": {"stage": 2},
        "deepspeed_stage_2_offload": {"stage": 2, "offload_optimizer": True},
        "deepspeed_stage_3": {"stage": 3},
        "deepspeed_stage_3_offload": {"stage": 3, "offload_optimizer": True, "offload_parameters": True},
        "deepspeed_stage_3_offload_nvme": {"stage": 3, "offload_optimizer": True, "offload_parameters": True,
                                           "remote_device": "nvme", "offload_params_device": "nvme",
                                           "offload_optimizer_device": "nvme"},
    }  # fmt: skip
    for name, params in stages.items():
        registry._register_builtin(name, DeepSpeedStrategy, f"DeepSpeed ZeRO, {params or 'the default stage'}", **params)
    registry._register_builtin("fsdp", FSDPStrategy, "FSDP (fully_shard), full sharding")
    registry._register_builtin("fsdp_cpu_offload", FSDPStrategy, "FSDP with CPU offloading", cpu_offload=True)
    registry._register_builtin("single_device", SingleDeviceStrategy, "one process on one device")
    registry._register_builtin("single_xla", SingleDeviceXLAStrategy, "one XLA device")
    registry._register_builtin("xla_debug", XLAStrategy, "XLA with debugging", debug=True)
    registry._register_builtin("xla", XLAStrategy, "XLA (TPU) processes")
    registry._register_builtin("single_tpu", SingleDeviceXLAStrategy, "one TPU device")


StrategyRegistry = _StrategyRegistry()
_register_builtins(StrategyRegistry)

__all__ = ["StrategyRegistry"]
