"""GradClipAlgorithmType and LightningEnum behave as Lightning's (the Trainer shows the enum member); the
configure_optimizers TypedDicts and the DDP protocol have Lightning's keys and members."""

from __future__ import annotations

import warnings

import pytest
import torch

import fulmen
from fulmen.utilities import GradClipAlgorithmType, LightningEnum
from fulmen.utilities import types as fulmen_types
from tests.parity import oracle


@oracle.parity
def test_grad_clip_algorithm_type_is_lightnings():
    oracle.lightning()
    from lightning.pytorch.utilities import GradClipAlgorithmType as Theirs

    assert [(m.name, m.value) for m in GradClipAlgorithmType] == [(m.name, m.value) for m in Theirs]
    assert GradClipAlgorithmType.supported_types() == Theirs.supported_types()
    for value in ("norm", "value", "NORM", "other"):
        assert GradClipAlgorithmType.supported_type(value) == Theirs.supported_type(value)
    assert GradClipAlgorithmType.NORM == "NORM" == Theirs.NORM
    assert GradClipAlgorithmType("value") is GradClipAlgorithmType.VALUE
    assert GradClipAlgorithmType.from_str("norm") is GradClipAlgorithmType.NORM
    assert {GradClipAlgorithmType.NORM, "norm"} == {"norm"}  # hashes as its value


@oracle.parity
def test_the_trainer_shows_the_enum_member():
    lightning = oracle.lightning()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = lightning.Trainer(gradient_clip_val=1.0, gradient_clip_algorithm="VALUE", logger=False)
    ours = fulmen.Trainer(gradient_clip_val=1.0, gradient_clip_algorithm="VALUE", logger=False)
    assert repr(ours.gradient_clip_algorithm) == repr(theirs.gradient_clip_algorithm).replace("lightning", "fulmen")
    assert ours.gradient_clip_algorithm is GradClipAlgorithmType.VALUE and ours.gradient_clip_algorithm == "value"


@oracle.parity
@pytest.mark.parametrize(("value", "source"), [("First", "key"), ("first value", "key"), ("FIRST VALUE", "value"),
                                               ("first", "value"), ("first", "any"), ("First Value", "any"),
                                               ("second", "any"), ("nothing", "any")])  # fmt: skip
def test_lightning_enum_from_str_sources(value, source):
    oracle.lightning()
    from lightning.pytorch.utilities.enums import LightningEnum as Theirs

    class Ours(LightningEnum):
        FIRST = "first value"
        SECOND = "Second"

    class Their(Theirs):
        FIRST = "first value"
        SECOND = "Second"

    try:
        expected = Their.from_str(value, source).name
    except ValueError:
        expected = None
    if expected is None:
        with pytest.raises(ValueError, match=f"'{value}' is not a Ours {source}"):
            Ours.from_str(value, source)
        with pytest.warns(UserWarning, match="Invalid string"):
            assert Ours.try_from_str(value, source) is None
    else:
        assert Ours.from_str(value, source).name == expected
        assert Ours.try_from_str(value, source).name == expected


@oracle.parity
def test_optimizer_config_types_have_lightnings_keys():
    oracle.lightning()
    from lightning.pytorch.utilities import types as theirs

    for name in ("LRSchedulerConfigType", "OptimizerConfig", "OptimizerLRSchedulerConfig"):
        ours, their = getattr(fulmen_types, name), getattr(theirs, name)
        assert ours.__required_keys__ == their.__required_keys__, name
        assert ours.__optional_keys__ == their.__optional_keys__, name
    ddp = torch.nn.parallel.DistributedDataParallel
    assert issubclass(ddp, fulmen_types.DistributedDataParallel) and issubclass(ddp, theirs.DistributedDataParallel)
    assert not isinstance(torch.nn.Linear(1, 1), fulmen_types.DistributedDataParallel)
