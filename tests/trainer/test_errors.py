"""Every invalid flag or hook return fails early, naming the argument and the value received."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from fulmen import LightningModule, Trainer
from fulmen.callbacks import EarlyStopping
from fulmen.demos.boring_classes import BoringModel, RandomDataset
from fulmen.utilities.exceptions import MisconfigurationException
from tests.parity import oracle
from tests.parity.oracle import parity

QUIET = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"accelerator": "quantum"}, r"accelerator='quantum'"),
        ({"accelerator": "tpu"}, r"torch_xla"),
        ({"precision": "8-bit"}, r"precision='8-bit'"),
        ({"precision": 12}, r"precision=12"),
        ({"devices": 0}, r"devices=0"),
        ({"devices": "x,y"}, r"devices='x,y'"),
        ({"gradient_clip_algorithm": "nope"}, r"gradient_clip_algorithm='nope'.*'norm' or 'value'"),
        ({"gradient_clip_val": -1.0}, r"gradient_clip_val=-1.0"),
        ({"val_check_interval": 1.5}, r"val_check_interval=1.5"),
        ({"val_check_interval": -1}, r"val_check_interval=-1"),
        ({"max_time": "12 hours"}, r"max_time='12 hours'.*DD:HH:MM:SS"),
        ({"max_time": {"fortnights": 1}}, r"fortnights"),
        ({"accumulate_grad_batches": -2}, r"accumulate_grad_batches=-2"),
        ({"limit_train_batches": 1.5}, r"limit_train_batches=1.5"),
        ({"max_steps": -5}, r"max_steps=-5"),
        ({"strategy": "magic"}, r"strategy='magic'"),
        ({"barebones": True, "enable_progress_bar": True}, r"barebones=True.*enable_progress_bar"),
    ],
)
def test_invalid_flags_fail_at_construction(kwargs, match):
    with pytest.raises(MisconfigurationException, match=match):
        Trainer(**kwargs)


@parity
@pytest.mark.parametrize(
    "kwargs",
    [
        {"precision": "fp7"}, {"precision": 8}, {"num_nodes": 0}, {"limit_val_batches": "x"},
        {"gradient_clip_val": "x"}, {"fast_dev_run": "x"}, {"callbacks": 3}, {"barebones": True, "logger": True},
        {"accelerator": "x"}, {"devices": "x"}, {"devices": -2}, {"strategy": "x"}, {"strategy": 3},
        {"max_steps": -2}, {"limit_train_batches": 1.5}, {"overfit_batches": -1}, {"gradient_clip_algorithm": "x"},
        {"fast_dev_run": -1}, {"devices": 0}, {"max_time": "x"},
    ],
)
def test_invalid_flags_raise_what_lightning_raises(kwargs):
    """User code that catches Lightning's exception class (ValueError, TypeError, MisconfigurationException)
    catches fulmen's; fulmen's errors are all MisconfigurationExceptions as well."""
    lightning = oracle.lightning()
    with pytest.raises(Exception) as theirs:
        lightning.Trainer(**kwargs)
    with pytest.raises(MisconfigurationException) as ours:
        Trainer(**kwargs)
    expected = theirs.type
    if expected.__name__ == "MisconfigurationException":
        expected = MisconfigurationException
    assert isinstance(ours.value, expected), (kwargs, theirs.type, type(ours.value))


def test_gpu_without_gpu_is_a_clear_error():
    if torch.cuda.is_available():
        pytest.skip("a GPU exists here")
    with pytest.raises(MisconfigurationException, match="accelerator='gpu'.*neither CUDA nor MPS"):
        Trainer(accelerator="gpu")


def test_val_check_interval_larger_than_epoch():
    trainer = Trainer(val_check_interval=100, max_epochs=1, **QUIET)
    with pytest.raises(ValueError, match=r"val_check_interval=100.*\(64\)"):
        trainer.fit(BoringModel())


class _Stream(IterableDataset):
    def __iter__(self):
        for _ in range(8):
            yield torch.randn(32)


def test_fractional_val_check_with_iterable_dataset():
    trainer = Trainer(val_check_interval=0.5, max_epochs=1, **QUIET)
    with pytest.raises(MisconfigurationException, match="IterableDataset"):
        trainer.fit(BoringModel(), DataLoader(_Stream(), batch_size=2))


def test_plateau_without_monitor():
    class M(BoringModel):
        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return [opt], [torch.optim.lr_scheduler.ReduceLROnPlateau(opt)]

    with pytest.raises(MisconfigurationException, match="ReduceLROnPlateau.*monitor"):
        Trainer(max_epochs=1, **QUIET).fit(M())


def test_plateau_monitoring_a_metric_never_logged():
    class M(BoringModel):
        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
            return {"optimizer": opt, "lr_scheduler": sched, "monitor": "nope"}

    with pytest.raises(MisconfigurationException, match="metric 'nope' which is not available"):
        Trainer(max_epochs=1, limit_train_batches=2, **QUIET).fit(M())


def test_early_stopping_on_a_metric_never_logged():
    trainer = Trainer(
        max_epochs=1, limit_train_batches=2, limit_val_batches=2, callbacks=[EarlyStopping("nope")], **QUIET
    )
    with pytest.raises(RuntimeError, match="monitor='nope'"):
        trainer.fit(BoringModel())


def test_missing_training_step():
    class M(LightningModule):
        def configure_optimizers(self):
            return None

    with pytest.raises(MisconfigurationException, match="training_step"):
        Trainer(**QUIET).fit(M(), DataLoader(RandomDataset(32, 4)))


def test_missing_configure_optimizers():
    class M(LightningModule):
        def training_step(self, batch, batch_idx):
            return batch.sum()

    with pytest.raises(MisconfigurationException, match="configure_optimizers"):
        Trainer(**QUIET).fit(M(), DataLoader(RandomDataset(32, 4)))


def test_missing_train_dataloader():
    class M(BoringModel):
        train_dataloader = LightningModule.train_dataloader

    with pytest.raises(MisconfigurationException, match="No training data"):
        Trainer(**QUIET).fit(M())


def test_training_step_dict_without_loss():
    class M(BoringModel):
        def training_step(self, batch, batch_idx):
            return {"not_loss": self.step(batch)}

    with pytest.raises(MisconfigurationException, match="'loss' key"):
        Trainer(max_epochs=1, **QUIET).fit(M())


def test_training_step_bad_return_type():
    class M(BoringModel):
        def training_step(self, batch, batch_idx):
            return "oops"

    with pytest.raises(MisconfigurationException, match="returned a str"):
        Trainer(max_epochs=1, **QUIET).fit(M())


def test_log_non_scalar_tensor():
    class M(BoringModel):
        def training_step(self, batch, batch_idx):
            self.log("vec", torch.ones(3))
            return self.step(batch)

    with pytest.raises(MisconfigurationException, match=r"shape \(3,\)"):
        Trainer(max_epochs=1, **QUIET).fit(M())


def test_log_in_unsupported_hook():
    class M(BoringModel):
        def on_fit_start(self):
            self.log("x", 1.0)

    with pytest.raises(MisconfigurationException, match="on_fit_start"):
        Trainer(max_epochs=1, **QUIET).fit(M())


def test_several_optimizers_under_automatic_optimization():
    class M(BoringModel):
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1), torch.optim.Adam(self.parameters())

    with pytest.raises(MisconfigurationException, match="manual|optimizer_idx"):
        Trainer(max_epochs=1, **QUIET).fit(M())


@pytest.mark.parametrize(("kwargs", "match"), [({"model_registry": "org/model"}, "model registry")])
def test_flags_fulmen_does_not_implement_say_so(kwargs, match):
    with pytest.warns(UserWarning, match=match):
        Trainer(logger=False, max_epochs=1, **kwargs)


@pytest.mark.parametrize("fn", ["validate", "test", "predict"])
def test_evaluation_without_any_model_raises_lightnings_type_error(fn):
    with pytest.raises(TypeError, match=rf"`trainer.{fn}\(\)` requires a `LightningModule`") as info:
        getattr(Trainer(**QUIET), fn)()
    assert isinstance(info.value, MisconfigurationException)


def test_save_checkpoint_without_a_model_is_an_attribute_error(tmp_path):
    with pytest.raises(AttributeError, match="only possible if a model is attached"):
        Trainer(**QUIET).save_checkpoint(tmp_path / "x.ckpt")
    assert not (tmp_path / "x.ckpt").exists()


def test_predict_step_returning_none_warns_once():
    class Holes(BoringModel):
        def predict_step(self, batch, batch_idx, dataloader_idx=0):
            return None if batch_idx % 2 else super().predict_step(batch, batch_idx)

    trainer = Trainer(limit_predict_batches=4, **QUIET)
    with pytest.warns(UserWarning, match="predict returned None") as record:
        predictions = trainer.predict(Holes())
    assert sum("predict returned None" in str(w.message) for w in record) == 1
    assert [p is None for p in predictions] == [False, True, False, True]


def test_each_run_starts_with_no_metrics_and_predict_after_fit_uses_the_best_checkpoint(tmp_path):
    seen = {}

    class Logs(BoringModel):
        def test_step(self, batch, batch_idx):
            self.log("test_metric", 1.0)
            return super().test_step(batch, batch_idx)

        def on_predict_start(self):
            seen["callback_metrics"] = dict(self.trainer.callback_metrics)

    model = Logs()
    trainer = Trainer(default_root_dir=tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=1,
                      limit_test_batches=1, limit_predict_batches=1, logger=False, enable_progress_bar=False,
                      enable_model_summary=False)  # fmt: skip
    trainer.fit(model)
    trainer.test(model)
    assert "test_metric" in trainer.callback_metrics
    with pytest.warns(UserWarning, match="The best model of the previous `fit` call will be used"):
        trainer.predict()
    assert seen["callback_metrics"] == {}
    assert trainer.ckpt_path == trainer.checkpoint_callback.best_model_path


def test_freeze_and_unfreeze_return_the_module():
    model = BoringModel()
    assert model.freeze() is model and not model.training
    assert all(not p.requires_grad for p in model.parameters())
    assert model.unfreeze() is model and model.training
    assert all(p.requires_grad for p in model.parameters())


def test_a_logged_key_with_a_dataloader_index_is_refused():
    class Model(BoringModel):
        def training_step(self, batch, batch_idx):
            self.log("foo/dataloader_idx_0", 1.0)
            return super().training_step(batch, batch_idx)

    with pytest.raises(MisconfigurationException, match="`self.log` with the key `foo/dataloader_idx_0`"):
        Trainer(max_steps=1, **QUIET).fit(Model())


def test_a_logged_metric_must_belong_to_the_module():
    torchmetrics = pytest.importorskip("torchmetrics")

    def fit(model):
        Trainer(max_steps=1, **QUIET).fit(model)

    class Stray(BoringModel):
        def training_step(self, batch, batch_idx):
            self.log("acc", torchmetrics.MeanMetric())
            return super().training_step(batch, batch_idx)

    with pytest.raises(MisconfigurationException, match="setting an attribute for the metric in your"):
        fit(Stray())

    class Other(Stray):
        def __init__(self):
            super().__init__()
            self.bar = torchmetrics.MeanMetric()

    with pytest.raises(MisconfigurationException, match=r"metric_attribute=name\)` where `name` is one of \['bar'\]"):
        fit(Other())

    class Owned(BoringModel):
        def __init__(self):
            super().__init__()
            self.mean = torchmetrics.MeanMetric()

        def training_step(self, batch, batch_idx):
            self.mean(batch.sum())
            self.log("mean", self.mean, on_step=False, on_epoch=True)
            return super().training_step(batch, batch_idx)

    trainer = Trainer(max_steps=2, **QUIET)
    trainer.fit(Owned())
    assert "mean" in trainer.callback_metrics


def test_logging_one_key_twice_differently_or_with_an_unknown_reduction_is_refused():
    class Twice(BoringModel):
        def training_step(self, batch, batch_idx):
            self.log("foo", 1.0, prog_bar=False)
            self.log("foo", 1.0, prog_bar=True)
            return super().training_step(batch, batch_idx)

    with pytest.raises(MisconfigurationException, match=r"`self.log\(foo, ...\)` twice in `training_step`"):
        Trainer(max_steps=1, **QUIET).fit(Twice())

    class Argmax(BoringModel):
        def training_step(self, batch, batch_idx):
            self.log("foo", 1.0, reduce_fx=torch.argmax)
            return super().training_step(batch, batch_idx)

    with pytest.raises(MisconfigurationException, match=r"reduce_fx=\{min,max,mean,sum\}\)` are supported"):
        Trainer(max_steps=1, **QUIET).fit(Argmax())
