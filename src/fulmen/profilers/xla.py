"""``XLAProfiler``: Cloud TPU's profiler server, which fulmen cannot serve (it does not train on XLA devices).

Without ``torch_xla`` it cannot be made, as in Lightning; with it, the first recording refuses with what to
use instead.
"""

from __future__ import annotations

from fulmen.plugins._unavailable import refuse, require_package
from fulmen.profilers.profiler import Profiler
from fulmen.utilities.imports import _XLA_AVAILABLE as _XLA_AVAILABLE

_INSTEAD = (
    "fulmen trains on CPUs and GPUs, not on XLA (TPU) devices: profile with Trainer(profiler='pytorch') "
    "(torch.profiler, with traces for TensorBoard or Perfetto), 'simple' or 'advanced'."
)


class XLAProfiler(Profiler):
    """``port``: where Lightning's XLA profiler server would listen."""

    STEP_FUNCTIONS = frozenset({"validation_step", "test_step", "predict_step"})
    RECORD_FUNCTIONS = frozenset({"training_step", "backward", "validation_step", "test_step", "predict_step"})

    def __init__(self, port: int = 9012) -> None:
        require_package("torch_xla", "torch_xla>=1.13", "XLAProfiler", _INSTEAD, available=_XLA_AVAILABLE)
        super().__init__(dirpath=None, filename=None)
        self.port = port

    def start(self, action_name: str) -> None:
        if action_name.rpartition(".")[2] in self.RECORD_FUNCTIONS:
            refuse("XLAProfiler (Cloud TPU's profiler server)", _INSTEAD)

    def stop(self, action_name: str) -> None:
        pass


__all__ = ["XLAProfiler"]
