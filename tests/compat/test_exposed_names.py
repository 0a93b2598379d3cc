"""Libraries import helpers from wherever Lightning's modules happen to import them (``from
pytorch_lightning.core.saving import get_filesystem``): each such name is fulmen's own object there, the very one
of its home module, and it works. Names from a layer above come through a ``lazy_aliases`` table, resolved on
first use; the names Lightning 2.x deprecated or removed do what Lightning's do (``fulmen._graveyard``)."""

from __future__ import annotations

import importlib
import warnings

import pytest
import torch

from tests.architecture.test_layers import TABLES
from tests.parity import oracle


def test_library_style_imports_are_fulmens_own_objects(tmp_path):
    from fulmen.cli import get_filesystem as from_cli
    from fulmen.core.module import rank_zero_deprecation
    from fulmen.core.optimizer import LRSchedulerConfig
    from fulmen.core.saving import get_filesystem
    from fulmen.strategies.fsdp import reset_seed
    from fulmen.utilities import cloud_io, rank_zero, seed, types
    from fulmen.utilities.imports import rank_zero_warn

    assert get_filesystem is from_cli is cloud_io.get_filesystem
    assert LRSchedulerConfig is types.LRSchedulerConfig
    assert rank_zero_warn is rank_zero.rank_zero_warn
    assert rank_zero_deprecation is rank_zero.rank_zero_deprecation
    assert reset_seed is seed.reset_seed

    fs = get_filesystem(tmp_path)  # they work
    fs.pipe(str(tmp_path / "a.txt"), b"fulmen")
    assert type(fs).__name__ == "LocalFileSystem" and (tmp_path / "a.txt").read_bytes() == b"fulmen"
    scheduler = torch.optim.lr_scheduler.StepLR(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1), 1)
    assert LRSchedulerConfig(scheduler).interval == "epoch"
    with pytest.warns(UserWarning, match="a library's warning"):
        rank_zero_warn("a library's warning")
    with pytest.warns(rank_zero.LightningDeprecationWarning, match="going away"):
        rank_zero_deprecation("going away")
    seed.seed_everything(7, verbose=False)
    first = torch.rand(3)
    torch.rand(5)
    reset_seed()  # the seed exported by seed_everything, applied again
    assert torch.equal(torch.rand(3), first)


def test_names_from_a_layer_above_resolve_to_the_same_object():
    from fulmen.callbacks import Callback, EarlyStopping, Timer
    from fulmen.core.module import Callback as from_core
    from fulmen.core.saving import CUDAAccelerator
    from fulmen.loops.utilities import Timer as from_loops
    from fulmen.strategies import DDPStrategy
    from fulmen.utilities.compile import DDPStrategy as from_utilities
    from fulmen.utilities.migration.migration import EarlyStopping as from_migration

    assert from_core is Callback and from_loops is Timer and from_migration is EarlyStopping
    assert from_utilities is DDPStrategy
    assert CUDAAccelerator is importlib.import_module("fulmen.accelerators").CUDAAccelerator
    with pytest.raises(AttributeError, match="fulmen.core.saving.*no_such_name"):
        importlib.import_module("fulmen.core.saving").no_such_name  # noqa: B018


@pytest.mark.parametrize("module", sorted(TABLES))
def test_every_alias_table_entry_is_its_home_object(module):
    mod = importlib.import_module(module)
    for name, path in TABLES[module][1].items():
        home, _, attribute = path.rpartition(".")
        assert getattr(mod, name) is getattr(importlib.import_module(home), attribute), f"{module}.{name}"


# -- what Lightning 2.x deprecated (a warning, then the current class) or removed (NotImplementedError) ---------
LEGACY = [
    ("plugins", "MixedPrecisionPlugin", ("bf16-mixed", "cpu"), "MixedPrecision"),
    ("plugins", "PrecisionPlugin", (), "Precision"),
    ("plugins", "HalfPrecisionPlugin", ("bf16-true",), "HalfPrecision"),
    ("plugins", "DoublePrecisionPlugin", (), "DoublePrecision"),
    ("plugins", "FSDPPrecisionPlugin", ("bf16-mixed",), "FSDPPrecision"),
    ("plugins", "FSDPMixedPrecisionPlugin", ("16-mixed", "cpu"), "FSDPPrecision"),
    ("plugins", "DeepSpeedPrecisionPlugin", ("bf16-mixed",), "DeepSpeedPrecision"),
    ("plugins", "TPUPrecisionPlugin", (), None),  # needs torch_xla: the warning, then the same error as Lightning's
    ("plugins", "XLABf16PrecisionPlugin", (), None),
    ("accelerators", "TPUAccelerator", (), None),
    ("plugins", "HPUPrecisionPlugin", (), None),
    ("plugins", "HPUCheckpointIO", (), None),
    ("strategies", "SingleHPUStrategy", (), None),
    ("strategies", "HPUParallelStrategy", (), None),
]


def _make(cls, args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            made, error = cls(*args), None
        except Exception as err:
            made, error = None, err
    deprecations = [w for w in caught if w.category.__name__ == "LightningDeprecationWarning"]
    return made, error, deprecations


@oracle.parity
@pytest.mark.parametrize(("package", "name", "args", "current"), LEGACY)
def test_deprecated_and_removed_names_behave_as_lightnings(package, name, args, current):
    oracle.lightning()
    theirs = getattr(importlib.import_module(f"lightning.pytorch.{package}"), name)
    ours = getattr(importlib.import_module(f"fulmen.{package}"), name)
    their_made, their_error, their_warnings = _make(theirs, args)
    our_made, our_error, our_warnings = _make(ours, args)
    assert len(our_warnings) == len(their_warnings)
    for warning in our_warnings:  # Lightning's shape, naming fulmen's class
        assert str(warning.message).startswith(f"The `{name}`") and "deprecated" in str(warning.message)
    if their_error is not None:
        builtin = next(c for c in type(their_error).__mro__ if c.__module__ == "builtins")  # what code catches
        assert isinstance(our_error, builtin), (their_error, our_error)
        if isinstance(their_error, NotImplementedError):
            assert f"`{name}` class has been removed" in str(our_error)
    else:
        assert our_error is None and type(our_made).__name__ == name
        assert [c.__name__ for c in type(our_made).__mro__[1:2]] == [current]
        assert [c.__name__ for c in type(their_made).__mro__[1:2]] == [current]


def test_one_legacy_class_everywhere_lightning_puts_it():
    import fulmen.plugins as plugins
    from fulmen.plugins.precision import amp, fsdp, precision

    assert plugins.MixedPrecisionPlugin is plugins.precision.MixedPrecisionPlugin is amp.MixedPrecisionPlugin
    assert plugins.FSDPMixedPrecisionPlugin is fsdp.FSDPMixedPrecisionPlugin
    assert plugins.PrecisionPlugin is precision.PrecisionPlugin
    assert plugins.HPUCheckpointIO is plugins.io.HPUCheckpointIO
    assert issubclass(plugins.MixedPrecisionPlugin, plugins.MixedPrecision)
    assert not isinstance(plugins.MixedPrecision("bf16-mixed", "cpu"), plugins.MixedPrecisionPlugin)
