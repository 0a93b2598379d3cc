"""``trainer/flags.py``: every flag parsed and validated once, into a frozen ``TrainerConfig``."""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import logging

import pytest
import torch

import fulmen
from fulmen.plugins import MixedPrecision
from fulmen.trainer.flags import TrainerConfig, parse_flags
from fulmen.utilities.exceptions import MisconfigurationException

DEFAULTS = {name: p.default for name, p in inspect.signature(fulmen.Trainer.__init__).parameters.items()
            if name != "self"}  # fmt: skip


def parse(**flags):
    return parse_flags({**DEFAULTS, **flags})


def test_every_trainer_argument_is_a_field_or_resolved_into_one():
    fields = {f.name for f in dataclasses.fields(TrainerConfig)}
    resolved_elsewhere = {"plugins"}  # -> precision_plugin
    assert set(DEFAULTS) - resolved_elsewhere <= fields
    # and each field is documented, in the group (a base of TrainerConfig) that declares it
    for field in fields:
        owner = next(cls for cls in TrainerConfig.__mro__ if field in inspect.get_annotations(cls))
        source = inspect.getsource(owner)
        assert f"    {field}:" in source and '"""' in source.split(f"    {field}:")[1].split("\n")[1], field


def test_the_config_is_frozen_and_keeps_the_arguments_as_given():
    config = parse(max_epochs=3, precision="bf16-mixed")
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.max_epochs = 4  # type: ignore[misc]
    assert config.arguments["max_epochs"] == 3 and config.arguments["precision"] == "bf16-mixed"
    assert fulmen.Trainer(max_epochs=3, logger=False).config.max_epochs == 3


def test_defaults():
    config = parse()
    assert config.max_epochs_defaulted
    assert (config.max_epochs, config.max_steps, config.num_sanity_val_steps, config.log_every_n_steps) == (1000, -1, 2, 50)
    assert (config.limit_train_batches, config.val_check_interval, config.check_val_every_n_epoch) == (1.0, 1.0, 1)
    assert config.precision == "32-true" and config.precision_plugin is None
    assert config.devices == [torch.device("cpu")] and config.accelerator.name == "cpu"
    assert config.enable_checkpointing and config.enable_progress_bar and config.enable_model_summary
    assert parse(max_steps=10).max_epochs == -1  # a step limit: no epoch limit


def test_fast_dev_run_and_overfit_batches_rewrite_the_loop_flags():
    config = parse(fast_dev_run=3)
    assert (config.max_steps, config.max_epochs, config.num_sanity_val_steps, config.limit_val_batches) == (3, 1, 0, 3)
    assert config.fast_dev_run == 3
    config = parse(max_epochs=1, overfit_batches=4)  # Lightning 2.x: the same share of the validation data
    assert (config.limit_train_batches, config.limit_val_batches) == (4, 4)


def test_one_x_spellings():
    config = parse(max_epochs=1, accumulate_grad_batches={0: 2, 3: 1}, auto_scale_batch_size=True,
                   stochastic_weight_avg=True)  # fmt: skip
    assert config.accumulate_grad_batches == 1 and config.accumulation_schedule == {0: 2, 3: 1}
    assert config.auto_scale_batch_size == "power" and config.stochastic_weight_avg
    with pytest.warns(UserWarning, match="1.x spelling"):
        assert parse(max_epochs=1, precision=16).precision == "16-mixed"
    assert parse(max_epochs=1, max_time={"hours": 2}).max_time == datetime.timedelta(hours=2)
    assert parse(max_epochs=1, max_time="00:01:00:00").max_time == datetime.timedelta(hours=1)


def test_a_precision_plugin_sets_the_precision():
    plugin = MixedPrecision("bf16-mixed", "cpu")
    config = parse(max_epochs=1, plugins=[plugin])
    assert config.precision_plugin is plugin and config.precision == "bf16-mixed"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"max_epochs": -2}, r"`max_epochs` must be a non-negative integer or -1: got max_epochs=-2"),
        ({"max_steps": 1.5}, r"`max_steps` should be an integer: got max_steps=1.5; use an int >= -1"),
        ({"val_check_interval": -1}, r"val_check_interval=-1 must be >= 1"),
        ({"accumulate_grad_batches": -1}, r"`accumulate_grad_batches` must be an int >= 0: got accumulate_grad_batches=-1"),
        ({"limit_val_batches": 1.5}, r"limit_val_batches=1.5 is a fraction outside"),
        ({"gradient_clip_algorithm": "nope"}, r"`gradient_clip_algorithm` nope is invalid \(gradient_clip_algorithm='nope'\). Use 'norm' or 'value'"),
        ({"gradient_clip_val": -1}, r"`gradient_clip_val` should be an int or a float >= 0, got gradient_clip_val=-1"),
        ({"num_nodes": 0}, r"`num_nodes` must be an int >= 1: got num_nodes=0"),
        ({"deterministic": "sometimes"}, r"deterministic='sometimes' must be True, False, 'warn' or None"),
        ({"matmul_precision": "fast"}, r"matmul_precision='fast' is not supported"),
        ({"compile": "yes"}, r"compile='yes' must be True, False or a dict"),
        ({"inference_mode": 1}, r"inference_mode=1 must be True or False"),
        ({"barebones": True, "enable_checkpointing": True}, r"barebones=True.*enable_checkpointing=True"),
        ({"callbacks": [object()]}, r"every callback must subclass"),
        ({"max_time": "soon"}, r"max_time='soon' is not understood"),
        ({"precision": "8-true"}, r"precision='8-true' is not supported"),
        ({"plugins": [object()]}, r"is not a plugin fulmen knows"),
    ],
)
def test_bad_flags_are_refused_with_the_argument_and_the_value(flags, message):
    with pytest.raises(MisconfigurationException, match=message):
        parse(**{"max_epochs": 1, **flags})


def test_barebones_turns_the_extras_off():
    config = parse(max_epochs=1, barebones=True)
    assert not (config.enable_checkpointing or config.enable_progress_bar or config.enable_model_summary)
    assert config.logger is False


def test_the_accumulation_setter_changes_where_the_next_fit_starts():
    trainer = fulmen.Trainer(max_epochs=1, logger=False)
    trainer.accumulate_grad_batches = 4
    assert trainer.config.accumulate_grad_batches == 4 and trainer.accumulate_grad_batches == 4


def test_the_flags_read_back_from_the_trainer_are_read_only():
    trainer = fulmen.Trainer(max_epochs=3, limit_val_batches=0.5, logger=False)
    assert (trainer.max_epochs, trainer.limit_val_batches, trainer.log_every_n_steps) == (3, 0.5, 50)
    with pytest.raises(AttributeError, match="read-only"):
        trainer.limit_val_batches = 1.0  # type: ignore[misc]
    with pytest.raises(AttributeError):  # change it through trainer.fit_loop.max_epochs
        trainer.max_epochs = 4  # type: ignore[misc]
    assert trainer.max_epochs == 3 and trainer.limit_val_batches == 0.5


def test_max_epochs_reads_none_until_a_fit_applies_the_default():
    from fulmen.demos.boring_classes import BoringModel

    quiet = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)
    class StopAtOnce(fulmen.Callback):
        def on_train_batch_end(self, trainer, *args):
            trainer.should_stop = True

    trainer = fulmen.Trainer(limit_train_batches=1, limit_val_batches=0, callbacks=[StopAtOnce()], **quiet)
    assert trainer.max_epochs is None
    with pytest.warns(UserWarning, match="`max_epochs` was not set"):
        trainer.fit(BoringModel())
    assert trainer.max_epochs == 1000  # what the fit ran with
    assert fulmen.Trainer(max_steps=3, **quiet).max_epochs is None  # max_steps limits the run
    assert fulmen.Trainer(fast_dev_run=True, **quiet).max_epochs == 1


@pytest.mark.parametrize("name", ["limit_train_batches", "limit_val_batches", "limit_test_batches",
                                  "limit_predict_batches", "overfit_batches"])  # fmt: skip
def test_a_limit_of_one_says_whether_it_means_one_batch_or_all(caplog, name):
    with caplog.at_level(logging.INFO):
        fulmen.Trainer(**{name: 1})
    assert f"`Trainer({name}=1)` was configured so 1 batch" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO):
        fulmen.Trainer(**{name: 1.0})
    assert f"`Trainer({name}=1.0)` was configured so 100% of the batches" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO):
        fulmen.Trainer(**{name: 3})
        fulmen.Trainer()
    assert "was configured so" not in caplog.text


def test_no_epoch_limit_warns_when_fit_starts_not_before():
    import warnings as w

    from fulmen.demos.boring_classes import BoringModel
    from fulmen.utilities.warnings import PossibleUserWarning

    quiet = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    with w.catch_warnings():
        w.simplefilter("error", PossibleUserWarning)
        trainer = fulmen.Trainer(limit_train_batches=1, **quiet)  # a Trainer for test() alone must not warn
        fulmen.Trainer(fast_dev_run=True, **quiet)
        fulmen.Trainer(max_steps=3, **quiet).fit(BoringModel())

    class StopAtOnce(BoringModel):
        def training_step(self, batch, batch_idx):
            self.trainer.should_stop = True
            return super().training_step(batch, batch_idx)

    with pytest.warns(PossibleUserWarning, match="`max_epochs` was not set. Setting it to 1000 epochs"):
        trainer.fit(StopAtOnce())
    assert trainer.max_epochs == 1000 and trainer.current_epoch == 1


@pytest.mark.parity
@pytest.mark.parametrize(
    "flags",
    [
        {"min_epochs": 2, "max_epochs": 1},  # max_epochs wins
        {"min_epochs": -1},  # no minimum
        {"min_steps": -3},
        {"num_sanity_val_steps": -2},  # no sanity check (-1 alone means all batches)
        {"overfit_batches": 1, "limit_train_batches": "all", "limit_val_batches": -4},  # replaced, so not read
        {"fast_dev_run": 1, "limit_test_batches": "all"},
    ],
)
def test_flags_lightning_takes_are_taken(tmp_path, flags):
    from tests.parity.recorded import boring_model, both

    runs = {}

    def program(pl):
        class Model(boring_model(pl)):
            def on_validation_start(self):
                runs.setdefault(pl.__name__, []).append((self.trainer.sanity_checking, self.trainer.global_step))

        trainer = pl.Trainer(**{"default_root_dir": tmp_path, "max_epochs": 1, "limit_train_batches": 2,
                                "limit_val_batches": 1, "logger": False, "enable_progress_bar": False,
                                "enable_model_summary": False, **flags})  # fmt: skip
        trainer.fit(Model())
        runs.setdefault(pl.__name__, []).append(("end", trainer.current_epoch, trainer.global_step))

    ours, theirs = both(program, r"^$")
    assert ours.error is None and theirs.error is None, (ours, theirs)
    assert runs["fulmen"] == runs["lightning.pytorch"]


def test_the_config_is_its_groups():
    """Each group of flags is a small frozen dataclass that one parse function fills; TrainerConfig derives from
    them all, so no field is declared twice and ``trainer.config.<flag>`` reads the group's field."""
    from fulmen.trainer import flag_groups, flag_parsing

    groups = [cls for cls in TrainerConfig.__mro__[1:] if dataclasses.is_dataclass(cls)]
    assert len(groups) == 11 and all(cls.__dataclass_params__.frozen for cls in groups)
    declared = [name for cls in groups for name in inspect.get_annotations(cls)]
    assert len(declared) == len(set(declared))
    own = set(inspect.get_annotations(TrainerConfig))
    assert {f.name for f in dataclasses.fields(TrainerConfig)} == set(declared) | own
    assert own == {"devices", "default_root_dir", "arguments"}
    arguments = dict(DEFAULTS)
    for name in dir(flag_parsing):
        function = getattr(flag_parsing, name)
        returns = getattr(function, "__annotations__", {}).get("return", "")
        if name.startswith("parse_") and returns.endswith("Flags"):
            extra = (0,) if "fast" in inspect.signature(function).parameters else ()
            assert type(function(arguments, *extra)) is getattr(flag_groups, returns), name
