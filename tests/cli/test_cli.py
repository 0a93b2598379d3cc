"""The command line: LightningCLI from YAML configs, --print_config, the saved config, `fulmen fit` (demo)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

import fulmen

pytest.importorskip("jsonargparse")

from fulmen.cli import LightningCLI, main, plot_run

BORING = "fulmen.demos.boring_classes.BoringModel"
BORING_DATA = "fulmen.demos.boring_classes.BoringDataModule"


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_fit_from_yaml_configs_saves_config_and_checkpoints(tmp_path):
    base = _write(tmp_path / "base.yaml", {
        "model": {"class_path": BORING},
        "data": {"class_path": BORING_DATA},
        "trainer": {"max_epochs": 3, "limit_train_batches": 2, "limit_val_batches": 1,
                    "enable_progress_bar": False, "default_root_dir": str(tmp_path / "runs"),
                    "logger": {"class_path": "fulmen.loggers.CSVLogger", "init_args": {"save_dir": str(tmp_path / "runs")}}},
        "seed_everything": 7,
    })  # fmt: skip
    override = _write(tmp_path / "override.yaml", {"trainer": {"max_epochs": 2}})
    cli = LightningCLI(
        args=["fit", "--config", str(base), "--config", str(override), "--trainer.limit_train_batches=3"]
    )
    assert cli.trainer.current_epoch == 2 and cli.trainer.global_step == 6
    log_dir = Path(cli.trainer.log_dir)
    saved = yaml.safe_load((log_dir / "config.yaml").read_text())
    assert saved["trainer"]["max_epochs"] == 2 and saved["seed_everything"] == 7
    assert saved["model"]["class_path"] == BORING
    checkpoints = list((log_dir / "checkpoints").glob("*.ckpt"))
    assert [p.name for p in checkpoints] == ["epoch=1-step=6.ckpt"]
    # the saved config repeats the run; validate from the checkpoint
    again = LightningCLI(
        args=["validate", "--config", str(log_dir / "config.yaml"), "--ckpt_path", str(checkpoints[0])]
    )
    assert again.trainer.ckpt_path == str(checkpoints[0])
    assert again.trainer.state.fn is not None and again.trainer.state.fn.value == "validate"
    assert torch.equal(
        again.model.layer.weight, torch.load(checkpoints[0], weights_only=True)["state_dict"]["layer.weight"]
    )


def test_print_config(capsys):
    with pytest.raises(SystemExit) as info:
        LightningCLI(args=["fit", "--model", BORING, "--trainer.max_epochs=4", "--print_config"])
    assert info.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["trainer"]["max_epochs"] == 4 and printed["model"]["class_path"] == BORING


def test_bad_argument_is_a_clear_error(capsys):
    with pytest.raises(SystemExit):
        LightningCLI(args=["fit", "--model", BORING, "--trainer.max_epochz=4"])
    assert "max_epochz" in capsys.readouterr().err


def test_fulmen_fit_without_model_trains_the_demo(tmp_path, capsys):
    pytest.importorskip("sklearn")
    main(["fit", "--trainer.max_epochs=1", "--trainer.limit_train_batches=3", "--trainer.enable_progress_bar=false",
          f"--trainer.default_root_dir={tmp_path}"])  # fmt: skip
    captured = capsys.readouterr()
    assert "digits demo" in captured.err and "checkpoints:" in captured.out


def test_print_config_of_the_demo_is_a_config_fit_reads(tmp_path, capsys):
    pytest.importorskip("sklearn")
    with pytest.raises(SystemExit) as exited:
        main(["fit", "--print_config"])
    assert exited.value.code in (0, None)
    printed = capsys.readouterr().out
    config = tmp_path / "cfg.yaml"
    config.write_text(printed)
    assert yaml.safe_load(printed)["model"]["class_path"] == "fulmen.demos.digits.DigitsClassifier"
    main(["fit", "--config", str(config), "--trainer.max_epochs=1", "--trainer.limit_train_batches=2",
          "--trainer.limit_val_batches=1", "--trainer.enable_progress_bar=false", f"--trainer.default_root_dir={tmp_path}"])  # fmt: skip
    assert "checkpoints:" in capsys.readouterr().out


def test_plot_command(tmp_path):
    pytest.importorskip("matplotlib")
    (tmp_path / "metrics.csv").write_text("epoch,step,train_loss,val_loss\n0,0,1.0,\n0,1,0.5,0.7\n")
    path = plot_run(str(tmp_path))
    assert path is not None and Path(path).read_bytes()[:4] == b"\x89PNG"
    main(["plot", str(tmp_path)])


@pytest.mark.slow
def test_fulmen_tune_finds_batch_size_and_learning_rate_and_saves_the_plot(tmp_path, capsys):
    """1.x's `tune` subcommand on the demo: both finders, the plot written as PNG."""
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    main(["tune", "--trainer.auto_scale_batch_size=power", "--trainer.auto_lr_find=true", "--trainer.logger=false",
          "--trainer.enable_progress_bar=false", f"--trainer.default_root_dir={tmp_path}"])  # fmt: skip
    out = capsys.readouterr().out
    size = int(out.split("batch size: ")[1].split()[0])
    lr = float(out.split("learning rate: ")[1].split()[0])
    assert size >= 512 and 1e-8 < lr < 1  # no memory limit on the CPU: it grew to the training set's size
    assert (tmp_path / "lr_find.png").read_bytes()[:4] == b"\x89PNG"


def test_fulmen_predict_writes_through_a_prediction_writer_and_says_where(tmp_path, capsys):
    out_dir = tmp_path / "preds"
    common = ["--model", BORING, "--data", BORING_DATA, "--trainer.logger=false", "--trainer.enable_progress_bar=false",
              f"--trainer.default_root_dir={tmp_path}"]  # fmt: skip
    main(["predict", *common, "--trainer.callbacks=fulmen.callbacks.PredictionFileWriter",
          f"--trainer.callbacks.output_dir={out_dir}"])  # fmt: skip
    out = capsys.readouterr().out
    assert f"predictions: written by PredictionFileWriter to {out_dir} (1 file)" in out
    saved = torch.load(out_dir / "predictions.pt", weights_only=True)
    indices = [i for batch in saved["batch_indices"] for i in batch]
    assert sorted(indices) == list(range(64)) and len(saved["predictions"]) == len(saved["batch_indices"])
    assert saved["predictions"][0].shape[-1] == 2

    main(["predict", *common])  # no writer: it says nothing was kept, and how to keep it
    assert "computed and not saved" in capsys.readouterr().out


def test_trainer_defaults_may_hold_callback_objects(tmp_path):
    from fulmen.callbacks import EarlyStopping, LearningRateMonitor

    single = EarlyStopping(monitor="x")
    cli = LightningCLI(args=["--trainer.max_epochs=1", "--model", BORING, "--data", BORING_DATA], run=False,
                       trainer_defaults={"callbacks": single, "default_root_dir": str(tmp_path)})  # fmt: skip
    assert single in cli.trainer.callbacks and cli.trainer.default_root_dir == str(tmp_path)
    several = [LearningRateMonitor(), EarlyStopping(monitor="y")]
    cli = LightningCLI(args=["--model", BORING, "--data", BORING_DATA], run=False, trainer_defaults={"callbacks": several})
    assert all(cb in cli.trainer.callbacks for cb in several)


def test_subcommand_options_hooks_and_a_config_before_the_subcommand(tmp_path, monkeypatch):
    from unittest import mock

    from fulmen.cli import SaveConfigCallback

    class HookedCLI(LightningCLI):
        def __init__(self, *args, **kwargs):
            self.called = []
            super().__init__(*args, **kwargs)

        def before_test(self):
            self.called.append("before_test")

        def after_test(self):
            self.called.append("after_test")

    config = {"validate": {"verbose": False, "ckpt_path": "a.ckpt"},
              "test": {"trainer": {"limit_test_batches": 1}, "verbose": True, "ckpt_path": "b.ckpt"}}  # fmt: skip
    args = [f"--config={config}", "test", "--model", BORING, f"--trainer.default_root_dir={tmp_path}",
            "--trainer.logger=false"]  # fmt: skip
    with mock.patch.object(fulmen.Trainer, "test", autospec=True) as test:
        cli = HookedCLI(args=args)
    test.assert_called_once_with(cli.trainer, model=cli.model, verbose=True, ckpt_path="b.ckpt", weights_only=None)
    assert cli.called == ["before_test", "after_test"] and cli.trainer.limit_test_batches == 1
    assert isinstance(cli.trainer.callbacks[0], SaveConfigCallback)  # first, for every subcommand
