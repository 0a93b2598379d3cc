"""Trainer behaviour not covered by the parity suite: attributes, logging, data sources, compile."""

from __future__ import annotations

import inspect
import os
import re

import pytest
import torch
from torch.utils.data import DataLoader

import fulmen as pl
from fulmen import Trainer
from fulmen.callbacks import LearningRateMonitor, Timer
from fulmen.demos.boring_classes import BoringDataModule, BoringModel, RandomDataset
from fulmen.loggers import CSVLogger
from tests.parity import oracle

QUIET = dict(logger=False, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)


@oracle.parity
def test_trainer_signature_matches_lightning():
    lightning = oracle.lightning()
    ours = inspect.signature(Trainer.__init__).parameters
    theirs = inspect.signature(lightning.Trainer.__init__).parameters
    # Lightning's arguments in Lightning's order (positional calls work), then fulmen's own keyword extras
    assert list(ours)[: len(theirs)] == list(theirs)
    assert list(ours)[len(theirs) :] == [
        "matmul_precision",
        "compile",
        "auto_scale_batch_size",  # the 1.x flags Lightning 2.x removed
        "auto_lr_find",
        "stochastic_weight_avg",
    ]
    for name, param in theirs.items():
        assert ours[name].default == param.default, name


def test_public_api_imports():
    from fulmen.callbacks import Callback, EarlyStopping, ModelSummary, TQDMProgressBar  # noqa: F401
    from fulmen.core.optimizer import LightningOptimizer  # noqa: F401
    from fulmen.demos.boring_classes import BoringModel  # noqa: F401
    from fulmen.loggers import CSVLogger, Logger, TensorBoardLogger  # noqa: F401
    from fulmen.strategies import SingleDeviceStrategy  # noqa: F401
    from fulmen.utilities import rank_zero_only  # noqa: F401
    from fulmen.utilities.exceptions import MisconfigurationException  # noqa: F401

    assert pl.Trainer and pl.LightningModule and pl.LightningDataModule and pl.seed_everything


def test_attributes_after_fit():
    model = BoringModel()
    trainer = Trainer(max_epochs=2, limit_train_batches=5, limit_val_batches=2, **QUIET)
    trainer.fit(model)
    assert trainer.global_step == 10
    assert trainer.current_epoch == 2
    assert trainer.state.finished
    assert trainer.num_training_batches == 5
    assert trainer.estimated_stepping_batches == 10
    assert trainer.world_size == 1 and trainer.global_rank == 0 and trainer.is_global_zero
    assert model.trainer is trainer and model.global_step == 10
    assert len(trainer.optimizers) == 1 and len(trainer.lr_scheduler_configs) == 1
    assert trainer.lr_scheduler_configs[0].interval == "epoch"


def test_datamodule_and_validate_test_predict():
    dm = BoringDataModule()
    model = BoringModel()
    trainer = Trainer(max_epochs=1, limit_train_batches=2, **QUIET)
    trainer.fit(model, datamodule=dm)
    predictions = trainer.predict(model, datamodule=dm)
    assert len(predictions) == 64 and predictions[0].shape == (1, 2)


def test_validate_returns_metrics_per_dataloader():
    class M(BoringModel):
        def validation_step(self, batch, batch_idx, dataloader_idx=0):
            self.log("loss", self.step(batch))

    model = M()
    loaders = [DataLoader(RandomDataset(32, 8)), DataLoader(RandomDataset(32, 4))]
    out = Trainer(**QUIET).validate(model, loaders, verbose=False)
    assert len(out) == 2
    assert set(out[0]) == {"loss/dataloader_idx_0"} and set(out[1]) == {"loss/dataloader_idx_1"}


def test_log_epoch_mean_is_weighted_by_batch_size():
    seen = []

    class M(BoringModel):
        def validation_step(self, batch, batch_idx):
            value = torch.tensor(float(batch_idx))
            seen.append((float(value), batch.shape[0]))
            self.log("v", value)

    out = Trainer(**QUIET).validate(M(), DataLoader(RandomDataset(32, 10), batch_size=4), verbose=False)
    expected = sum(v * n for v, n in seen) / sum(n for _, n in seen)
    assert out[0]["v"] == pytest.approx(expected)


def test_csv_logger_step_axis_and_log_every_n_steps(tmp_path):
    class M(BoringModel):
        def training_step(self, batch, batch_idx):
            loss = self.step(batch)
            self.log("loss", loss)
            return loss

    logger = CSVLogger(tmp_path)
    trainer = Trainer(
        max_epochs=1,
        limit_train_batches=10,
        log_every_n_steps=3,
        logger=logger,
        enable_progress_bar=False,
        limit_val_batches=0,
    )
    trainer.fit(M())
    import csv

    with open(os.path.join(logger.log_dir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows if r["loss"]] == [2, 5, 8]
    assert trainer.log_dir == logger.log_dir


def test_learning_rate_monitor(tmp_path):
    monitor = LearningRateMonitor(logging_interval="epoch")
    trainer = Trainer(
        max_epochs=3,
        limit_train_batches=2,
        limit_val_batches=0,
        logger=CSVLogger(tmp_path),
        callbacks=[monitor],
        enable_progress_bar=False,
    )
    trainer.fit(BoringModel())
    assert monitor.lrs["lr-SGD"] == pytest.approx([0.1, 0.01, 0.001])


def test_max_time_stops_training():
    timer = Timer(duration={"seconds": 0}, interval="step")
    trainer = Trainer(max_epochs=5, callbacks=[timer], **QUIET)
    trainer.fit(BoringModel())
    assert trainer.global_step == 0  # a spent budget stops at fit start, before any step (as Lightning)


def test_max_time_flag_adds_a_timer():
    trainer = Trainer(max_time="00:00:00:00", max_epochs=5, **QUIET)
    assert any(isinstance(cb, Timer) for cb in trainer.callbacks)
    trainer.fit(BoringModel())
    assert trainer.global_step == 0


def test_reload_dataloaders_every_n_epochs():
    calls = []

    class M(BoringModel):
        def train_dataloader(self):
            calls.append(self.current_epoch)
            return super().train_dataloader()

    Trainer(
        max_epochs=4, limit_train_batches=1, limit_val_batches=0, reload_dataloaders_every_n_epochs=2, **QUIET
    ).fit(M())
    assert calls == [0, 2]


def test_on_train_batch_start_minus_one_ends_epoch():
    class M(BoringModel):
        def on_train_batch_start(self, batch, batch_idx):
            return -1 if batch_idx == 3 else None

    trainer = Trainer(max_epochs=2, limit_val_batches=0, **QUIET)
    trainer.fit(M())
    assert trainer.global_step == 6


def test_buffers_and_device_move_with_module():
    class M(BoringModel):
        def __init__(self):
            super().__init__()
            self.register_buffer("running", torch.zeros(2))

    model = M()
    model.to(torch.float64)
    assert model.dtype == torch.float64 and model.running.dtype == torch.float64
    assert model.device == torch.device("cpu")


def test_save_hyperparameters():
    class M(BoringModel):
        def __init__(self, lr=0.1, hidden=4, **kwargs):
            super().__init__()
            self.save_hyperparameters(ignore="hidden")

    model = M(lr=0.5, extra="x")
    assert dict(model.hparams) == {"lr": 0.5, "extra": "x"}
    assert model.hparams.lr == 0.5


def test_compiled_module_is_accepted():
    model = BoringModel()
    compiled = torch.compile(model, backend="eager")
    trainer = Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1, **QUIET)
    trainer.fit(compiled)
    assert trainer.lightning_module is model
    assert trainer.global_step == 2
    assert set(model.state_dict()) == {"layer.weight", "layer.bias"}


def test_progress_bar_and_model_summary_run(capsys):
    trainer = Trainer(max_epochs=1, limit_train_batches=3, limit_val_batches=2, logger=False)
    trainer.fit(BoringModel())
    out = capsys.readouterr().out
    assert "Trainable params" in out
    assert "Epoch 0" in out


def test_inference_mode_flag():
    grads = []

    class M(BoringModel):
        def validation_step(self, batch, batch_idx):
            grads.append(torch.is_inference_mode_enabled())

    Trainer(inference_mode=False, **QUIET).validate(M(), verbose=False)
    Trainer(inference_mode=True, **QUIET).validate(M(), verbose=False)
    assert grads[0] is False and grads[-1] is True


def test_matmul_precision_holds_for_the_run_and_is_restored():
    seen = []

    class Record(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            seen.append(torch.get_float32_matmul_precision())

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            raise RuntimeError("stop")

    before = torch.get_float32_matmul_precision()
    trainer = Trainer(max_epochs=1, matmul_precision="medium", callbacks=[Record()], logger=False,
                      enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    with pytest.raises(RuntimeError, match="stop"):
        trainer.fit(BoringModel())
    assert seen == ["medium"]
    assert torch.get_float32_matmul_precision() == before  # restored even though the run failed
    with pytest.raises(pl.utilities.exceptions.MisconfigurationException, match="matmul_precision='low'"):
        Trainer(matmul_precision="low")


def test_matmul_precision_is_suggested_once_on_a_tensor_core_gpu(monkeypatch, caplog):
    from fulmen.accelerators import cuda as trainer_module  # the check lives where Lightning's does

    monkeypatch.setattr(trainer_module, "_matmul_suggested", False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Fake A100")
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "highest")
    caplog.set_level("INFO", logger="fulmen")
    trainer_module._check_cuda_matmul_precision(torch.device("cpu"))  # not CUDA: nothing
    assert "tensor cores" not in caplog.text
    for _ in range(2):
        trainer_module._check_cuda_matmul_precision(torch.device("cuda", 0))
    assert caplog.text.count("tensor cores") == 1 and "Fake A100" in caplog.text
    monkeypatch.setattr(trainer_module, "_matmul_suggested", False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (6, 1))
    caplog.clear()
    trainer_module._check_cuda_matmul_precision(torch.device("cuda", 0))
    assert "tensor cores" not in caplog.text  # Pascal: nothing to gain


def test_fast_dev_run_keeps_a_logger_that_keeps_nothing(tmp_path):
    from fulmen.loggers import CSVLogger
    from fulmen.loggers.logger import DummyLogger
    from fulmen.tuner import Tuner

    class Model(BoringModel):
        def training_step(self, batch, batch_idx):
            self.logger.experiment.add_histogram("w", self.layer.weight)  # any experiment call is accepted
            self.log("loss_seen", 1.0)
            return super().training_step(batch, batch_idx)

    trainer = Trainer(fast_dev_run=2, logger=CSVLogger(tmp_path), default_root_dir=tmp_path)
    assert len(trainer.loggers) == 1 and isinstance(trainer.logger, DummyLogger)
    trainer.fit(Model())
    assert trainer.global_step == 2
    assert not list(tmp_path.rglob("metrics.csv")) and not list(tmp_path.rglob("*.ckpt"))
    assert Trainer(fast_dev_run=True, logger=False).logger is None

    tuner = Tuner(trainer)
    model = Model()
    model.lr, model.batch_size = 0.1, 8
    with pytest.warns(UserWarning, match="Skipping learning rate finder since `fast_dev_run` is enabled"):
        assert tuner.lr_find(model) is None
    with pytest.warns(UserWarning, match="Skipping batch size scaler since `fast_dev_run` is enabled"):
        assert tuner.scale_batch_size(model) is None
    assert (model.lr, model.batch_size) == (0.1, 8)


def test_each_stage_keeps_its_dataloaders():
    from torch.utils.data import DataLoader

    class Model(BoringModel):
        def test_dataloader(self):
            return [DataLoader(RandomDataset(32, 8)), DataLoader(RandomDataset(32, 4))]

        def test_step(self, batch, batch_idx, dataloader_idx=0):
            return None

    trainer = Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    assert trainer.test_dataloaders is None and trainer.predict_dataloaders is None and trainer.val_dataloaders is None
    model = Model()
    trainer.validate(model, verbose=False)
    trainer.test(model, verbose=False)
    trainer.predict(model)
    assert isinstance(trainer.val_dataloaders, DataLoader)
    assert [len(dl) for dl in trainer.test_dataloaders] == [8, 4]
    assert len(trainer.predict_dataloaders) == 64


def test_warnings_lightning_gives_on_restore_and_evaluation(tmp_path):
    from fulmen.callbacks import EarlyStopping, ModelCheckpoint

    class Model(BoringModel):
        def validation_step(self, batch, batch_idx):
            self.log("foo", float(batch_idx))

    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="foo")
    trainer = Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1, logger=False,
                      enable_progress_bar=False, callbacks=[checkpoint, EarlyStopping(monitor="foo")])  # fmt: skip
    trainer.fit(Model())
    with pytest.warns(UserWarning, match="The best model of the previous `fit` call will be used"):
        trainer.validate(verbose=False)
    assert trainer.ckpt_path == checkpoint.best_model_path
    resumed = Trainer(max_epochs=2, limit_train_batches=2, limit_val_batches=1, logger=False,
                      enable_progress_bar=False, callbacks=[ModelCheckpoint(dirpath=tmp_path, monitor="foo")])  # fmt: skip
    # the missing callbacks by state key, as Lightning names them (programs match on it)
    missing = repr([EarlyStopping(monitor="foo").state_key])
    with pytest.warns(UserWarning, match=re.escape(f"Please add the following callbacks: {missing}.")):
        resumed.fit(Model(), ckpt_path=checkpoint.best_model_path)


def test_unknown_optimizer_dict_keys_are_a_runtime_warning():
    class Model(BoringModel):
        def configure_optimizers(self):
            return {"optimizer": torch.optim.SGD(self.parameters(), lr=0.1), "foo": 1}

    trainer = Trainer(max_steps=1, logger=False, enable_progress_bar=False, enable_checkpointing=False)
    with pytest.warns(RuntimeWarning, match=r"unsupported keys in the optimizer configuration: \{'foo'\}"):
        trainer.fit(Model())


def test_scheduler_configuration_mistakes_are_said():
    class OneCycle(BoringModel):
        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=0.1)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.OneCycleLR(
                opt, max_lr=0.1, total_steps=10), "foo": 1}}  # fmt: skip

    trainer = Trainer(max_steps=1, logger=False, enable_progress_bar=False, enable_checkpointing=False)
    with (
        pytest.warns(RuntimeWarning, match="Are you sure you didn't mean 'interval': 'step'?"),
        pytest.warns(RuntimeWarning, match=r"unsupported keys in the lr scheduler dict: \{'foo'\}"),
    ):
        trainer.fit(OneCycle())

    class Stray(BoringModel):
        def configure_optimizers(self):
            other = torch.optim.SGD(self.parameters(), lr=0.1)
            return [torch.optim.SGD(self.parameters(), lr=0.1)], [torch.optim.lr_scheduler.StepLR(other, 1)]

    trainer = Trainer(max_steps=1, logger=False, enable_progress_bar=False, enable_checkpointing=False)
    with pytest.raises(pl.utilities.MisconfigurationException, match="attached with an optimizer that wasn.t returned"):
        trainer.fit(Stray())


def test_fit_again_with_a_higher_max_epochs_trains_on():
    epochs = []

    class Model(BoringModel):
        def on_train_epoch_end(self):
            epochs.append(self.current_epoch)

    trainer = Trainer(max_epochs=2, limit_train_batches=1, limit_val_batches=1, **QUIET)
    trainer.fit(Model())
    trainer.fit_loop.max_epochs = 4
    trainer.fit(Model())
    assert epochs == [0, 1, 2, 3] and trainer.max_epochs == 4
    trainer.fit_loop.max_steps = 5
    assert trainer.max_steps == 5
    with pytest.raises(pl.utilities.MisconfigurationException, match="fit_loop.max_epochs='x'"):
        trainer.fit_loop.max_epochs = "x"


@oracle.parity
def test_every_public_trainer_attribute_of_lightnings_exists():
    """Lightning's Trainer attributes (the API walk compares signatures, not a class's members)."""
    lightning = oracle.lightning()
    theirs = lightning.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    ours = Trainer(**QUIET)
    missing = [n for n in dir(theirs) if not n.startswith("_") and not hasattr(ours, n)]
    assert missing == []


@oracle.parity
def test_stage_flags_and_run_views_read_as_lightnings(tmp_path):
    import signal

    lightning = oracle.lightning()
    from lightning.pytorch.demos.boring_classes import BoringModel as TheirModel

    seen = {}
    for name, module, model in (("ours", pl, BoringModel()), ("theirs", lightning, TheirModel())):
        trainer = module.Trainer(max_steps=2, limit_val_batches=1, overfit_batches=0.0, logger=False,
                                 enable_progress_bar=False, enable_model_summary=False,
                                 default_root_dir=tmp_path / name)  # fmt: skip
        views = [trainer.enable_validation, trainer.received_sigterm, trainer.scaler, trainer.overfit_batches,
                 trainer.distributed_sampler_kwargs, trainer.evaluating]  # fmt: skip
        trainer.training = True
        views += [trainer.training, trainer.evaluating]
        trainer.validating = True  # entering one stage leaves the other
        views += [trainer.training, trainer.validating, trainer.evaluating]
        trainer.training = False  # not the running stage: nothing changes
        views.append(trainer.validating)
        trainer.validating = False
        views.append(trainer.state.stage)
        trainer.fit(model)
        views += [trainer.enable_validation, trainer.estimated_stepping_batches]
        seen[name] = views
    assert seen["ours"] == seen["theirs"]
    assert seen["ours"][:3] == [False, False, None]  # before fit no module: validation not enabled yet

    trainer = Trainer(**QUIET)
    trainer.run_context.stop.signal = signal.SIGTERM
    assert trainer.received_sigterm
    with_ddp = Trainer(accelerator="cpu", devices=2, strategy="ddp", **QUIET)
    assert with_ddp.distributed_sampler_kwargs == {"num_replicas": 2, "rank": 0}


@oracle.parity
def test_pl_trainer_environment_variables_set_the_flags_the_code_leaves_out(monkeypatch):
    lightning = oracle.lightning()
    for key, value in {"PL_TRAINER_MAX_EPOCHS": "3", "PL_TRAINER_LIMIT_TRAIN_BATCHES": "0.5",
                       "PL_TRAINER_ACCELERATOR": "cpu", "PL_TRAINER_LOGGER": "False"}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    for module in (pl, lightning):
        from_env, from_code = module.Trainer(), module.Trainer(max_epochs=5)
        assert (from_env.max_epochs, from_env.limit_train_batches, from_env.logger) == (3, 0.5, None)
        assert from_code.max_epochs == 5 and from_code.limit_train_batches == 0.5
    assert list(inspect.signature(Trainer).parameters)[:2] == ["accelerator", "strategy"]  # the signature shows


def test_best_with_several_model_checkpoints_warns_which_one_is_used(tmp_path):
    from fulmen.callbacks import ModelCheckpoint

    class Model(BoringModel):
        def validation_step(self, batch, batch_idx):
            self.log("foo", float(batch_idx))
            self.log("bar", -float(batch_idx))

    first = ModelCheckpoint(dirpath=tmp_path / "foo", monitor="foo")
    second = ModelCheckpoint(dirpath=tmp_path / "bar", monitor="bar")
    trainer = Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=2, logger=False, enable_progress_bar=False,
                      enable_model_summary=False, callbacks=[first, second])  # fmt: skip
    trainer.fit(Model())
    with pytest.warns(UserWarning, match=r'`\.validate\(ckpt_path="best"\)` with 2 ModelCheckpoint .* best checkpoint path from first checkpoint callback'):
        trainer.validate(ckpt_path="best", verbose=False)
    assert trainer.ckpt_path == first.best_model_path != second.best_model_path
