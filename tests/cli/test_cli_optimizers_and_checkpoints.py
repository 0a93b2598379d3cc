"""LightningCLI: --optimizer / --lr_scheduler, optimizer arguments linked to the model, callable and module
arguments recorded in the checkpoint and rebuilt by load_from_checkpoint, --ckpt_path's hyperparameters,
environment variables, short class names and what trainer_defaults may hold."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import torch
import yaml

pytest.importorskip("jsonargparse")

from fulmen import LightningModule, Trainer
from fulmen.callbacks import LearningRateMonitor, ModelCheckpoint
from fulmen.cli import (
    LightningCLI,
    LRSchedulerCallable,
    OptimizerCallable,
    ReduceLROnPlateau,
    SaveConfigCallback,
    instantiate_class,
)
from fulmen.demos.boring_classes import BoringModel
from fulmen.loggers import TensorBoardLogger

QUIET = ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]


def _cli(argv: list[str], *args, cls: type[LightningCLI] = LightningCLI, **kwargs) -> LightningCLI:
    """A CLI read from the command line, as a script's would be."""
    with mock.patch.object(sys, "argv", ["any.py", *argv]):
        return cls(*args, **kwargs)


def test_optimizer_and_scheduler_from_the_command_line(tmp_path):
    argv = ["fit", f"--trainer.default_root_dir={tmp_path}", "--trainer.max_steps=2", "--trainer.logger=false",
            "--optimizer=Adam", "--optimizer.lr=0.01", "--lr_scheduler=StepLR", "--lr_scheduler.step_size=5", *QUIET]  # fmt: skip
    with pytest.warns(UserWarning, match="BoringModel.configure_optimizers` will be overridden by `LightningCLI"):
        cli = _cli(argv, BoringModel)
    [optimizer] = cli.trainer.optimizers
    assert isinstance(optimizer, torch.optim.Adam) and optimizer.param_groups[0]["lr"] == 0.01
    [config] = cli.trainer.lr_scheduler_configs
    assert isinstance(config.scheduler, torch.optim.lr_scheduler.StepLR) and config.scheduler.step_size == 5
    saved = yaml.safe_load((tmp_path / "config.yaml").read_text())
    assert saved["optimizer"]["class_path"] == "torch.optim.Adam" and saved["optimizer"]["init_args"]["lr"] == 0.01


def test_no_optimizer_keeps_the_models_own(tmp_path):
    cli = _cli([f"--trainer.default_root_dir={tmp_path}"], BoringModel, run=False)
    [optimizer], [scheduler] = cli.model.configure_optimizers()
    assert isinstance(optimizer, torch.optim.SGD) and isinstance(scheduler, torch.optim.lr_scheduler.StepLR)
    with pytest.warns(UserWarning, match="--lr_scheduler is used together with --optimizer only"):
        _cli([f"--trainer.default_root_dir={tmp_path}", "--lr_scheduler=ExponentialLR", "--lr_scheduler.gamma=0.5"],
             BoringModel, run=False)  # fmt: skip


def test_reduce_lr_on_plateau_names_its_monitor(tmp_path):
    cli = _cli(["--optimizer=SGD", "--optimizer.lr=0.1", "--lr_scheduler=ReduceLROnPlateau",
                "--lr_scheduler.monitor=val_loss", "--lr_scheduler.patience=3"], BoringModel, run=False)  # fmt: skip
    config = cli.model.configure_optimizers()
    scheduler = config["lr_scheduler"]["scheduler"]
    assert isinstance(scheduler, ReduceLROnPlateau) and scheduler.patience == 3
    assert config["lr_scheduler"]["monitor"] == "val_loss"


def test_auto_configure_optimizers_false_adds_no_options(capsys):
    with pytest.raises(SystemExit):
        _cli(["--help"], BoringModel, run=False, auto_configure_optimizers=False)
    out = capsys.readouterr().out
    assert "--optimizer" not in out and "--lr_scheduler" not in out


class LinkedOptimizers(BoringModel):
    def __init__(self, optim1: dict, optim2: dict, scheduler: dict) -> None:
        super().__init__()
        self.optim1 = instantiate_class(self.parameters(), optim1)
        self.optim2 = instantiate_class(self.parameters(), optim2)
        self.scheduler = instantiate_class(self.optim1, scheduler)


def test_optimizer_arguments_linked_to_the_model():
    class CLI(LightningCLI):
        def add_arguments_to_parser(self, parser):
            parser.add_optimizer_args(torch.optim.Adam, nested_key="optim1", link_to="model.optim1")
            parser.add_optimizer_args((torch.optim.SGD, torch.optim.ASGD), nested_key="optim2", link_to="model.optim2")
            parser.add_lr_scheduler_args(torch.optim.lr_scheduler.ExponentialLR, link_to="model.scheduler")

    cli = _cli(["--optim1.lr=0.003", "--optim2=SGD", "--optim2.lr=0.01", "--lr_scheduler.gamma=0.2"],
               LinkedOptimizers, run=False, cls=CLI)  # fmt: skip
    assert isinstance(cli.model.optim1, torch.optim.Adam) and cli.model.optim1.param_groups[0]["lr"] == 0.003
    assert isinstance(cli.model.optim2, torch.optim.SGD) and cli.model.optim2.param_groups[0]["lr"] == 0.01
    assert isinstance(cli.model.scheduler, torch.optim.lr_scheduler.ExponentialLR) and cli.model.scheduler.gamma == 0.2
    # the user's own optimizer arguments replace the automatic ones
    assert "optimizer" not in cli.config


def test_instantiate_class_refuses_a_dict_without_class_path():
    with pytest.raises(ValueError, match="'class_path'"):
        instantiate_class((), {"init_args": {"lr": 0.1}})


class InjectedModel(BoringModel):
    def __init__(
        self,
        optimizer: OptimizerCallable = torch.optim.Adam,
        scheduler: LRSchedulerCallable = torch.optim.lr_scheduler.ConstantLR,
        activation: torch.nn.Module | None = None,
        width: int = 32,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.activation = activation
        self.layer = torch.nn.Linear(width, 2)

    def forward(self, x):
        return self.layer(x[..., : self.layer.in_features])

    def configure_optimizers(self):
        optimizer = self.optimizer(self.parameters())
        return {"optimizer": optimizer, "lr_scheduler": self.scheduler(optimizer)}


def test_callable_and_module_arguments_are_rebuilt_from_the_checkpoint(tmp_path):
    argv = [f"--trainer.default_root_dir={tmp_path}", "--trainer.max_steps=1", "--model.optimizer=SGD",
            "--model.optimizer.lr=0.007", "--model.scheduler=ExponentialLR", "--model.scheduler.gamma=0.3",
            "--model.activation=torch.nn.LeakyReLU", "--model.activation.negative_slope=0.2", "--model.width=16",
            *QUIET]  # fmt: skip
    cli = _cli(argv, InjectedModel, run=False, auto_configure_optimizers=False)
    config = cli.model.configure_optimizers()
    assert isinstance(config["optimizer"], torch.optim.SGD) and config["optimizer"].param_groups[0]["lr"] == 0.007
    cli.trainer.fit(cli.model)
    [path] = Path(cli.trainer.log_dir, "checkpoints").glob("*.ckpt")
    hparams = torch.load(path, weights_only=True)["hyper_parameters"]
    # the config that built them, not the objects (which a checkpoint cannot hold)
    assert hparams["_instantiator"] == "fulmen.cli.instantiate_module"
    assert hparams["optimizer"]["class_path"] == "torch.optim.SGD"
    assert hparams["activation"] == {"class_path": "torch.nn.LeakyReLU",
                                     "init_args": {"negative_slope": 0.2, "inplace": False}}  # fmt: skip
    assert "hyper_parameters_left_out" not in torch.load(path, weights_only=True)

    model = InjectedModel.load_from_checkpoint(path)
    assert isinstance(model.activation, torch.nn.LeakyReLU) and model.activation.negative_slope == 0.2
    assert model.layer.in_features == 16
    assert torch.equal(model.layer.weight, cli.model.layer.weight.cpu())
    config = model.configure_optimizers()
    assert isinstance(config["optimizer"], torch.optim.SGD) and config["optimizer"].param_groups[0]["lr"] == 0.007
    assert isinstance(config["lr_scheduler"], torch.optim.lr_scheduler.ExponentialLR)
    assert config["lr_scheduler"].gamma == 0.3
    # an override still wins, and a plain object may be passed as it is
    model = InjectedModel.load_from_checkpoint(path, activation=torch.nn.Tanh())
    assert isinstance(model.activation, torch.nn.Tanh)


def test_subclass_mode_checkpoint_loads_through_the_base_class(tmp_path):
    argv = [f"--trainer.default_root_dir={tmp_path}", "--trainer.max_steps=1",
            f"--model={InjectedModel.__module__}.InjectedModel", "--model.width=8", *QUIET]  # fmt: skip
    cli = _cli(argv, run=False, auto_configure_optimizers=False)
    cli.trainer.fit(cli.model)
    [path] = Path(cli.trainer.log_dir, "checkpoints").glob("*.ckpt")
    assert set(cli.model.hparams) == {"_instantiator", "_class_path", "optimizer", "scheduler", "activation", "width"}
    model = LightningModule.load_from_checkpoint(path)
    assert type(model) is InjectedModel and model.layer.in_features == 8
    with pytest.raises(TypeError, match="not a subclass of Sized"):
        Sized.load_from_checkpoint(path)


def test_a_checkpoint_naming_another_instantiator_is_refused(tmp_path):
    model = BoringModel()
    checkpoint = {"state_dict": model.state_dict(),
                  "hyper_parameters": {"_instantiator": "os.system", "command": "echo no"}}  # fmt: skip
    torch.save(checkpoint, tmp_path / "bad.ckpt")
    with pytest.raises(ValueError, match="_instantiator='os.system'"):
        BoringModel.load_from_checkpoint(tmp_path / "bad.ckpt")


class Sized(BoringModel):
    def __init__(self, out_dim: int = 2, hidden_dim: int = 2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(32, out_dim)


def test_ckpt_path_builds_the_model_with_the_checkpoints_hyperparameters(tmp_path, capsys, monkeypatch):
    class CLI(LightningCLI):
        def add_arguments_to_parser(self, parser):
            parser.link_arguments("model.out_dim", "model.hidden_dim", compute_fn=lambda x: x * 2)

    monkeypatch.chdir(tmp_path)
    cli = _cli(["fit", "--model.out_dim=3", "--trainer.max_steps=1", *QUIET], Sized, cls=CLI)
    assert cli.model.hparams["hidden_dim"] == 6
    [path] = Path(cli.trainer.log_dir, "checkpoints").glob("*.ckpt")
    cli = _cli(["predict", f"--ckpt_path={path}", *QUIET], Sized, cls=CLI)
    assert cli.config.predict.model.out_dim == 3 and cli.model.layer.out_features == 3
    with pytest.raises(SystemExit):
        _cli(["predict", f"--ckpt_path={path}", *QUIET], BoringModel)
    assert "Parsing of ckpt_path hyperparameters failed" in capsys.readouterr().err


class Normalizer:
    """An object among a model's arguments, which no config can hold."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale


class WithNormalizer(BoringModel):
    def __init__(self, norm: Any = None, width: int = 2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(32, width)


def test_ckpt_path_whose_hyperparameters_hold_objects(tmp_path):
    """A checkpoint saved outside the CLI may hold objects: read as --weights_only says (refused by default,
    naming them); once trusted, the config takes its plain values and keeps the command line's for the objects."""
    trainer = Trainer(max_steps=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(WithNormalizer(Normalizer(3.0), width=3))
    path = tmp_path / "outside.ckpt"
    trainer.save_checkpoint(path)
    root = f"--trainer.default_root_dir={tmp_path}"
    with pytest.raises(pickle.UnpicklingError, match=rf"(?s){__name__}.Normalizer.*--weights_only=false.*add_safe_globals"):
        _cli(["predict", f"--ckpt_path={path}", root, *QUIET], WithNormalizer)
    with pytest.warns(UserWarning, match=r"hyperparameters norm are objects, which a config cannot hold"):
        cli = _cli(["predict", f"--ckpt_path={path}", "--weights_only=false", root, *QUIET], WithNormalizer)
    assert cli.model.layer.out_features == 3 and cli.model.hparams.norm is None
    saved = yaml.safe_load(Path(cli.trainer.log_dir, "config.yaml").read_text())
    assert saved["model"] == {"norm": None, "width": 3}  # no object's repr in the recorded config


def test_environment_variables_with_default_env(tmp_path, capsys):
    with pytest.raises(SystemExit):
        _cli(["fit", "--help"], BoringModel, parser_kwargs={"default_env": True})
    out = capsys.readouterr().out
    assert "PL_FIT__TRAINER__MAX_EPOCHS" in out and "PL_FIT__CKPT_PATH" in out
    env = {"PL_FIT__TRAINER__MAX_EPOCHS": "3", "PL_FIT__TRAINER__LOGGER": "false"}
    with mock.patch.dict(os.environ, env), mock.patch("fulmen.Trainer.fit", autospec=True) as fit:
        cli = _cli(["fit"], BoringModel, parser_kwargs={"default_env": True})
    fit.assert_called_once()
    assert cli.trainer.max_epochs == 3 and cli.trainer.logger is None


def test_short_class_names_and_class_path_defaults(tmp_path):
    cli = _cli(["--trainer.logger=TensorBoardLogger", f"--trainer.logger.save_dir={tmp_path}",
                "--trainer.callbacks+=LearningRateMonitor", "--trainer.callbacks.logging_interval=epoch"],
               BoringModel, run=False)  # fmt: skip
    assert isinstance(cli.trainer.logger, TensorBoardLogger) and cli.trainer.logger.save_dir == str(tmp_path)
    [monitor] = [c for c in cli.trainer.callbacks if isinstance(c, LearningRateMonitor)]
    assert monitor.logging_interval == "epoch"
    defaults = {
        "logger": {"class_path": "fulmen.loggers.CSVLogger", "init_args": {"save_dir": str(tmp_path)}},
        "callbacks": {"class_path": "fulmen.callbacks.ModelCheckpoint", "init_args": {"monitor": "val_loss"}},
    }
    cli = _cli([], BoringModel, trainer_defaults=defaults, run=False)
    assert any(isinstance(c, ModelCheckpoint) and c.monitor == "val_loss" for c in cli.trainer.callbacks)


def test_add_lightning_class_args_callback_joins_the_trainer(tmp_path):
    class CLI(LightningCLI):
        def add_arguments_to_parser(self, parser):
            parser.add_lightning_class_args(LearningRateMonitor, "lr_monitor")

    cli = _cli(["--lr_monitor.logging_interval=epoch"], BoringModel, run=False, cls=CLI)
    [monitor] = [c for c in cli.trainer.callbacks if isinstance(c, LearningRateMonitor)]
    assert monitor.logging_interval == "epoch"


def test_config_is_saved_by_a_run_false_cli_and_not_for_fast_dev_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cli = _cli(["--trainer.logger=false", "--trainer.max_steps=1", *QUIET], BoringModel, run=False)
    [callback] = [c for c in cli.trainer.callbacks if isinstance(c, SaveConfigCallback)]
    cli.trainer.fit(cli.model)
    assert callback.already_saved and (tmp_path / "config.yaml").is_file()
    os.remove(tmp_path / "config.yaml")
    _cli(["fit", "--trainer.logger=false", "--trainer.fast_dev_run=1", *QUIET], BoringModel)
    assert not (tmp_path / "config.yaml").exists()
