"""``PyTorchProfiler``: ``torch.profiler`` over the run, each hook and loop stage a labelled range.

Every action the Trainer records becomes a ``record_function`` range, and with ``record_module_names`` every
submodule's forward is one too (``[pl][module]torch.nn.modules.linear.Linear: layer.0``), so the operator
table and the trace show which hook and which layer each kernel belongs to. The trace is exported for
Chrome / Perfetto (``<dirpath>/<stage>-<filename>.pt.trace.json``); pass
``on_trace_ready=torch.profiler.tensorboard_trace_handler(dir)`` (and a ``schedule``) for TensorBoard's
profiler plugin. With a ``schedule``, the profiler steps once per training / validation / test / predict step.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.profiler import ProfilerAction, kineto_available, record_function

from fulmen.accelerators.cuda import is_cuda_available as is_cuda_available
from fulmen.profilers.profiler import Profiler
from fulmen.utilities import cloud_io
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.rank_zero import WarningCache as WarningCache
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn

warning_cache = WarningCache()  # Lightning's module-level cache, for code that warns through it

_KINETO_AVAILABLE = kineto_available()  # whether torch was built with its CPU/CUDA activity tracer


class RegisterRecordFunction:
    """``with RegisterRecordFunction(model): model(x)``: every submodule's forward is a labelled range
    (``[pl][module]torch.nn.modules.linear.Linear: layer.0``) in what ``torch.profiler`` records, so the
    operator table and the trace tell which layer each kernel belongs to. ``PyTorchProfiler`` does this itself
    (``record_module_names=True``); the hooks are removed when the block ends."""

    def __init__(self, model: nn.Module) -> None:
        self._model = model
        self._open: dict[str, list[record_function]] = {}  # a stack per layer: a layer may run inside itself
        self._handles: dict[str, list[Any]] = {}

    def _enter(self, label: str) -> None:
        recording = record_function("[pl][module]" + label)
        recording.__enter__()
        self._open.setdefault(label, []).append(recording)

    def _exit(self, label: str) -> None:
        stack = self._open.get(label)
        if stack:
            stack.pop().__exit__(None, None, None)

    def __enter__(self) -> None:
        for name, module in self._model.named_modules():
            if not name:
                continue  # the model itself: its forward is the step, already a range of its own
            label = f"{type(module).__module__}.{type(module).__name__}: {name}"
            pre = module.register_forward_pre_hook(lambda _m, _args, label=label: self._enter(label))
            post = module.register_forward_hook(lambda _m, _args, _out, label=label: self._exit(label))
            self._handles[name] = [pre, post]

    def __exit__(self, type: Any, value: Any, traceback: Any) -> None:
        for handles in self._handles.values():
            for handle in handles:
                handle.remove()
        self._handles = {}
        for stack in self._open.values():  # a forward that raised left its range open
            while stack:
                stack.pop().__exit__(None, None, None)


class ScheduleWrapper:
    """A ``torch.profiler`` schedule counted per stage: training, validation, test and prediction steps each
    go through ``schedule`` from step 0, and once a stage's window ended (``RECORD_AND_SAVE``) nothing more of
    that stage is recorded. Validation batches run before the first training step (the sanity check) do not
    count when the profiler started with the fit. The profiler tells it each step's action name (``pre_step``)
    before stepping."""

    _STAGES = ("training_step", "validation_step", "test_step", "predict_step")

    def __init__(self, schedule: Callable[[int], ProfilerAction]) -> None:
        if not torch.profiler.kineto_available():
            raise ModuleNotFoundError(
                "ScheduleWrapper needs torch built with Kineto (torch.profiler's scheduler); this torch has none."
            )
        self._schedule = schedule
        self.reset()

    def reset(self) -> None:
        """Forget the steps counted and the stages finished (a new run)."""
        self._steps = dict.fromkeys(self._STAGES, 0)
        self._finished = dict.fromkeys(self._STAGES, False)
        self._current_action: str | None = None
        self._prev_schedule_action: ProfilerAction | None = None
        self._start_action_name: str | None = None

    def setup(self, start_action_name: str) -> None:
        """The first action the profiler recorded (``...on_fit_start`` when it started with a fit)."""
        self._start_action_name = start_action_name

    def pre_step(self, current_action: str) -> None:
        """The step the profiler is about to count."""
        self._current_action = current_action

    def _stage(self) -> str | None:
        action = self._current_action
        assert action is not None, "pre_step(action_name) tells the step before the stage is asked"
        return next((stage for stage in self._STAGES if action.endswith(stage)), None)

    @property
    def is_training(self) -> bool:
        return self._stage() == "training_step"

    @property
    def is_validating(self) -> bool:
        return self._stage() == "validation_step"

    @property
    def is_testing(self) -> bool:
        return self._stage() == "test_step"

    @property
    def is_predicting(self) -> bool:
        return self._stage() == "predict_step"

    @property
    def num_step(self) -> int:
        """The steps counted so far of the current step's stage."""
        stage = self._stage()
        return self._steps[stage] if stage is not None else 0

    @property
    def has_finished(self) -> bool:
        """Whether the current step's stage already recorded its window."""
        stage = self._stage()
        return stage is not None and self._finished[stage]

    def _count(self, stage: str) -> None:
        start = self._start_action_name or ""
        if stage == "validation_step" and start.endswith("on_fit_start") and self._steps["training_step"] == 0:
            return  # the sanity check: the fit's validation steps count from the first training step on
        self._steps[stage] += 1

    def __call__(self, num_step: int) -> ProfilerAction:
        """What ``torch.profiler`` does next; ``num_step`` (torch's own count over all stages) is not used."""
        if self._current_action is None:
            return ProfilerAction.NONE
        stage = self._stage()
        if stage is not None and self._finished[stage]:
            return ProfilerAction.NONE
        if stage is not None:
            self._count(stage)
        action = self._schedule(self.num_step)  # an action of no stage: the schedule's first step
        if self._prev_schedule_action == ProfilerAction.RECORD and action == ProfilerAction.WARMUP:
            action = ProfilerAction.RECORD  # a stage change must not cut a recording window short
        if action == ProfilerAction.RECORD_AND_SAVE and stage is not None:
            self._finished[stage] = True
        self._prev_schedule_action = action
        return action


class PyTorchProfiler(Profiler):
    STEP_FUNCTIONS = frozenset({"training_step", "validation_step", "test_step", "predict_step"})
    AVAILABLE_SORT_KEYS = frozenset({
        "cpu_time", "cuda_time", "cpu_time_total", "cuda_time_total", "cpu_memory_usage", "cuda_memory_usage",
        "self_cpu_memory_usage", "self_cuda_memory_usage", "count",
    })  # fmt: skip

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        group_by_input_shapes: bool = False,
        emit_nvtx: bool = False,
        export_to_chrome: bool = True,
        row_limit: int = 20,
        sort_by_key: str | None = None,
        record_module_names: bool = True,
        table_kwargs: dict[str, Any] | None = None,
        **profiler_kwargs: Any,
    ) -> None:
        super().__init__(dirpath=dirpath, filename=filename)
        if sort_by_key is not None and sort_by_key not in self.AVAILABLE_SORT_KEYS:
            raise MisconfigurationException(
                f"PyTorchProfiler(sort_by_key={sort_by_key!r}): choose one of {sorted(self.AVAILABLE_SORT_KEYS)}."
            )
        table_kwargs = dict(table_kwargs or {})
        for key in ("sort_by", "row_limit"):
            if key in table_kwargs:
                raise KeyError(
                    f"PyTorchProfiler(table_kwargs={{{key!r}: ...}}): set it with the profiler's own argument "
                    f"({'sort_by_key' if key == 'sort_by' else 'row_limit'}=...)."
                )
        schedule = profiler_kwargs.get("schedule")
        self._schedule: ScheduleWrapper | None = None
        if schedule is not None:
            if not callable(schedule):
                raise MisconfigurationException(f"PyTorchProfiler(schedule={schedule!r}): the schedule must be callable.")
            action = schedule(0)
            if not isinstance(action, ProfilerAction):
                raise MisconfigurationException(
                    f"PyTorchProfiler(schedule=...): the schedule must return a torch.profiler.ProfilerAction, "
                    f"got {action!r} for step 0. Build it with torch.profiler.schedule(wait=..., warmup=..., active=...)."
                )
            self._schedule = ScheduleWrapper(schedule)
            profiler_kwargs["schedule"] = self._schedule
        self.group_by_input_shapes = group_by_input_shapes or bool(profiler_kwargs.get("record_shapes"))
        if group_by_input_shapes:
            profiler_kwargs.setdefault("record_shapes", True)
        self.emit_nvtx = emit_nvtx
        self.export_to_chrome = export_to_chrome
        self.row_limit = row_limit
        self.sort_by_key = sort_by_key or ("cuda_time_total" if torch.cuda.is_available() else "cpu_time_total")
        self.record_module_names = record_module_names
        self.table_kwargs = table_kwargs
        self.profiler_kwargs = profiler_kwargs
        self.profiler: Any = None  # the torch.profiler.profile of the running stage
        self.function_events: Any = None  # its events once the stage ended (what the report is made from)
        self._ranges: dict[str, Any] = {}
        self._module: torch.nn.Module | None = None
        self._register: RegisterRecordFunction | None = None
        self._nvtx: Any = None

    # -- the run ---------------------------------------------------------------------------------------
    def attach_module(self, module: Any) -> None:
        self._module = module

    def _begin(self, action_name: str) -> None:
        """Start torch's profiler at the stage's first action (so set-up before it is not in the trace)."""
        if self._schedule is not None:
            self._schedule.setup(action_name)
        if self.emit_nvtx:
            self._nvtx = torch.autograd.profiler.emit_nvtx(record_shapes=self.group_by_input_shapes)
            self._nvtx.__enter__()
        else:
            kwargs = dict(self.profiler_kwargs)
            if "activities" not in kwargs:
                activities = [torch.profiler.ProfilerActivity.CPU]
                if torch.cuda.is_available():
                    activities.append(torch.profiler.ProfilerActivity.CUDA)
                kwargs["activities"] = activities
            self.profiler = torch.profiler.profile(**kwargs)
            self.profiler.__enter__()
        if self.record_module_names and self._module is not None:
            self._register = RegisterRecordFunction(self._module)
            self._register.__enter__()

    def start(self, action_name: str) -> None:
        if self.profiler is None and self._nvtx is None:
            self._begin(action_name)
        if action_name in self._ranges:
            raise ValueError(f"Attempted to start {action_name} which has already started.")
        self._ranges[action_name] = torch.profiler.record_function(action_name)
        self._ranges[action_name].__enter__()

    def stop(self, action_name: str) -> None:
        recorded = self._ranges.pop(action_name, None)
        if recorded is None:
            raise ValueError(f"Attempting to stop recording an action ({action_name}) which was never started.")
        recorded.__exit__(None, None, None)
        if (
            self.profiler is not None and self._schedule is not None
            and action_name.rpartition(".")[2] in self.STEP_FUNCTIONS
        ):  # fmt: skip
            self._schedule.pre_step(action_name)
            self.profiler.step_num = self._schedule.num_step  # trace files numbered by the stage's own steps
            self.profiler.step()

    def _end(self) -> None:
        for action in reversed(list(self._ranges)):
            self._ranges.pop(action).__exit__(None, None, None)
        if self._register is not None:
            self._register.__exit__(None, None, None)
            self._register = None
        if self._schedule is not None:
            self._schedule.reset()
        if self._nvtx is not None:
            self._nvtx.__exit__(None, None, None)
            self._nvtx = None
        if self.profiler is None:
            return
        profiler, self.profiler = self.profiler, None
        profiler.__exit__(None, None, None)
        if "schedule" not in self.profiler_kwargs:
            self.function_events = profiler.events()
        if self.export_to_chrome and "on_trace_ready" not in self.profiler_kwargs and self.dirpath:
            path = cloud_io.join(self.dirpath, self._prepare_filename(extension=".pt.trace.json"))
            if cloud_io.is_remote(path):
                import tempfile

                with tempfile.TemporaryDirectory() as tmp:
                    local = os.path.join(tmp, "trace.json")
                    profiler.export_chrome_trace(local)
                    cloud_io.copy(local, path)
            else:
                cloud_io.makedirs(self.dirpath)
                profiler.export_chrome_trace(path)

    def summary(self) -> str:
        self._end()
        events = self.function_events
        if events is None:
            return ""
        table = events.key_averages(group_by_input_shapes=self.group_by_input_shapes).table(
            sort_by=self.sort_by_key, row_limit=self.row_limit, **self.table_kwargs
        )
        return self._stats_to_str({"records": table})

    def teardown(self, stage: str | None) -> None:
        self._end()
        super().teardown(stage)
