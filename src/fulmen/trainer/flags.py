"""The Trainer's flags: the frozen :class:`TrainerConfig`, whose fields are those of the groups of flags
(``flag_groups.py``, one small frozen dataclass each), and :func:`parse_flags`, which validates every flag once,
before anything runs, and assembles the config from the groups that ``flag_parsing.py`` parses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, overload

import torch

from fulmen.trainer import flag_groups as groups
from fulmen.trainer.flag_parsing import (
    DEFAULT_MAX_EPOCHS,
    parse_accumulation,
    parse_batch_limits,
    parse_compat,
    parse_default_root_dir,
    parse_devices,
    parse_fast_dev_run,
    parse_hardware,
    parse_output_objects,
    parse_output_switches,
    parse_processes,
    parse_run_length,
    parse_run_settings,
    parse_step_flags,
    parse_validation_schedule,
)


@dataclass(frozen=True)
class TrainerConfig(  # the groups in reverse: a dataclass lists its bases' fields from the last base to the first
    groups.CompatFlags, groups.OutputObjectFlags, groups.OutputSwitchFlags, groups.RunSettingFlags,
    groups.StepFlags, groups.AccumulationFlags, groups.BatchLimitFlags, groups.ValidationScheduleFlags,
    groups.RunLengthFlags, groups.ProcessFlags, groups.HardwareFlags,
):  # fmt: skip
    """The validated flags of a Trainer (``trainer.config``): the fields of every group of flags
    (:mod:`~fulmen.trainer.flag_groups`), and the devices, the root directory and the arguments as given.
    Replace a field with ``dataclasses.replace``."""

    devices: list[torch.device]
    """This node's devices, one per process (parsed from ``devices=`` against the machine)."""
    default_root_dir: str | None
    """Where logs and checkpoints go (None: the working directory at the time)."""
    arguments: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The arguments as given to ``Trainer(...)``: the tuner builds its trial trainers from them."""

    @property
    def max_epochs_defaulted(self) -> bool:
        """No limit on training was given (max_epochs, max_steps, max_time): fit stops after 1000 epochs."""
        return self.arguments.get("max_epochs") is None and self.max_epochs == DEFAULT_MAX_EPOCHS

    def given_max_epochs(self, default_applied: bool) -> int | None:
        """``trainer.max_epochs`` as Lightning shows it: None when not given, until a fit applies the default
        (1000, when no other limit was given either; with max_steps or max_time it stays None)."""
        if self.arguments.get("max_epochs") is None:
            if self.max_epochs == -1:  # max_steps / max_time limit the run
                return None
            if self.max_epochs_defaulted and not default_applied:
                return None
        return self.max_epochs  # given, fast_dev_run's 1, or the default a fit applied

    @property
    def active_profiler(self) -> Any:
        """The profiler that records the runs; None when it records nothing (no hook is wrapped then)."""
        from fulmen.profilers.base import PassThroughProfiler

        return None if isinstance(self.profiler, PassThroughProfiler) else self.profiler


_T = TypeVar("_T")


class ConfigField(Generic[_T]):
    """A read-only Trainer attribute that is one field of its config (``trainer.max_epochs``), typed."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> ConfigField[_T]: ...
    @overload
    def __get__(self, obj: object, owner: type) -> _T: ...
    def __get__(self, obj: Any, owner: type) -> Any:
        return self if obj is None else getattr(obj.config, self.name)

    def __set__(self, obj: Any, value: Any) -> None:  # read-only, as a property without a setter
        raise AttributeError(
            f"Trainer.{self.name} is read-only: it is the flag the Trainer was made with (trainer.config.{self.name})."
        )



def parse_flags(arguments: dict[str, Any]) -> TrainerConfig:
    """Every ``Trainer(...)`` argument (by name, as given) -> a validated :class:`TrainerConfig`."""
    a = arguments
    # the groups in this order, each checking its flags in its own order: the first error a Trainer raises and
    # the order of the messages depend on it (tests compare both with Lightning); hence the switches of every
    # group are checked in parse_run_settings, and the devices are read after default_root_dir is checked
    accumulation = parse_accumulation(a)
    fast = parse_fast_dev_run(a)
    run_length = parse_run_length(a, fast)
    validation = parse_validation_schedule(a, fast)
    steps = parse_step_flags(a, fast)
    limits = parse_batch_limits(a, fast)
    switches = parse_output_switches(a)
    processes = parse_processes(a)
    settings = parse_run_settings(a)
    compat = parse_compat(a)
    hardware = parse_hardware(a)
    root_dir = parse_default_root_dir(a)
    devices = parse_devices(a, hardware.accelerator)
    outputs = parse_output_objects(a)
    parsed = (processes, hardware, run_length, limits, validation, steps, accumulation, settings, switches, outputs,
              compat)  # fmt: skip
    return TrainerConfig(
        **{name: value for group in parsed for name, value in groups.values(group).items()},
        devices=devices, default_root_dir=root_dir, arguments=dict(a),
    )  # fmt: skip
