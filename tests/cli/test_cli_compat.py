"""The CLI next to Lightning's: `tune` without a finder flag, `parser_class`, the parser's description, a config
printed by fulmen that Lightning's LightningCLI loads, and `fulmen ...` running without rewriting sys.argv."""

from __future__ import annotations

import inspect
import sys

import pytest
import torch
import yaml

pytest.importorskip("jsonargparse")

from fulmen.cli import LightningArgumentParser, LightningCLI, main
from fulmen.demos.boring_classes import BoringDataModule, BoringModel
from tests.parity import oracle


class LearningRateModel(BoringModel):
    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.lr = lr

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class ArgvRecordingModel(BoringModel):
    seen: list = []

    def __init__(self) -> None:
        super().__init__()
        ArgvRecordingModel.seen.append(list(sys.argv))


@pytest.mark.slow  # 100 learning-rate trials and the plot
def test_tune_without_a_finder_flag_runs_the_learning_rate_finder(tmp_path, capsys):
    """`fulmen tune` with neither --trainer.auto_lr_find nor --trainer.auto_scale_batch_size: the learning-rate
    finder, as docs/cli.md says (the trainer's flags are read-only: the CLI must not try to set one)."""
    cli = LightningCLI(LearningRateModel, BoringDataModule, args=[
        "tune", "--trainer.logger=false", "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false", f"--trainer.default_root_dir={tmp_path}",
    ])  # fmt: skip
    out = capsys.readouterr().out
    suggested = float(out.split("learning rate: ")[1].split()[0])
    assert "batch size:" not in out and cli.model.lr == pytest.approx(suggested) and suggested != 0.1
    assert not cli.trainer.auto_lr_find  # the flag stays what it was given as
    if "(install matplotlib for the plot)" not in out:
        assert (tmp_path / "lr_find.png").read_bytes()[:4] == b"\x89PNG"


@oracle.parity
def test_parser_description_default_is_lightnings():
    lightning_cli = oracle.lightning("lightning.pytorch.cli")
    theirs = inspect.signature(lightning_cli.LightningArgumentParser.__init__).parameters["description"].default
    assert LightningArgumentParser().description == theirs == lightning_cli.LightningArgumentParser().description


@oracle.parity
def test_parser_class_builds_every_parser(tmp_path):
    lightning_cli = oracle.lightning("lightning.pytorch.cli")
    from lightning.pytorch.demos.boring_classes import BoringModel as LightningBoringModel

    def made_by(cli_class, parser_base, model, **kwargs):
        made = []

        class Recording(parser_base):
            def __init__(self, *args, **kw):
                super().__init__(*args, **kw)
                made.append(self)

        cli = cli_class(model, parser_class=Recording, **kwargs)
        return cli, made

    for run, args in ((False, []), (True, ["fit", "--trainer.fast_dev_run=1", f"--trainer.default_root_dir={tmp_path}",
                                           "--trainer.logger=false", "--trainer.enable_progress_bar=false"])):  # fmt: skip
        ours, our_parsers = made_by(LightningCLI, LightningArgumentParser, BoringModel, run=run, args=args)
        theirs, their_parsers = made_by(lightning_cli.LightningCLI, lightning_cli.LightningArgumentParser,
                                        LightningBoringModel, run=run, args=args)  # fmt: skip
        assert ours.parser is our_parsers[0] and theirs.parser is their_parsers[0]
        if run:  # the main parser and one per subcommand (fulmen adds 1.x's `tune`)
            assert len(their_parsers) == 5 and len(our_parsers) == 6
            assert set(ours._subparsers.values()) == set(our_parsers[1:])
            assert ours.trainer.global_step == theirs.trainer.global_step == 1
        else:
            assert len(our_parsers) == len(their_parsers) == 1


@oracle.parity
def test_fulmen_only_trainer_arguments_are_those_lightning_lacks():
    import fulmen.cli

    lightning = oracle.lightning()
    theirs = set(inspect.signature(lightning.Trainer).parameters)
    ours = [k for k in inspect.signature(fulmen.Trainer).parameters if k not in theirs]
    assert sorted(fulmen.cli._FULMEN_ONLY_TRAINER_ARGS) == sorted(ours)


def _print_config(cli_class, model, data, args, capsys) -> str:
    with pytest.raises(SystemExit) as exited:
        cli_class(model, data, args=["fit", *args, "--print_config"])
    captured = capsys.readouterr()
    assert exited.value.code in (0, None), captured.err[-2000:]
    return captured.out


@oracle.parity
def test_a_config_printed_by_fulmen_loads_in_lightnings_cli(tmp_path, capsys):
    lightning_cli = oracle.lightning("lightning.pytorch.cli")
    from lightning.pytorch.demos.boring_classes import BoringDataModule as LightningData
    from lightning.pytorch.demos.boring_classes import BoringModel as LightningModel

    printed = _print_config(LightningCLI, BoringModel, BoringDataModule, ["--trainer.max_epochs=3"], capsys)
    trainer = yaml.safe_load(printed)["trainer"]
    assert trainer["max_epochs"] == 3 and "auto_lr_find" not in trainer and "matmul_precision" not in trainer
    config = tmp_path / "fulmen.yaml"
    config.write_text(printed)
    # Lightning's CLI reads it: every key known, the values as fulmen wrote them
    theirs = yaml.safe_load(_print_config(lightning_cli.LightningCLI, LightningModel, LightningData,
                                          ["--config", str(config)], capsys))  # fmt: skip
    assert theirs["trainer"] == trainer
    # and so does fulmen's, with its own arguments at their defaults
    ours = yaml.safe_load(_print_config(LightningCLI, BoringModel, BoringDataModule, ["--config", str(config)], capsys))
    assert ours == yaml.safe_load(printed)


def test_fulmen_only_trainer_arguments_are_written_when_set(tmp_path, capsys):
    printed = _print_config(LightningCLI, BoringModel, BoringDataModule,
                            ["--trainer.matmul_precision=high", "--trainer.compile=false"], capsys)  # fmt: skip
    trainer = yaml.safe_load(printed)["trainer"]
    assert trainer["matmul_precision"] == "high" and "compile" not in trainer  # false is its default
    config = tmp_path / "cfg.yaml"
    config.write_text(printed)
    cli = LightningCLI(BoringModel, BoringDataModule, args=[
        "fit", "--config", str(config), "--trainer.fast_dev_run=1", f"--trainer.default_root_dir={tmp_path}",
        "--trainer.logger=false", "--trainer.enable_progress_bar=false",
    ])  # fmt: skip
    assert cli.trainer.config.matmul_precision == "high" and cli.trainer.config.compile is False


def test_main_passes_the_command_line_as_args_without_rewriting_sys_argv(tmp_path, monkeypatch, recwarn):
    command_line = ["fulmen", "fit", "--model", f"{__name__}.ArgvRecordingModel", "--data", BoringDataModule.__module__
                    + ".BoringDataModule", "--trainer.fast_dev_run=1", "--trainer.logger=false",
                    "--trainer.enable_progress_bar=false", f"--trainer.default_root_dir={tmp_path}"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", list(command_line))
    ArgvRecordingModel.seen = []
    main()
    assert ArgvRecordingModel.seen == [command_line] and sys.argv == command_line
    assert not [w for w in recwarn if "args" in str(w.message) and "sys.argv" in str(w.message)]


def _hook_order(cli_module, boring_module, root):
    """The hooks a LightningCLI subclass overrides, in the order they run, with what exists at each."""
    events = []

    class Recording(cli_module.LightningCLI):
        def before_instantiate_classes(self):
            events.append(("before", hasattr(self, "model"), hasattr(self, "trainer")))

        def after_instantiate_classes(self):
            events.append(("after", type(self.model).__name__, type(self.trainer).__name__,
                           self.trainer.lightning_module is None))  # fmt: skip

    class Model(boring_module.BoringModel):
        def on_fit_start(self):
            events.append(("fit",))

    Recording(Model, boring_module.BoringDataModule, args=[
        "fit", "--trainer.logger=false", "--trainer.enable_progress_bar=false", "--trainer.max_steps=1",
        "--trainer.limit_val_batches=0", "--trainer.enable_model_summary=false", f"--trainer.default_root_dir={root}",
    ])  # fmt: skip
    Recording(Model, boring_module.BoringDataModule, run=False, args=["--trainer.logger=false"])
    return events


@oracle.parity
def test_after_instantiate_classes_runs_once_after_the_classes_as_in_lightning(tmp_path):
    from fulmen import cli
    from fulmen.demos import boring_classes

    ours = _hook_order(cli, boring_classes, tmp_path / "f")
    lightning_boring = oracle.lightning("lightning.pytorch.demos.boring_classes")
    assert ours == _hook_order(oracle.lightning("lightning.pytorch.cli"), lightning_boring, tmp_path / "l")
    assert ours == [("before", False, False), ("after", "Model", "Trainer", True), ("fit",),
                    ("before", False, False), ("after", "Model", "Trainer", True)]  # fmt: skip
