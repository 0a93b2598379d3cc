"""The fit loop's warnings and schedule checks, compared with Lightning's on the same program."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from tests.parity import oracle
from tests.parity.recorded import boring_model, both, raised_as_lightning

LOG_INTERVAL = r"smaller than the logging interval"


def _trainer(pl, tmp_path, **flags):
    kwargs = dict(default_root_dir=tmp_path, max_epochs=1, limit_train_batches=3, limit_val_batches=1,
                  enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    return pl.Trainer(**{**kwargs, **flags})


@oracle.parity
@pytest.mark.parametrize(
    "flags",
    [
        {},  # the default logger and log_every_n_steps=50: said at every (re)load of the training data
        {"max_epochs": 2, "reload_dataloaders_every_n_epochs": 1},
        {"log_every_n_steps": 3},  # not smaller: nothing
        {"logger": False},  # nothing is logged anyway
        {"fast_dev_run": 2},
        {"limit_train_batches": 0},  # no training
    ],
)
def test_the_logging_interval_warning_is_lightnings(tmp_path, flags):
    def program(pl):
        _trainer(pl, tmp_path, **flags).fit(boring_model(pl)())

    ours, theirs = both(program, LOG_INTERVAL)
    assert ours == theirs and ours.error is None
    expected = {(): 1, ("max_epochs", "reload_dataloaders_every_n_epochs"): 2}.get(tuple(flags), 0)
    assert len(ours.warnings) == expected
    if expected:
        assert ours.warnings[0] == ("PossibleUserWarning", (
            "The number of training batches (3) is smaller than the logging interval Trainer(log_every_n_steps=50). "
            "Set a lower value for log_every_n_steps if you want to see logs for the training epoch."
        ))  # fmt: skip


@oracle.parity
@pytest.mark.parametrize("frozen", ["all", "layer", "none"])
def test_modules_in_eval_mode_at_the_start_of_training_warn_as_in_lightning(tmp_path, frozen):
    def program(pl):
        model = boring_model(pl)()
        if frozen == "all":
            model.eval()
        elif frozen == "layer":
            model.layer.eval()
        _trainer(pl, tmp_path, logger=False).fit(model)

    ours, theirs = both(program, r"in eval mode")
    assert ours == theirs and ours.error is None
    count = {"all": 2, "layer": 1, "none": 0}[frozen]
    assert ours.warnings == ([] if not count else [("PossibleUserWarning", (
        f"Found {count} module(s) in eval mode at the start of training. This may lead to unexpected behavior "
        "during training. If this is intentional, you can ignore this warning."
    ))])  # fmt: skip


class _Stream(IterableDataset):
    def __iter__(self):
        return iter(torch.randn(16, 32))


@oracle.parity
@pytest.mark.parametrize(
    ("flags", "iterable"),
    [
        ({"val_check_interval": 5, "limit_val_batches": 0, "limit_train_batches": 2}, False),  # validation off
        ({"val_check_interval": 5, "limit_train_batches": 2}, False),  # ValueError in both
        ({"val_check_interval": 0.5, "limit_train_batches": 4}, True),  # an int limit gives the stream a length
        ({"val_check_interval": 0.5, "limit_train_batches": 1.0}, True),  # a fraction of no length: refused
        ({"val_check_interval": 0.0, "limit_train_batches": 2}, False),  # validates after every batch
        ({"limit_train_batches": 0.5}, True),  # a fraction of a stream: refused
    ],
)
def test_the_validation_schedule_is_checked_as_in_lightning(tmp_path, flags, iterable):
    seen = {}

    def program(pl):
        class Model(boring_model(pl)):
            def on_validation_start(self):
                seen.setdefault(pl.__name__, []).append(self.trainer.global_step)

        data = DataLoader(_Stream(), batch_size=2) if iterable else DataLoader(torch.randn(8, 32), batch_size=2)
        _trainer(pl, tmp_path, logger=False, num_sanity_val_steps=0, **flags).fit(
            Model(), data, DataLoader(torch.randn(4, 32), batch_size=2)
        )

    ours, theirs = both(program, r"val_check_interval")
    assert raised_as_lightning(ours, theirs), (ours, theirs)
    assert seen.get("fulmen") == seen.get("lightning.pytorch")  # validated after the same steps, if at all
