"""The learning-rate finder on the bundled digits demo and on small modules."""

from __future__ import annotations

import math

import pytest
import torch

import fulmen
from fulmen.callbacks import LearningRateFinder
from fulmen.tuner import Tuner
from fulmen.tuner.lr_finder import LRFinder
from fulmen.utilities.exceptions import MisconfigurationException
from tests.tuner.oom_model import OOMModel


def _trainer(**kwargs) -> fulmen.Trainer:
    return fulmen.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                          enable_checkpointing=False, **kwargs)  # fmt: skip


def test_the_demo_gets_a_plot_and_a_suggestion(tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    from fulmen.demos.digits import DigitsClassifier, DigitsDataModule

    torch.manual_seed(0)
    model, data = DigitsClassifier(), DigitsDataModule()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    finder = Tuner(_trainer()).lr_find(model, datamodule=data, min_lr=1e-5, max_lr=1.0, num_training=60)
    assert isinstance(finder, LRFinder) and 10 < len(finder.results["lr"]) <= 60
    lr = finder.suggestion()
    assert lr is not None and 1e-5 < lr < 1.0 and model.hparams.lr == lr  # written back where it lives
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # weights put back
    figure = finder.plot(suggest=True)
    figure.savefig(tmp_path / "lr.png")
    assert (tmp_path / "lr.png").stat().st_size > 1000
    # the learning rates are the exponential schedule from min_lr
    for step, value in enumerate(finder.results["lr"]):
        assert value == pytest.approx(1e-5 * (1.0 / 1e-5) ** (step / 59))


class Regression(OOMModel):
    def __init__(self, lr: float = 0.01):
        super().__init__(fits_up_to=10**6, batch_size=16)
        self.lr = lr

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


def test_divergence_stops_the_test_early_and_linear_mode():
    finder = Tuner(_trainer()).lr_find(
        Regression(), min_lr=1e-3, max_lr=1e4, num_training=80, update_attr=False
    )
    recorded = len(finder.results["loss"])
    assert recorded < 80  # the loss blew past 4x its best long before lr=1e4
    last = finder.results["loss"][-1]
    assert not math.isfinite(last) or last > 4 * min(finder.results["loss"])
    linear = Tuner(_trainer()).lr_find(Regression(), min_lr=0.001, max_lr=0.1, num_training=20, mode="linear",
                                       early_stop_threshold=None, update_attr=False)  # fmt: skip
    assert linear.results["lr"] == pytest.approx([0.001 + i * (0.099 / 19) for i in range(20)])


def test_callback_trains_with_the_suggestion():
    seen = []

    class Look(fulmen.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.append(trainer.optimizers[0].param_groups[0]["lr"])

    model = Regression(lr=123.0)
    finder = LearningRateFinder(num_training_steps=30, min_lr=1e-4, max_lr=1.0)
    _trainer(callbacks=[finder, Look()], limit_train_batches=2).fit(model)
    lr = finder.optimal_lr.suggestion()
    assert model.lr == lr and seen == [lr, lr]


def test_one_x_auto_lr_find_and_errors():
    model = Regression()
    result = _trainer(auto_lr_find=True).tune(model, lr_find_kwargs={"num_training": 20, "min_lr": 1e-4})
    assert isinstance(result["lr_find"], LRFinder) and model.lr == result["lr_find"].suggestion()
    with pytest.raises(AttributeError, match="should have one of these fields"):  # Lightning's class
        Tuner(_trainer()).lr_find(OOMModel())
    with pytest.raises(MisconfigurationException, match="mode='cosine'"):
        Tuner(_trainer()).lr_find(Regression(), mode="cosine")
    with pytest.raises(MisconfigurationException, match="rather than dataloaders="):
        Tuner(_trainer()).lr_find(Regression(), dataloaders=[])
    with pytest.raises(MisconfigurationException, match="min_lr"):
        Tuner(_trainer()).lr_find(Regression(), min_lr=0.1, max_lr=0.1)
    with pytest.warns(UserWarning, match="the sweep goes downward"):  # accepted, as in Lightning
        finder = Tuner(_trainer()).lr_find(Regression(), min_lr=1.0, max_lr=1e-3, num_training=5)
    assert all(1e-3 <= lr <= 1.0 for lr in finder.results["lr"]) and finder.results["lr"][0] == 1.0


def test_too_few_points_log_an_error_and_skipped_steps_record_nan(caplog):
    import logging

    class Skips(Regression):
        def training_step(self, batch, batch_idx):
            return None if batch_idx in (3, 5) else super().training_step(batch, batch_idx)

    with caplog.at_level(logging.ERROR):
        finder = Tuner(_trainer()).lr_find(Regression(), num_training=1, update_attr=True)
    assert finder.suggestion() is None and "Failed to compute suggestion for learning rate" in caplog.text
    finder = Tuner(_trainer()).lr_find(Skips(), num_training=20, early_stop_threshold=None)
    assert len(finder.results["loss"]) == 20
    assert [math.isnan(v) for v in finder.results["loss"]].count(True) == 2
    assert math.isfinite(finder.suggestion())


def test_the_suggestion_is_written_to_the_attribute_and_the_hparams():
    class Both(Regression):
        def __init__(self, lr: float = 0.01):
            super().__init__(lr)
            self.save_hyperparameters()  # lr lives in self.lr and in self.hparams.lr

    model = Both()
    finder = Tuner(_trainer()).lr_find(model, min_lr=1e-4, max_lr=0.5, num_training=20)
    lr = finder.suggestion()
    assert lr is not None and model.lr == lr == model.hparams.lr
