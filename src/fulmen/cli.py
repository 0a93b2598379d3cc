"""``LightningCLI`` and the ``fulmen`` command: train, validate, test and predict from the command line and
YAML configs (built on jsonargparse, imported only when a CLI is built).

    fulmen fit --model pkg.MyModel --data pkg.MyData --trainer.max_epochs 5
    fulmen fit --config cfg.yaml --config override.yaml
    fulmen fit --print_config
    fulmen plot LOGDIR

With no ``--model``, ``fulmen fit`` trains the bundled digits demo.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

from fulmen.callbacks.callback import Callback
from fulmen.core.datamodule import LightningDataModule
from fulmen.core.module import LightningModule
from fulmen.trainer.trainer import Trainer
from fulmen.utilities.rank_zero import rank_zero_warn
from fulmen.utilities.seed import seed_everything

_SUBCOMMANDS = {
    "fit": "Train a model (optionally resuming with --ckpt_path).",
    "validate": "Run one validation epoch.",
    "test": "Run one test epoch.",
    "predict": "Run prediction.",
    "tune": "Find the batch size (--trainer.auto_scale_batch_size) and/or the learning rate (--trainer.auto_lr_find, "
    "the default); the learning-rate plot is written to lr_find.png.",
}
_DEMO_MODEL = "fulmen.demos.digits.DigitsClassifier"
_DEMO_DATA = "fulmen.demos.digits.DigitsDataModule"


def _jsonargparse() -> Any:
    try:
        import jsonargparse
    except ImportError as err:
        raise ModuleNotFoundError(
            "The fulmen command line needs jsonargparse: pip install 'fulmen[cli]' (or pip install jsonargparse)."
        ) from err
    return jsonargparse


class SaveConfigCallback(Callback):
    """Writes the run's full config next to its logs, so ``--config <that file>`` repeats the run."""

    def __init__(
        self, parser: Any, config: Any, config_filename: str = "config.yaml", overwrite: bool = False,
        multifile: bool = False, save_to_log_dir: bool = True,
    ) -> None:  # fmt: skip
        if not save_to_log_dir and type(self).save_config is SaveConfigCallback.save_config:
            raise ValueError(
                "SaveConfigCallback(save_to_log_dir=False) writes nothing itself: subclass it and override "
                "`save_config(trainer, pl_module, stage)` to save the config elsewhere (e.g. to a logger)."
            )
        self.parser = parser
        self.config = config
        self.config_filename = config_filename
        self.overwrite = overwrite
        self.multifile = multifile
        self.save_to_log_dir = save_to_log_dir
        self.already_saved = False
        self.path: str | None = None

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        if self.already_saved:
            return
        if self.save_to_log_dir:
            log_dir = trainer.log_dir or trainer.default_root_dir
            path = os.path.join(log_dir, self.config_filename)
            exists = os.path.exists(path) and not self.overwrite
            if trainer.is_global_zero and exists and stage != "fit":
                # an evaluation next to a training run's config: keep that config, and evaluate anyway
                rank_zero_warn(f"{path} already exists (an earlier run's config): it is kept, not overwritten.")
            elif trainer.is_global_zero:
                if exists and trainer.ckpt_path is None:
                    raise RuntimeError(
                        f"{path} already exists: saving the config would overwrite a previous run's. Aborting to "
                        "avoid overwriting results of a previous run. Use another --trainer.default_root_dir, or "
                        "LightningCLI(save_config_kwargs={'overwrite': True})."
                    )
                os.makedirs(log_dir, exist_ok=True)
                self.parser.save(self.config, path, skip_none=False, overwrite=True, multifile=self.multifile)
            self.path = path
        if trainer.is_global_zero:
            self.save_config(trainer, pl_module, stage)
        self.already_saved = True

    def save_config(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Override to save the config somewhere else as well (e.g. ``trainer.logger.log_hyperparams``)."""


class LightningCLI:
    """Parse the command line / configs into a Trainer, a model and a datamodule, and run a subcommand."""

    def __init__(
        self,
        model_class: type[LightningModule] | Callable[..., LightningModule] | None = None,
        datamodule_class: type[LightningDataModule] | Callable[..., LightningDataModule] | None = None,
        save_config_callback: type[SaveConfigCallback] | None = SaveConfigCallback,
        save_config_kwargs: dict[str, Any] | None = None,
        trainer_class: type[Trainer] | Callable[..., Trainer] = Trainer,
        trainer_defaults: dict[str, Any] | None = None,
        seed_everything_default: bool | int = True,
        parser_kwargs: dict[str, Any] | None = None,
        subclass_mode_model: bool = False,
        subclass_mode_data: bool = False,
        args: list[str] | dict[str, Any] | None = None,
        run: bool = True,
        auto_configure_optimizers: bool = True,
    ) -> None:
        self.model_class = model_class
        self.datamodule_class = datamodule_class
        self.save_config_callback = save_config_callback
        self.save_config_kwargs = save_config_kwargs or {}
        self.trainer_class = trainer_class
        self.trainer_defaults = trainer_defaults or {}
        self.seed_everything_default = seed_everything_default
        self.subclass_mode_model = model_class is None or subclass_mode_model
        self.subclass_mode_data = datamodule_class is None or subclass_mode_data
        self.parser = self._build_parser(parser_kwargs or {}, run)
        self.config = (
            self.parser.parse_args(args) if not isinstance(args, dict) else self.parser.parse_object(args)
        )
        self.subcommand: str | None = self.config.get("subcommand") if run else None
        section = self.config[self.subcommand] if self.subcommand else self.config
        self._section = section
        self._seed(section)
        self.config_init = self.parser.instantiate_classes(self.config)
        init = self.config_init[self.subcommand] if self.subcommand else self.config_init
        self.model: LightningModule = init.get("model")
        self.datamodule: LightningDataModule | None = init.get("data")
        self.trainer = self._instantiate_trainer(init, section)
        if self.subcommand:
            self._run(init)

    # -- parser ----------------------------------------------------------------------------------------
    def _build_parser(self, parser_kwargs: dict[str, Any], run: bool) -> Any:
        jap = _jsonargparse()
        if not run:
            parser = jap.ArgumentParser(**parser_kwargs)
            self._add_arguments(parser, None)
            return parser
        parser = jap.ArgumentParser(description="fulmen: train PyTorch models.", **parser_kwargs)
        # a config before the subcommand holds a section per subcommand: --config cfg.yaml test
        parser.add_argument("-c", "--config", action=jap.ActionConfigFile, help="YAML config file (repeatable).")
        subcommands = parser.add_subcommands(required=True, dest="subcommand")
        self._subparsers: dict[str, Any] = {}
        for name, help_text in _SUBCOMMANDS.items():
            sub = jap.ArgumentParser(description=help_text)
            self._add_arguments(sub, name)
            subcommands.add_subcommand(name, sub, help=help_text)
            self._subparsers[name] = sub
        return parser

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """The subcommands and, for each, the arguments of the Trainer method that the CLI fills itself (the
        model, the data); the method's other arguments (``ckpt_path``, ``verbose`` ...) are options."""
        return {
            "fit": {"model", "train_dataloaders", "val_dataloaders", "datamodule"},
            "validate": {"model", "dataloaders", "datamodule"},
            "test": {"model", "dataloaders", "datamodule"},
            "predict": {"model", "dataloaders", "datamodule"},
        }

    def _add_arguments(self, parser: Any, subcommand: str | None) -> None:
        jap = _jsonargparse()
        parser.add_argument(
            "-c", "--config", action=jap.ActionConfigFile, help="YAML config file (repeatable)."
        )
        parser.add_argument(
            "--seed_everything", type=bool | int, default=self.seed_everything_default,
            help="Seed for every RNG: an int, true (a random seed, recorded in the config) or false.",
        )  # fmt: skip
        parser.add_class_arguments(
            self.trainer_class, "trainer", fail_untyped=False, sub_configs=True, instantiate=False
        )
        # callbacks in trainer_defaults are objects, not parser defaults: they are added to the trainer's
        # callbacks when it is made (as Lightning does), after those from the command line / config
        parser.set_defaults({f"trainer.{k}": v for k, v in self.trainer_defaults.items() if k != "callbacks"})
        self._add_component(
            parser, "model", self.model_class, LightningModule, self.subclass_mode_model, True
        )
        self._add_component(
            parser, "data", self.datamodule_class, LightningDataModule, self.subclass_mode_data, False
        )
        skip = self.subcommands().get(subcommand or "")
        if skip is not None:  # the Trainer method's own options: --ckpt_path, --verbose, --weights_only ...
            parser.add_method_arguments(self.trainer_class, subcommand, skip=skip, fail_untyped=False)
        elif subcommand is not None:
            parser.add_argument(
                "--ckpt_path", type=str | None, default=None, help="Checkpoint: a path, 'last' or 'best'."
            )
        self.add_arguments_to_parser(parser)

    @staticmethod
    def _add_component(
        parser: Any, key: str, cls: Any, base: type, subclass_mode: bool, required: bool
    ) -> None:
        if cls is not None and not subclass_mode:
            parser.add_class_arguments(cls, key, fail_untyped=False, sub_configs=True)
        else:
            parser.add_subclass_arguments(cls or base, key, fail_untyped=False, required=required)

    def add_arguments_to_parser(self, parser: Any) -> None:
        """Override to add your own arguments or links."""

    # -- objects ---------------------------------------------------------------------------------------
    def _seed(self, section: Any) -> None:
        seed = section.get("seed_everything")
        if seed is True:
            seed = seed_everything(None, verbose=False)
            section["seed_everything"] = seed  # the saved config repeats the run exactly
        elif seed is not False and seed is not None:
            seed_everything(int(seed), verbose=False)

    def _instantiate_trainer(self, init: Any, section: Any) -> Trainer:
        kwargs = dict(init.get("trainer") or {})
        callbacks = kwargs.get("callbacks") or []
        callbacks = [callbacks] if isinstance(callbacks, Callback) else list(callbacks)
        if self.save_config_callback is not None and self.subcommand in self.subcommands():
            # the subcommand's own section: `fulmen fit --config <saved file>` repeats the run; first among the
            # callbacks (as in Lightning), so it writes before the others start
            sub = self._subparsers[self.subcommand]
            callbacks.insert(0, self.save_config_callback(sub, section, **self.save_config_kwargs))
        defaults = self.trainer_defaults.get("callbacks") or []
        callbacks += defaults if isinstance(defaults, list) else [defaults]
        kwargs["callbacks"] = callbacks
        return self.trainer_class(**kwargs)

    def _run(self, init: Any) -> None:
        """``before_<subcommand>()``, the subcommand (a method of that name on this class if it has one, else
        the Trainer's), ``after_<subcommand>()``: override any of them."""
        subcommand = self.subcommand
        assert subcommand is not None
        if subcommand == "tune":
            self._tune()
            return
        kwargs: dict[str, Any] = {"model": self.model}
        if self.datamodule is not None:
            kwargs["datamodule"] = self.datamodule
        options = {k: v for k, v in self._section.items() if k in self._method_options(subcommand)}
        kwargs.update(options)
        getattr(self, f"before_{subcommand}", lambda: None)()
        own = getattr(self, subcommand, None)
        if callable(own):
            own(**kwargs)
        elif subcommand == "predict":
            self._predict(kwargs)
        else:
            getattr(self.trainer, subcommand)(**kwargs)
            if subcommand == "fit":
                self._report_fit()
        getattr(self, f"after_{subcommand}", lambda: None)()

    def _method_options(self, subcommand: str) -> set[str]:
        skip = self.subcommands()[subcommand] | {"self"}
        method = getattr(self.trainer_class, subcommand, None)
        return set(inspect.signature(method).parameters) - skip if method is not None else set()

    def _predict(self, kwargs: dict[str, Any]) -> None:
        """Predict through the prediction writers among the callbacks, and say where they wrote; with none,
        say that nothing was kept and how to keep it (rather than compute and silently drop the results)."""
        from fulmen.callbacks.prediction_writer import BasePredictionWriter

        trainer = self.trainer
        writers = [cb for cb in trainer.callbacks if isinstance(cb, BasePredictionWriter)]
        if kwargs.get("return_predictions") is None:
            kwargs["return_predictions"] = not writers
        predictions = trainer.predict(**kwargs)
        if not trainer.is_global_zero:
            return
        for writer in writers:
            where = getattr(writer, "output_dir", None)
            written = getattr(writer, "written", None)
            detail = f" ({len(written)} file{'s' if len(written) != 1 else ''})" if written is not None else ""
            print(f"predictions: written by {type(writer).__name__}" + (f" to {where}{detail}" if where else ""))
        if not writers:
            count = sum(len(p) for p in predictions) if predictions and isinstance(predictions[0], list) else len(predictions or [])
            print(
                f"predictions: {count} batches computed and not saved. To write them, add a prediction writer: "
                "--trainer.callbacks=fulmen.callbacks.PredictionFileWriter --trainer.callbacks.output_dir=DIR"
            )

    def _tune(self) -> None:
        """1.x's ``tune`` subcommand: ``trainer.tune``; the learning-rate finder when nothing else is asked."""
        trainer = self.trainer
        if not trainer.auto_scale_batch_size and not trainer.auto_lr_find:
            trainer.auto_lr_find = True
        result = trainer.tune(self.model, datamodule=self.datamodule)
        if not trainer.is_global_zero:
            return
        if result["scale_batch_size"] is not None:
            print(f"batch size: {result['scale_batch_size']}")
        finder = result["lr_find"]
        if finder is not None:
            print(f"learning rate: {finder.suggestion()}")
            try:
                figure = finder.plot(suggest=True)
            except ImportError:
                print("(install matplotlib for the plot)")
                return
            path = os.path.join(trainer.default_root_dir, "lr_find.png")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            figure.savefig(path)
            print(f"plot: {path}")

    def _report_fit(self) -> None:
        trainer = self.trainer
        if not trainer.is_global_zero:
            return
        lines = []
        cb: Any = trainer.checkpoint_callback
        if cb is not None and getattr(cb, "dirpath", None):
            lines.append(
                f"checkpoints: {cb.dirpath}"
                + (f" (best: {cb.best_model_path})" if cb.best_model_path else "")
            )
        if trainer.loggers:
            lines.append(f"logs: {trainer.log_dir}")
            png = plot_run(trainer.log_dir) if trainer.log_dir and os.path.isdir(trainer.log_dir) else None
            if png:
                lines.append(f"curves: {png}")
        for line in lines:
            print(line)


# -- curves ----------------------------------------------------------------------------------------------
def _read_metrics(log_dir: str) -> dict[str, list[tuple[int, float]]]:
    """Scalar series of a run: metrics.csv (CSVLogger) or TensorBoard event files."""
    import csv

    series: dict[str, list[tuple[int, float]]] = {}
    csv_path = os.path.join(log_dir, "metrics.csv")
    if os.path.exists(csv_path):
        with open(csv_path) as f:
            for row in csv.DictReader(f):
                step = int(row.get("step") or 0)
                for key, value in row.items():
                    if key in ("step", "epoch", "hp_metric") or value in (None, ""):
                        continue
                    series.setdefault(key, []).append((step, float(value)))
        return series
    if any(name.startswith("events.out.tfevents") for name in os.listdir(log_dir)):
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        acc = EventAccumulator(log_dir)
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            if tag not in ("epoch", "hp_metric"):
                series[tag] = [(e.step, e.value) for e in acc.Scalars(tag)]
    return series


def plot_run(log_dir: str) -> str | None:
    """Write ``curves.png`` (training and validation metrics over steps) into ``log_dir``; needs matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    if not os.path.isdir(log_dir):
        raise FileNotFoundError(f"fulmen plot: {log_dir!r} is not a directory.")
    series = _read_metrics(log_dir)
    if not series:
        return None
    groups: dict[str, list[str]] = {}
    for key in sorted(series):
        base = key.removeprefix("train_").removeprefix("val_").removesuffix("_step").removesuffix("_epoch")
        groups.setdefault(base, []).append(key)
    fig, axes = plt.subplots(len(groups), 1, figsize=(7, 2.6 * len(groups)), squeeze=False)
    for ax, (name, keys) in zip(axes[:, 0], groups.items()):
        for key in keys:
            steps, values = zip(*series[key])
            ax.plot(steps, values, label=key, marker="o" if len(steps) < 30 else None, markersize=3)
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.legend()
    fig.tight_layout()
    path = os.path.join(log_dir, "curves.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    """The ``fulmen`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["plot"]:
        if len(argv) != 2:
            raise SystemExit("usage: fulmen plot LOGDIR")
        path = plot_run(argv[1])
        print(path if path else f"No metrics (or no matplotlib) to plot in {argv[1]}.")
        return
    if argv[:1] in (["fit"], ["tune"]) and not any(
        a == "--model" or a.startswith(("--model=", "--model.", "--config", "-c")) for a in argv
    ):
        argv += ["--model", _DEMO_MODEL]
        if not any(a.startswith("--data") for a in argv):
            argv += ["--data", _DEMO_DATA]
        if not any(a.startswith("--trainer.max_epochs") for a in argv):
            argv += ["--trainer.max_epochs", "20"]
        # on stderr: `fulmen fit --print_config > cfg.yaml` must leave a config that `--config cfg.yaml` reads
        print(f"No --model given: the bundled digits demo (fulmen {argv[0]} --help for options).", file=sys.stderr)
    LightningCLI(args=argv)


__all__ = ["LightningCLI", "SaveConfigCallback", "main", "plot_run"]
