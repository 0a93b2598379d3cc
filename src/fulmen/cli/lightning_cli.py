"""``LightningCLI``: builds the parser, parses the command line / configs, makes the model, the data module
and the Trainer, and runs a subcommand; every step a method a subclass can override."""

from __future__ import annotations

import contextvars
import inspect
import json
import os
import sys
from collections.abc import Callable
from types import MethodType
from typing import Any

from torch.optim import Optimizer

from fulmen import __version__
from fulmen.callbacks.callback import Callback
from fulmen.checkpoint import files as checkpoint_io
from fulmen.cli.instantiate import (
    _INSTANTIATOR,
    _configurable,
    _import_object,
    _RecordingInstantiator,
    instantiate_class,
)
from fulmen.cli.optimizers import LRSchedulerTypeTuple, ReduceLROnPlateau, _class_path_config
from fulmen.cli.parser import (
    _AUTOMATIC,
    _JSONARGPARSE_AVAILABLE,
    LightningArgumentParser,
    Namespace,
    _register_short_names,
    _without_default_fulmen_args,
)
from fulmen.cli.save_config import SaveConfigCallback
from fulmen.cli.subcommands import predict_and_report, report_fit, tune_and_report
from fulmen.core.datamodule import LightningDataModule
from fulmen.core.module import LightningModule
from fulmen.trainer.trainer import Trainer
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.model_helpers import is_overridden
from fulmen.utilities.rank_zero import rank_zero_warn
from fulmen.utilities.seed import seed_everything

if _JSONARGPARSE_AVAILABLE:
    from fulmen.cli.parser import ActionConfigFile

_TUNE_HELP = (
    "Find the batch size (--trainer.auto_scale_batch_size) and/or the learning rate (--trainer.auto_lr_find, "
    "the default); the learning-rate plot is written to lr_find.png."
)

# Set while `fulmen ...` (main) runs the CLI on its command line: its `args` are then the command line itself
_ARGS_ARE_THE_COMMAND_LINE: contextvars.ContextVar[bool] = contextvars.ContextVar("_args_are_the_command_line",
                                                                                 default=False)  # fmt: skip


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
        parser_kwargs: dict[str, Any] | dict[str, dict[str, Any]] | None = None,
        parser_class: type[LightningArgumentParser] = LightningArgumentParser,
        subclass_mode_model: bool = False,
        subclass_mode_data: bool = False,
        args: list[str] | dict[str, Any] | Any | None = None,
        run: bool = True,
        auto_configure_optimizers: bool = True,
        load_from_checkpoint_support: bool = True,
    ) -> None:
        self.model_class = model_class
        self.datamodule_class = datamodule_class
        self.save_config_callback = save_config_callback
        self.save_config_kwargs = save_config_kwargs or {}
        self.trainer_class = trainer_class
        self.trainer_defaults = trainer_defaults or {}
        self.seed_everything_default = seed_everything_default
        self.parser_class = parser_class
        self.subclass_mode_model = model_class is None or subclass_mode_model
        self.subclass_mode_data = datamodule_class is None or subclass_mode_data
        self.auto_configure_optimizers = auto_configure_optimizers
        self.load_from_checkpoint_support = load_from_checkpoint_support
        _register_short_names()
        main_kwargs, subparser_kwargs = self._split_parser_kwargs(parser_kwargs or {}, run)
        self.setup_parser(run, main_kwargs, subparser_kwargs)
        self.parse_arguments(self.parser, args)
        self.subcommand: str | None = self.config.get("subcommand") if run else None
        self._section = self.config[self.subcommand] if self.subcommand else self.config
        self._seed(self._section)
        self.before_instantiate_classes()
        self.instantiate_classes()
        self.after_instantiate_classes()
        if self.subcommand:
            self._run(self.subcommand)

    # -- parser ----------------------------------------------------------------------------------------
    def _split_parser_kwargs(
        self, parser_kwargs: dict[str, Any], run: bool
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        """``parser_kwargs`` for the main parser, and per subcommand (``{"fit": {...}}`` entries; the
        common entries apply to every sub-parser too, but for ``default_config_files``, which hold a section
        per subcommand)."""
        names = set(self.subcommands()) | {"tune"}
        main = {k: v for k, v in parser_kwargs.items() if k not in names}
        if not run:
            return main, {}
        common = {k: v for k, v in main.items() if k not in ("default_config_files", "description")}
        return main, {name: {**common, **parser_kwargs.get(name, {})} for name in names}

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """A parser with ``-c/--config`` (and ``--print_config``, whose output starts with fulmen's version)."""
        parser = self.parser_class(**kwargs)
        parser.add_argument("-c", "--config", action=ActionConfigFile, help="YAML config file (repeatable).")
        if hasattr(parser, "dump_header"):
            parser.dump_header = [f"fulmen=={__version__}"]
        return parser

    def setup_parser(
        self, add_subcommands: bool, main_kwargs: dict[str, Any], subparser_kwargs: dict[str, dict[str, Any]]
    ) -> None:
        self.parser = self.init_parser(**main_kwargs)
        if not add_subcommands:
            self._add_arguments(self.parser, None)
            return
        # a config before the subcommand holds a section per subcommand: --config cfg.yaml test
        subcommands = self.parser.add_subcommands(required=True, dest="subcommand")
        self._subparsers: dict[str, Any] = {}
        # 1.x's `tune` joins the default subcommands; a subclass that lists its own gets those only
        names = [*self.subcommands()] + (["tune"] if type(self).subcommands is LightningCLI.subcommands else [])
        for name in names:
            help_text = _TUNE_HELP if name == "tune" else self._method_help(name)
            sub = self.init_parser(**{"description": help_text, **subparser_kwargs.get(name, {})})
            self._add_arguments(sub, name)
            subcommands.add_subcommand(name, sub, help=help_text)
            self._subparsers[name] = sub

    def _trainer_type(self) -> type:
        return self.trainer_class if isinstance(self.trainer_class, type) else Trainer

    def _method_help(self, subcommand: str) -> str:
        doc = inspect.getdoc(getattr(self._trainer_type(), subcommand, None)) or ""
        return doc.strip().split("\n\n")[0].replace("\n", " ")

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

    def _add_arguments(self, parser: LightningArgumentParser, subcommand: str | None) -> None:
        self.add_default_arguments_to_parser(parser)
        self.add_core_arguments_to_parser(parser)
        skip = self.subcommands().get(subcommand or "")
        if skip is not None:  # the Trainer method's own options: --ckpt_path, --verbose, --weights_only ...
            parser.add_method_arguments(self._trainer_type(), subcommand, skip=skip, fail_untyped=False)
        elif subcommand is not None:
            parser.add_argument(
                "--ckpt_path", type=str | None, default=None, help="Checkpoint: a path, 'last' or 'best'."
            )
        self.add_arguments_to_parser(parser)
        if self.auto_configure_optimizers:
            if not parser.optimizers:
                parser.add_optimizer_args((Optimizer,))
            if not parser.lr_schedulers:
                parser.add_lr_scheduler_args(LRSchedulerTypeTuple)
        self.link_optimizers_and_lr_schedulers(parser)

    def add_default_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--seed_everything", type=bool | int, default=self.seed_everything_default,
            help="Seed for every RNG: an int, true (a random seed, recorded in the config) or false.",
        )  # fmt: skip

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """``--trainer.*``, ``--model.*`` and ``--data.*`` (a data module is optional)."""
        parser.add_lightning_class_args(self.trainer_class, "trainer")
        trainer_type = self._trainer_type()
        takes_callbacks = "callbacks" in inspect.signature(self.trainer_class).parameters
        defaults = {k: v for k, v in self.trainer_defaults.items() if k != "callbacks"}
        given = self.trainer_defaults.get("callbacks")
        given_list = given if isinstance(given, list) else ([] if given is None else [given])
        if given_list and not takes_callbacks:
            rank_zero_warn(
                f"`{getattr(trainer_type, '__name__', trainer_type)}` class does not expose the `callbacks` argument, "
                "so trainer_defaults['callbacks'] are not used."
            )
        # callback objects join the trainer's callbacks when it is made (after those of the command line);
        # class_path dicts are parser defaults like any other, so they show in the saved config
        configs = [c for c in given_list if not isinstance(c, Callback)]
        if configs and takes_callbacks:
            defaults["callbacks"] = configs
        parser.set_defaults({f"trainer.{k}": v for k, v in defaults.items()})
        self._add_component(parser, "model", self.model_class, LightningModule, self.subclass_mode_model, True)
        self._add_component(
            parser, "data", self.datamodule_class, LightningDataModule, self.subclass_mode_data, False
        )

    @staticmethod
    def _add_component(
        parser: LightningArgumentParser, key: str, cls: Any, base: type, subclass_mode: bool, required: bool
    ) -> None:
        if cls is not None and not subclass_mode:
            parser.add_lightning_class_args(cls, key)
        else:
            parser.add_lightning_class_args(cls or base, key, subclass_mode=True, required=required)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        """Override to add your own arguments or links."""

    @staticmethod
    def link_optimizers_and_lr_schedulers(parser: LightningArgumentParser) -> None:
        """An optimizer / scheduler given ``link_to="model.x"`` reaches the model as a class-path dict."""
        for key, (class_type, link_to) in {**parser.optimizers, **parser.lr_schedulers}.items():
            if link_to == _AUTOMATIC:
                continue
            parser.link_arguments(key, link_to, compute_fn=lambda value, c=class_type: _class_path_config(c, value))

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        if args is not None and len(sys.argv) > 1 and not _ARGS_ARE_THE_COMMAND_LINE.get():
            rank_zero_warn(
                f"LightningCLI's args parameter is given ({args!r}) and so are command-line arguments "
                f"(sys.argv[1:]={sys.argv[1:]}): only args is parsed."
            )
        if isinstance(args, dict | Namespace):
            config = parser.parse_object(args)
        else:
            config = parser.parse_args(args)
        # cli.config is what the saved config.yaml holds (programs compare the two): no fulmen-only trainer
        # arguments left at their defaults, which the Trainer then takes as defaults anyway
        subcommand = config.get("subcommand")
        if subcommand and isinstance(config.get(subcommand), Namespace):
            config[subcommand] = _without_default_fulmen_args(config[subcommand])
        self.config = _without_default_fulmen_args(config)
        self._parse_ckpt_path(parser)

    def _parse_ckpt_path(self, parser: LightningArgumentParser) -> None:
        """``fit / validate / test / predict --ckpt_path=X``: the model is built with the checkpoint's
        hyperparameters (its weights need that model), over what the command line gave."""
        subcommand = self.config.get("subcommand")
        section = self.config.get(subcommand) if subcommand else None
        path = section.get("ckpt_path") if section is not None else None
        if not self.load_from_checkpoint_support or not path or path in ("last", "best", "hpc", "registry"):
            return
        if section is None or not os.path.isfile(path):
            return  # the Trainer names the missing file
        # read as the Trainer will read it (--weights_only; by default torch's, which refuses objects with an
        # error naming them): a file the run is told to trust may hold objects among its hyperparameters
        # (Lightning reads it with weights_only=True here whatever the option says, so it fails)
        checkpoint = checkpoint_io.load(path, map_location="cpu", weights_only=section.get("weights_only"))
        hparams = dict(checkpoint.get("hyper_parameters") or {})
        hparams.pop("_instantiator", None)
        # an object (a module, a function ... saved by a model not built by this CLI) cannot be a config value:
        # the parser would let it through, but the recorded config (config.yaml, the next checkpoint) would
        # hold its repr. The command line's value is kept for it, and the user is told
        objects = sorted(str(k) for k, v in hparams.items() if not _configurable(v))
        if objects:
            rank_zero_warn(
                f"--ckpt_path={path}: the checkpoint's hyperparameters {', '.join(objects)} are objects, which a "
                "config cannot hold: the model gets the command line's values for them (its weights still come "
                "from the checkpoint). To restore the model exactly as saved, use "
                "Model.load_from_checkpoint(path, weights_only=False)."
            )
            hparams = {k: v for k, v in hparams.items() if str(k) not in objects}
        if not hparams:
            return
        class_path = hparams.pop("_class_path", None)
        model: dict[str, Any] = {"class_path": class_path, "init_args": hparams} if class_path else hparams
        try:
            self.config = parser.parse_object({subcommand: {"model": model}}, self.config)
        except SystemExit:
            sys.stderr.write("Parsing of ckpt_path hyperparameters failed: see the error above.\n")
            raise

    # -- objects ---------------------------------------------------------------------------------------
    def _seed(self, section: Any) -> None:
        seed = section.get("seed_everything")
        if seed is True:
            seed = seed_everything(None, verbose=False)
            section["seed_everything"] = seed  # the saved config repeats the run exactly
        elif seed is not False and seed is not None:
            seed_everything(int(seed), verbose=False)

    def before_instantiate_classes(self) -> None:
        """Override to change ``self.config`` before the objects are made."""

    def after_instantiate_classes(self) -> None:
        """Override to run code once ``self.model``, ``self.datamodule`` and ``self.trainer`` exist, before the
        subcommand runs."""

    def instantiate_classes(self) -> None:
        """Make the model and data module (each recording the config that built it, see
        :func:`instantiate_module`), then the trainer."""
        parser = self._current_parser()
        section = self._section
        plain = json.loads(parser.dump(section, format="json", skip_validation=True, skip_link_targets=False))
        instantiator = _RecordingInstantiator([
            self._component_record("model", self.model_class, plain.get("model"), self.subclass_mode_model),
            self._component_record("data", self.datamodule_class, plain.get("data"), self.subclass_mode_data),
        ])  # fmt: skip
        init = parser.instantiate(
            section, instantiators=[(instantiator, LightningModule, True), (instantiator, LightningDataModule, True)]
        )
        self.config_init = self.config.clone() if self.subcommand else init
        if self.subcommand:
            self.config_init[self.subcommand] = init
        self.model: LightningModule = init.get("model")
        self.datamodule: LightningDataModule | None = init.get("data")
        self._configure_optimizers_from(parser, init)
        self.trainer = self.instantiate_trainer()

    @staticmethod
    def _component_record(
        key: str, given: Any, value: Any, subclass_mode: bool
    ) -> tuple[str, type, dict[str, Any]] | None:
        """The class the config builds for ``model`` / ``data``, and what its hyperparameters record."""
        if value is None and not subclass_mode:
            value = {}  # a model without arguments
        if not isinstance(value, dict):
            return None
        record: dict[str, Any] = {"_instantiator": _INSTANTIATOR}
        if subclass_mode and "class_path" in value:
            try:
                cls = _import_object(value["class_path"])
            except (ImportError, AttributeError, ValueError):
                return None
            record.update({**dict(value.get("init_args") or {}), **dict(value.get("dict_kwargs") or {})})
            record["_class_path"] = value["class_path"]
            return f"{key}.init_args.", cls, record
        if not isinstance(given, type):  # a function that returns the model: nothing to rebuild it from
            return None
        return f"{key}.", given, {**record, **value}

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """The Trainer from the parsed ``trainer`` section, ``kwargs`` over it: ``callbacks`` are added to
        those of the config, after the config-saving callback and before ``trainer_defaults``'s."""
        init = self.config_init[self.subcommand] if self.subcommand else self.config_init
        config = dict(init.get("trainer") or {})
        extra = kwargs.pop("callbacks", None) or []
        config.update(kwargs)
        callbacks = config.get("callbacks") or []
        callbacks = [callbacks] if isinstance(callbacks, Callback) else list(callbacks)
        for key in getattr(self._current_parser(), "callback_keys", ()):
            callbacks.append(init[key])
        if self.save_config_callback is not None and not config.get("fast_dev_run") and self.subcommand != "tune":
            # the subcommand's own section: `fulmen fit --config <saved file>` repeats the run; first among the
            # callbacks (as in Lightning), so it writes before the others start. Not for a fast_dev_run, which
            # is a smoke test, not a run to repeat
            callbacks.insert(
                0, self.save_config_callback(self._current_parser(), self._section, **self.save_config_kwargs)
            )
        defaults = self.trainer_defaults.get("callbacks") or []
        defaults = defaults if isinstance(defaults, list) else [defaults]
        callbacks += [c for c in defaults if isinstance(c, Callback)]
        callbacks += extra if isinstance(extra, list) else [extra]
        if "callbacks" in inspect.signature(self.trainer_class).parameters:
            config["callbacks"] = callbacks
        return self.trainer_class(**config)

    def _current_parser(self) -> LightningArgumentParser:
        return self._subparsers[self.subcommand] if self.subcommand else self.parser

    # -- optimizers ------------------------------------------------------------------------------------
    @staticmethod
    def configure_optimizers(
        lightning_module: LightningModule, optimizer: Optimizer, lr_scheduler: Any = None
    ) -> Any:
        """What the model's ``configure_optimizers`` returns when ``--optimizer`` is given: override to change it."""
        if lr_scheduler is None:
            return optimizer
        if isinstance(lr_scheduler, ReduceLROnPlateau):
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": lr_scheduler, "monitor": lr_scheduler.monitor}}
        return [optimizer], [lr_scheduler]

    def _configure_optimizers_from(self, parser: LightningArgumentParser, init: Any) -> None:
        """With an optimizer from ``--optimizer`` (link_to="AUTOMATIC"), the model's ``configure_optimizers``
        builds it (and the scheduler) on the model's parameters."""
        automatic = [k for k, (_, link) in parser.optimizers.items() if link == _AUTOMATIC]
        schedulers = [k for k, (_, link) in parser.lr_schedulers.items() if link == _AUTOMATIC]
        if len(automatic) > 1 or len(schedulers) > 1:
            raise MisconfigurationException(
                f"Optimizer arguments {automatic} / scheduler arguments {schedulers} all have link_to='AUTOMATIC'; at "
                "most one of each can configure the model. Give the others link_to='model.<argument>'."
            )
        if not automatic or self.model is None:
            return
        section = self._section
        opt_key, sch_key = automatic[0], (schedulers[0] if schedulers else None)
        optimizer = _class_path_config(parser.optimizers[opt_key][0], section.get(opt_key))
        if optimizer is None:
            if sch_key and section.get(sch_key) is not None:
                rank_zero_warn(f"--{sch_key} is used together with --{opt_key} only: the model's own "
                               "configure_optimizers is kept.")  # fmt: skip
            return
        scheduler = _class_path_config(parser.lr_schedulers[sch_key][0], section.get(sch_key)) if sch_key else None
        model = self.model
        if is_overridden("configure_optimizers", model):
            rank_zero_warn(
                f"`{type(model).__name__}.configure_optimizers` will be overridden by "
                f"`{type(self).__name__}.configure_optimizers`."
            )
        cli_configure = self.configure_optimizers

        def configure_optimizers(module: LightningModule) -> Any:
            opt = instantiate_class(module.parameters(), optimizer)
            sch = instantiate_class(opt, scheduler) if scheduler is not None else None
            return cli_configure(module, opt, sch) if sch is not None else cli_configure(module, opt)

        model.configure_optimizers = MethodType(configure_optimizers, model)  # type: ignore[method-assign]

    # -- subcommands -----------------------------------------------------------------------------------
    def _run(self, subcommand: str) -> None:
        """``before_<subcommand>()``, the subcommand (a method of that name on this class if it has one, else
        the Trainer's), ``after_<subcommand>()``: override any of them."""
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
        method = getattr(self._trainer_type(), subcommand, None)
        return set(inspect.signature(method).parameters) - skip if method is not None else set()

    def _predict(self, kwargs: dict[str, Any]) -> None:
        """Predict through the prediction writers among the callbacks, and say where they wrote."""
        predict_and_report(self.trainer, kwargs)

    def _tune(self) -> None:
        """1.x's ``tune`` subcommand: ``trainer.tune``, or the learning-rate finder when no finder flag is given."""
        tune_and_report(self.trainer, self.model, self.datamodule)

    def _report_fit(self) -> None:
        report_fit(self.trainer)

