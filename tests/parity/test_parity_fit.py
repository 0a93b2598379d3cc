"""fulmen against lightning.pytorch (the oracle): same module, same data, same flags, same results."""

from __future__ import annotations

import pytest
import torch

from tests.parity import oracle
from tests.parity.harness import run_scenario

oracle.lightning()
pytestmark = oracle.parity

SCENARIOS = {
    "plain": {"trainer": {"max_epochs": 2}},
    "adam_dict_output": {"trainer": {"max_epochs": 2}, "module": {"optimizer": "adam", "return_dict": True}},
    "accumulate_3_partial_window": {"n": 56, "trainer": {"max_epochs": 2, "accumulate_grad_batches": 3}},
    "clip_norm": {"trainer": {"max_epochs": 2, "gradient_clip_val": 0.05}},
    "clip_value": {
        "trainer": {"max_epochs": 2, "gradient_clip_val": 0.01, "gradient_clip_algorithm": "value"}
    },
    "max_steps_mid_epoch": {"trainer": {"max_steps": 7}},
    "val_check_fraction": {"n": 64, "trainer": {"max_epochs": 2, "val_check_interval": 0.25}},
    "val_check_int": {"n": 80, "trainer": {"max_epochs": 2, "val_check_interval": 3}},
    "val_check_int_across_epochs": {
        "trainer": {"max_epochs": 3, "val_check_interval": 7, "check_val_every_n_epoch": None}
    },
    "check_val_every_2": {"trainer": {"max_epochs": 4, "check_val_every_n_epoch": 2}},
    "limit_batches": {"trainer": {"max_epochs": 2, "limit_train_batches": 3, "limit_val_batches": 1}},
    "limit_fraction": {"trainer": {"max_epochs": 2, "limit_train_batches": 0.5, "limit_val_batches": 0.5}},
    "step_epoch_scheduler": {"trainer": {"max_epochs": 3}, "module": {"scheduler": "step_epoch"}},
    "step_interval_scheduler_freq2_accum2": {
        "trainer": {"max_epochs": 2, "accumulate_grad_batches": 2},
        "module": {"scheduler": "step_interval", "frequency": 2},
    },
    "plateau_scheduler": {"trainer": {"max_epochs": 4}, "module": {"scheduler": "plateau"}},
    "plateau_on_train_metric": {
        "trainer": {"max_epochs": 3},
        "val": False,
        "module": {"scheduler": "plateau", "monitor": "train_loss_epoch"},
    },
    "onecycle_estimated_steps": {
        "trainer": {"max_epochs": 2, "accumulate_grad_batches": 2},
        "module": {"scheduler": "onecycle"},
    },
    "early_stopping": {
        "trainer": {"max_epochs": 30},
        "early_stopping": {"monitor": "val_loss", "patience": 1, "min_delta": 0.01},
    },
    "early_stopping_min_epochs": {
        "trainer": {"max_epochs": 30, "min_epochs": 6},
        "early_stopping": {"monitor": "val_loss", "patience": 1, "min_delta": 0.5},
    },
    "early_stopping_max_mode_threshold": {
        "trainer": {"max_epochs": 30},
        "early_stopping": {"monitor": "val_loss", "mode": "max", "stopping_threshold": 0.0},
    },
    "return_none_skips": {"trainer": {"max_epochs": 1}, "module": {"return_none_every": 2}},
    "lbfgs_closure": {"trainer": {"max_epochs": 2}, "module": {"optimizer": "lbfgs"}},
    "fast_dev_run": {"trainer": {"fast_dev_run": 2}},
    "no_sanity_no_val": {"trainer": {"max_epochs": 2, "num_sanity_val_steps": 0}, "val": False},
    # same seed, same numbers: the sanity check runs (on a shuffled validation loader) and leaves the random
    # generators as it found them, so the training shuffles and dropout masks are Lightning's
    "seeded_shuffled_dropout_sanity": {"seed": 42, "shuffle": True, "trainer": {"max_epochs": 3},
                                       "module": {"dropout": 0.3}},
    "seeded_shuffled_dropout_workers": {"seed": 7, "shuffle": True, "workers": 2,
                                        "trainer": {"max_epochs": 2, "num_sanity_val_steps": 1},
                                        "module": {"dropout": 0.3}},
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_fit_matches_lightning(name):
    scenario = SCENARIOS[name]
    ours = run_scenario("fulmen", scenario)
    theirs = run_scenario("lightning", scenario)
    assert ours["global_step"] == theirs["global_step"]
    assert ours["current_epoch"] == theirs["current_epoch"]
    assert ours["val_at"] == theirs["val_at"]
    assert len(ours["lrs"]) == len(theirs["lrs"])
    for a, b in zip(ours["lrs"], theirs["lrs"]):
        assert a == pytest.approx(b, rel=1e-9)
    assert ours["weights"].keys() == theirs["weights"].keys()
    for key in ours["weights"]:
        torch.testing.assert_close(ours["weights"][key], theirs["weights"][key], rtol=0, atol=1e-6)
    assert ours["callback_metrics"].keys() == theirs["callback_metrics"].keys()
    for key, value in ours["callback_metrics"].items():
        assert value == pytest.approx(theirs["callback_metrics"][key], abs=1e-6), key
    assert len(ours["epoch_end_metrics"]) == len(theirs["epoch_end_metrics"])
    for a, b in zip(ours["epoch_end_metrics"], theirs["epoch_end_metrics"]):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], abs=1e-6), key
