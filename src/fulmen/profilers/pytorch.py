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
from typing import Any

import torch

from fulmen.profilers.profiler import Profiler
from fulmen.utilities import cloud_io
from fulmen.utilities.exceptions import MisconfigurationException


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
        self._module_hooks: list[Any] = []
        self._nvtx: Any = None

    # -- the run ---------------------------------------------------------------------------------------
    def attach_module(self, module: Any) -> None:
        self._module = module

    def _begin(self) -> None:
        """Start torch's profiler at the stage's first action (so set-up before it is not in the trace)."""
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
            self._label_modules(self._module)

    def _label_modules(self, model: torch.nn.Module) -> None:
        for name, module in model.named_modules():
            if not name:
                continue
            label = f"[pl][module]{type(module).__module__}.{type(module).__qualname__}: {name}"
            state: dict[str, Any] = {}

            def pre(_module: Any, _inputs: Any, label: str = label, state: dict[str, Any] = state) -> None:
                state["range"] = torch.profiler.record_function(label)
                state["range"].__enter__()

            def post(_module: Any, _inputs: Any, _outputs: Any, state: dict[str, Any] = state) -> None:
                if "range" in state:
                    state.pop("range").__exit__(None, None, None)

            self._module_hooks.append(module.register_forward_pre_hook(pre))
            self._module_hooks.append(module.register_forward_hook(post))

    def start(self, action_name: str) -> None:
        if self.profiler is None and self._nvtx is None:
            self._begin()
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
            self.profiler is not None and "schedule" in self.profiler_kwargs
            and action_name.rpartition(".")[2] in self.STEP_FUNCTIONS
        ):  # fmt: skip
            self.profiler.step()

    def _end(self) -> None:
        for action in reversed(list(self._ranges)):
            self._ranges.pop(action).__exit__(None, None, None)
        for handle in self._module_hooks:
            handle.remove()
        self._module_hooks.clear()
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
