"""Module paths Lightning keeps only for classes it deprecated or removed (``lightning.pytorch.accelerators.tpu``,
``lightning.pytorch.strategies.single_hpu`` ...), where old programs import those classes from.

Each path in :data:`PATHS` imports as a small module whose names are :mod:`fulmen._graveyard`'s (the deprecated
classes, which warn when made, and the removed ones, which raise): no file per path, and nothing loaded until a
program imports one. ``import fulmen`` installs the finder.

The same finder serves :data:`MOVED`: fulmen's own module paths from before a module got its present home, each a
small module whose names are the new module's, so a program written against the old path keeps running.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

# Lightning 2.x's module path -> the classes it held (all in fulmen._graveyard)
PATHS: dict[str, tuple[str, ...]] = {
    "fulmen.accelerators.tpu": ("TPUAccelerator",),
    "fulmen.strategies.single_tpu": ("SingleTPUStrategy",),
    "fulmen.plugins.precision.tpu": ("TPUPrecisionPlugin",),
    "fulmen.plugins.precision.tpu_bf16": ("TPUBf16PrecisionPlugin",),
    "fulmen.plugins.precision.xlabf16": ("XLABf16PrecisionPlugin",),
    "fulmen.strategies.hpu_parallel": ("HPUParallelStrategy",),
    "fulmen.strategies.single_hpu": ("SingleHPUStrategy",),
    "fulmen.plugins.io.hpu_plugin": ("HPUCheckpointIO",),
    "fulmen.plugins.precision.hpu": ("HPUPrecisionPlugin",),
}


# fulmen's earlier module path -> where that code lives now
MOVED: dict[str, str] = {
    "fulmen.utilities.checkpoint_io": "fulmen.checkpoint.files",
    "fulmen.utilities.distributed_checkpoint": "fulmen.checkpoint.sharded",
    "fulmen.loops.fit": "fulmen.loops.fit_loop",
    "fulmen.loops.training_epoch": "fulmen.loops.training_epoch_loop",
    "fulmen.loops.evaluation": "fulmen.loops.evaluation_loop",
    "fulmen.loops.fetcher": "fulmen.loops.fetchers",
    "fulmen.core.optimizers": "fulmen.core.configure_optimizers",
    "fulmen.trainer.config": "fulmen.trainer.flags",
    "fulmen.strategies.environment": "fulmen.utilities.cluster_layout",
}


class _MovedPathLoader(importlib.abc.Loader):
    def exec_module(self, module: ModuleType) -> None:
        home = MOVED[module.__name__]
        module.__doc__ = f"fulmen's earlier path of :mod:`{home}`, where this code lives now."

        def __getattr__(name: str) -> object:
            return getattr(importlib.import_module(home), name)

        module.__getattr__ = __getattr__  # type: ignore[method-assign]


class _RemovedPathLoader(importlib.abc.Loader):
    def exec_module(self, module: ModuleType) -> None:
        names = PATHS[module.__name__]
        module.__doc__ = f"Lightning's old module of {', '.join(names)}: see :mod:`fulmen._graveyard`."
        module.__all__ = list(names)  # type: ignore[attr-defined]

        def __getattr__(name: str) -> object:
            if name in names:
                return getattr(importlib.import_module("fulmen._graveyard"), name)
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

        module.__getattr__ = __getattr__  # type: ignore[method-assign]


class _RemovedPathFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname in MOVED:
            return importlib.util.spec_from_loader(fullname, _MovedPathLoader())
        if fullname not in PATHS:
            return None
        return importlib.util.spec_from_loader(fullname, _RemovedPathLoader())


def install() -> None:
    """Serve :data:`PATHS` and :data:`MOVED` (once per process)."""
    if not any(isinstance(finder, _RemovedPathFinder) for finder in sys.meta_path):
        sys.meta_path.append(_RemovedPathFinder())
