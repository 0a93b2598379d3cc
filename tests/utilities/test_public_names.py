"""Module paths Lightning users import: fulmen.utilities.types, LightningEnum, core.saving's YAML helpers,
loggers.logger.DummyLogger; each behaves as Lightning's does."""

from __future__ import annotations

import pytest

from tests.parity import oracle


def test_hparams_yaml_helpers_round_trip_and_errors(tmp_path):
    from fulmen.core.saving import load_hparams_from_yaml, save_hparams_to_yaml

    path = tmp_path / "hparams.yaml"
    save_hparams_to_yaml(path, {"lr": 0.1, "layers": [1, 2], "nested": {"a": "b"}})
    assert load_hparams_from_yaml(path) == {"lr": 0.1, "layers": [1, 2], "nested": {"a": "b"}}
    with pytest.warns(UserWarning, match="Missing Tags"):
        assert load_hparams_from_yaml(tmp_path / "none.yaml") == {}
    with pytest.raises(RuntimeError, match="Missing folder"):
        save_hparams_to_yaml(tmp_path / "no_such_dir" / "h.yaml", {"a": 1})


@oracle.parity
def test_lightning_reads_what_fulmen_writes(tmp_path):
    oracle.lightning()
    from lightning.pytorch.core.saving import load_hparams_from_yaml as lightning_load

    from fulmen.core.saving import save_hparams_to_yaml

    save_hparams_to_yaml(tmp_path / "h.yaml", {"lr": 0.1, "name": "x"})
    assert lightning_load(tmp_path / "h.yaml") == {"lr": 0.1, "name": "x"}


def test_lightning_enum_and_dummy_logger():
    from fulmen.loggers.logger import DummyLogger
    from fulmen.utilities import LightningEnum

    class Stage(LightningEnum):
        TRAIN = "train"

    assert Stage.from_str("TRAIN") is Stage.TRAIN and Stage.TRAIN == "Train" and hash(Stage.TRAIN) == hash("train")
    with pytest.raises(ValueError, match="'eval' is not a Stage"):
        Stage.from_str("eval")
    logger = DummyLogger()
    assert logger.name == "" and logger.version == ""
    logger.experiment.anything(1, two=2)  # accepts any call
    logger.log_metrics({"a": 1.0}, step=0)


def test_types_module():
    from fulmen.utilities.types import EVAL_DATALOADERS, STEP_OUTPUT, TRAIN_DATALOADERS, OptimizerLRScheduler

    assert STEP_OUTPUT and EVAL_DATALOADERS and TRAIN_DATALOADERS and OptimizerLRScheduler


def test_save_hparams_to_yaml_writes_enums_by_name(tmp_path):
    """A `str, Enum` member (which YAML's safe dumper refuses as it is) is written by its name, as Lightning."""
    import enum

    from fulmen.core.saving import load_hparams_from_yaml, save_hparams_to_yaml

    class Options(str, enum.Enum):
        first = "first value"

    save_hparams_to_yaml(tmp_path / "h.yaml", {"switch": Options.first, "plain": enum.Enum("E", "a b").b})
    assert load_hparams_from_yaml(tmp_path / "h.yaml") == {"switch": "first", "plain": "b"}
