"""``LightningCLI`` and the ``fulmen`` command: train, validate, test and predict from the command line and
YAML configs (built on jsonargparse, imported when fulmen.cli is).

    fulmen fit --model pkg.MyModel --data pkg.MyData --trainer.max_epochs 5
    fulmen fit --config cfg.yaml --config override.yaml
    fulmen fit --optimizer Adam --optimizer.lr 0.01 --lr_scheduler StepLR --lr_scheduler.step_size 10
    fulmen fit --print_config
    fulmen plot LOGDIR

With no ``--model``, ``fulmen fit`` trains the bundled digits demo.

How a run is made (each step a method to override, in this order):

    parser = init_parser()                      # -c/--config; a sub-parser per subcommand
      add_default_arguments_to_parser(parser)   # --seed_everything
      add_core_arguments_to_parser(parser)      # --trainer.*, --model.*, --data.*
      add_arguments_to_parser(parser)           # yours: links, callbacks, optimizers ...
      --optimizer / --lr_scheduler              # unless you added your own, or auto_configure_optimizers=False
    parse_arguments(parser, args)               # then a --ckpt_path's hyperparameters, if any
    before_instantiate_classes()
    instantiate_classes()                       # model, data (recording their config), trainer
    before_<subcommand>(); <subcommand>(); after_<subcommand>()
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import importlib
import importlib.util
import inspect
import json
import os
import sys
from collections.abc import Callable, Iterable
from types import MethodType
from typing import Any, Union

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler

from fulmen import __version__
from fulmen.callbacks.callback import Callback
from fulmen.core.datamodule import LightningDataModule
from fulmen.core.module import LightningModule
from fulmen.trainer.trainer import Trainer
from fulmen.utilities import checkpoint_io
from fulmen.utilities.cloud_io import get_filesystem as get_filesystem
from fulmen.utilities.curves import plot_run
from fulmen.utilities.exceptions import MisconfigurationException
from fulmen.utilities.imports import RequirementCache as RequirementCache
from fulmen.utilities.model_helpers import is_overridden
from fulmen.utilities.parsing import given_init_config
from fulmen.utilities.rank_zero import rank_zero_warn
from fulmen.utilities.seed import seed_everything

_JSONARGPARSE_AVAILABLE = importlib.util.find_spec("jsonargparse") is not None
_JSONARGPARSE_SIGNATURES_AVAILABLE = _JSONARGPARSE_AVAILABLE and importlib.util.find_spec("docstring_parser") is not None

if _JSONARGPARSE_AVAILABLE:
    from jsonargparse import ActionConfigFile, Namespace, class_from_function
    from jsonargparse import ArgumentParser as _ParserBase
else:  # the names stay importable; making a parser says what to install
    _ParserBase = object  # type: ignore[assignment,misc]
    Namespace = dict  # type: ignore[assignment,misc]

_TUNE_HELP = (
    "Find the batch size (--trainer.auto_scale_batch_size) and/or the learning rate (--trainer.auto_lr_find, "
    "the default); the learning-rate plot is written to lr_find.png."
)
_DEMO_MODEL = "fulmen.demos.digits.DigitsClassifier"
_DEMO_DATA = "fulmen.demos.digits.DigitsDataModule"
_AUTOMATIC = "AUTOMATIC"

# Trainer arguments Lightning's Trainer does not have, with their defaults. A config leaves them out while they are
# at their defaults, so that a config written by fulmen (``--print_config``, the saved config.yaml) also loads in
# Lightning's LightningCLI, which refuses keys it does not know.
_FULMEN_ONLY_TRAINER_ARGS = ("matmul_precision", "compile", "auto_scale_batch_size", "auto_lr_find",
                             "stochastic_weight_avg")  # fmt: skip

# Set while `fulmen ...` (main) runs the CLI on its command line: its `args` are then the command line itself
_ARGS_ARE_THE_COMMAND_LINE: contextvars.ContextVar[bool] = contextvars.ContextVar("_args_are_the_command_line",
                                                                                 default=False)  # fmt: skip


class ReduceLROnPlateau(torch.optim.lr_scheduler.ReduceLROnPlateau):
    """torch's ``ReduceLROnPlateau`` that also names the metric it watches, so that
    ``--lr_scheduler=ReduceLROnPlateau --lr_scheduler.monitor=val_loss`` is complete on the command line."""

    def __init__(self, optimizer: Optimizer, monitor: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(optimizer, *args, **kwargs)
        self.monitor = monitor


# types for model arguments the CLI fills: `optimizer: OptimizerCallable = torch.optim.Adam` takes
# `--model.optimizer=SGD --model.optimizer.lr=0.1` and is called with the parameters in configure_optimizers
LRSchedulerTypeTuple = (LRScheduler, ReduceLROnPlateau)
LRSchedulerTypeUnion = Union[LRScheduler, ReduceLROnPlateau]
LRSchedulerType = Union[type[LRScheduler], type[ReduceLROnPlateau]]
OptimizerCallable = Callable[[Iterable], Optimizer]
LRSchedulerCallable = Callable[[Optimizer], Union[LRScheduler, ReduceLROnPlateau]]


def _import_object(path: str) -> Any:
    module_name, _, name = path.rpartition(".")
    if not module_name:
        raise ValueError(f"{path!r} is not a dotted import path (e.g. 'torch.optim.Adam').")
    return getattr(importlib.import_module(module_name), name)


def instantiate_class(args: Any, init: dict[str, Any]) -> Any:
    """Build ``init["class_path"]`` with ``init["init_args"]``, ``args`` (one value, or a tuple) first:
    ``instantiate_class(self.parameters(), {"class_path": "torch.optim.Adam", "init_args": {"lr": 0.1}})``."""
    if not isinstance(init, dict) or "class_path" not in init:
        raise ValueError(
            f"instantiate_class(args, init): init must be a dict with 'class_path' (and 'init_args'), got {init!r}."
        )
    positional = args if isinstance(args, tuple) else (args,)
    return _import_object(init["class_path"])(*positional, **dict(init.get("init_args") or {}))


def _plain(value: Any) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, bool | int | float | str)


def _configurable(value: Any) -> bool:
    """Whether the parser can take ``value`` as a config value and record it as such (a path, an enum member
    and a dtype are written by name)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _configurable(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_configurable(v) for v in value)
    return _plain(value) or isinstance(value, os.PathLike | enum.Enum | torch.dtype | torch.device)


def instantiate_module(class_type: type, config: dict[str, Any]) -> Any:
    """Rebuild a model / data module from the config LightningCLI recorded in its hyperparameters (what
    ``load_from_checkpoint`` runs for a checkpoint written under the CLI): class paths and dotted names become
    objects again through the same parser; values that already are objects are passed as they are."""
    plain = {k: v for k, v in config.items() if _plain(v)}
    objects = {k: v for k, v in config.items() if k not in plain}
    params = inspect.signature(class_type).parameters
    takes_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    extra = {k: plain.pop(k) for k in list(plain) if k not in params} if takes_kwargs else {}
    parser = LightningArgumentParser(exit_on_error=False)
    parser.add_class_arguments(class_type, "module", fail_untyped=False, instantiate=False, skip=set(objects))
    cfg = parser.parse_object({"module": plain})
    kwargs = dict(parser.instantiate(cfg)["module"])
    with given_init_config(class_type, {**config, "_instantiator": f"{__name__}.instantiate_module"}):
        return class_type(**kwargs, **extra, **objects)


def _register_short_names() -> None:
    """Import fulmen's callbacks, loggers, profilers and strategies, so that a short name on the command line
    (``--trainer.callbacks+=LearningRateMonitor``, ``--trainer.logger=TensorBoardLogger``) finds its class:
    the parser resolves one among the subclasses defined so far."""
    for package in ("callbacks", "loggers", "profilers", "strategies", "accelerators"):
        module = importlib.import_module(f"fulmen.{package}")
        for name in getattr(module, "__all__", ()):
            # a class whose optional package is missing stays out of the short names
            with contextlib.suppress(ImportError):
                getattr(module, name)


class LightningArgumentParser(_ParserBase):
    """jsonargparse's ArgumentParser with fulmen's helpers: ``add_lightning_class_args`` (a callback, model,
    data module or trainer class), ``add_optimizer_args`` and ``add_lr_scheduler_args``. Environment variables
    are named ``PL_<SUBCOMMAND>__<KEY>`` with ``default_env=True``."""

    def __init__(
        self, *args: Any, description: str = "Lightning Trainer command line tool", env_prefix: str = "PL",
        default_env: bool = False, **kwargs: Any,
    ) -> None:  # fmt: skip
        if not _JSONARGPARSE_AVAILABLE:
            raise ModuleNotFoundError(
                "The fulmen command line needs jsonargparse: pip install 'fulmen[cli]' (or pip install "
                "'jsonargparse[signatures]')."
            )
        super().__init__(*args, description=description, env_prefix=env_prefix, default_env=default_env, **kwargs)
        self.callback_keys: list[str] = []
        self.optimizers: dict[str, tuple[Any, str]] = {}
        self.lr_schedulers: dict[str, tuple[Any, str]] = {}

    def dump(self, cfg: Any, *args: Any, **kwargs: Any) -> str:
        """The config as text (``--print_config``, the saved config.yaml), without the fulmen-only trainer
        arguments left at their defaults: see ``_FULMEN_ONLY_TRAINER_ARGS``."""
        return super().dump(_without_default_fulmen_args(cfg), *args, **kwargs)

    def add_lightning_class_args(
        self, lightning_class: Any, nested_key: str, subclass_mode: bool = False, required: bool = True
    ) -> list[str]:
        """Arguments for a Callback, LightningModule, LightningDataModule or Trainer class (or a function
        returning one) under ``nested_key``; a callback given this way joins the trainer's callbacks."""
        bases = (Callback, LightningModule, LightningDataModule, Trainer)
        if callable(lightning_class) and not isinstance(lightning_class, type):
            lightning_class = class_from_function(lightning_class)
        if not (isinstance(lightning_class, type) and issubclass(lightning_class, bases)):
            raise MisconfigurationException(
                f"add_lightning_class_args({lightning_class!r}, {nested_key!r}): expected a function returning, or a "
                f"subclass of, one of {[b.__name__ for b in bases]}."
            )
        if issubclass(lightning_class, Callback):
            self.callback_keys.append(nested_key)
        if subclass_mode:
            return self.add_subclass_arguments(
                lightning_class, nested_key, fail_untyped=False, required=required
            )
        return self.add_class_arguments(
            lightning_class, nested_key, fail_untyped=False, sub_configs=True,
            instantiate=not issubclass(lightning_class, Trainer),
        )  # fmt: skip

    def add_optimizer_args(
        self, optimizer_class: Any = (Optimizer,), nested_key: str = "optimizer", link_to: str = _AUTOMATIC
    ) -> None:
        """``--<nested_key>`` for an optimizer: one class (its arguments are options) or a tuple of base classes
        (``--optimizer=Adam --optimizer.lr=0.1``). ``link_to="AUTOMATIC"``: the model's ``configure_optimizers``
        is replaced by one using it; ``link_to="model.arg"``: the model receives it as a dict
        (``{"class_path": ..., "init_args": ...}``, see :func:`instantiate_class`)."""
        self._add_optimization_args(optimizer_class, Optimizer, nested_key, link_to, {"params"}, self.optimizers)

    def add_lr_scheduler_args(
        self, lr_scheduler_class: Any = LRSchedulerTypeTuple, nested_key: str = "lr_scheduler",
        link_to: str = _AUTOMATIC,
    ) -> None:  # fmt: skip
        """``--<nested_key>`` for a learning-rate scheduler, as :meth:`add_optimizer_args`."""
        self._add_optimization_args(
            lr_scheduler_class, LRSchedulerTypeTuple, nested_key, link_to, {"optimizer"}, self.lr_schedulers
        )

    def _add_optimization_args(
        self, given: Any, base: Any, nested_key: str, link_to: str, skip: set[str], registry: dict[str, Any]
    ) -> None:
        classes = given if isinstance(given, tuple) else (given,)
        if not all(isinstance(c, type) and issubclass(c, base) for c in classes):
            raise MisconfigurationException(
                f"--{nested_key}: {given!r} is not a subclass (or a tuple of subclasses) of "
                f"{base.__name__ if isinstance(base, type) else [b.__name__ for b in base]}."
            )
        if isinstance(given, tuple):
            self.add_subclass_arguments(given, nested_key, fail_untyped=False, instantiate=False, skip=skip)
        else:
            self.add_class_arguments(given, nested_key, fail_untyped=False, instantiate=False, skip=skip,
                                     sub_configs=True)  # fmt: skip
        registry[nested_key] = (given, link_to)


def _without_default_fulmen_args(cfg: Any) -> Any:
    trainer = cfg.get("trainer") if isinstance(cfg, Namespace) else None
    if not isinstance(trainer, Namespace):
        return cfg
    defaults = inspect.signature(Trainer).parameters
    at_default = [k for k in _FULMEN_ONLY_TRAINER_ARGS if k in trainer and _same(trainer[k], defaults[k].default)]
    if not at_default:
        return cfg
    cfg = cfg.clone()
    for key in at_default:
        del cfg["trainer"][key]
    return cfg


def _same(value: Any, default: Any) -> bool:
    return type(value) is type(default) and bool(value == default)


def _class_path_config(class_type: Any, value: Any) -> dict[str, Any] | None:
    """An optimizer / scheduler group's parsed value as ``{"class_path": ..., "init_args": {...}}``."""
    if value is None:
        return None
    data = value.as_dict() if hasattr(value, "as_dict") else dict(value)
    if "class_path" in data:
        return {"class_path": data["class_path"], "init_args": dict(data.get("init_args") or {})}
    return {"class_path": f"{class_type.__module__}.{class_type.__qualname__}", "init_args": data}


class _RecordingInstantiator:
    """Builds the config's model and data module, each inside :func:`given_init_config`: their
    ``save_hyperparameters()`` then record the config (class paths, dotted names) rather than the objects,
    so a checkpoint rebuilds them (:func:`instantiate_module`)."""

    def __init__(self, records: list[tuple[str, type, dict[str, Any]] | None]) -> None:
        self.records = [r for r in records if r is not None]

    def __call__(
        self, class_type: type, *args: Any, applied_instantiation_links: dict[str, Any] | None = None, **kwargs: Any
    ) -> Any:
        for i, (prefix, cls, record) in enumerate(self.records):
            if class_type is cls:
                del self.records[i]  # once: a nested module of the same class is not the configured one
                # values linked in at instantiation (`apply_on="instantiate"`) are not in the parsed config
                for target, value in (applied_instantiation_links or {}).items():
                    if target.startswith(prefix):
                        _set_nested(record, target[len(prefix):].split("."), value)
                with given_init_config(class_type, record):
                    return class_type(*args, **kwargs)
        return class_type(*args, **kwargs)


def _set_nested(config: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        config = config.setdefault(key, {})
    config[keys[-1]] = value.as_dict() if hasattr(value, "as_dict") else value


class SaveConfigCallback(Callback):
    """Writes the run's full config next to its logs, so ``--config <that file>`` repeats the run."""

    def __init__(
        self, parser: Any, config: Any, config_filename: str = "config.yaml", overwrite: bool = False,
        multifile: bool = False, save_to_log_dir: bool = True,
    ) -> None:  # fmt: skip
        if not save_to_log_dir and type(self).save_config is SaveConfigCallback.save_config:
            raise ValueError(
                "`save_to_log_dir=False` only makes sense with a `save_config` of your own: SaveConfigCallback then "
                "writes nothing itself. Subclass it and override `save_config(trainer, pl_module, stage)` to save "
                "the config elsewhere (e.g. to a logger)."
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
        record: dict[str, Any] = {"_instantiator": f"{__name__}.instantiate_module"}
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
        """1.x's ``tune`` subcommand: ``trainer.tune``; the learning-rate finder when neither finder flag is
        given (1.x then ran nothing at all: a ``tune`` that tunes nothing is not what anyone asks for)."""
        trainer = self.trainer
        if trainer.auto_scale_batch_size or trainer.auto_lr_find:
            result = trainer.tune(self.model, datamodule=self.datamodule)
        else:  # the flags are the Trainer's read-only configuration: run the finder directly
            from fulmen.tuner import Tuner

            result = {"scale_batch_size": None, "lr_find": Tuner(trainer).lr_find(self.model, datamodule=self.datamodule)}
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


def main(argv: list[str] | None = None) -> None:
    """The ``fulmen`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["consolidate"]:
        # --no-weights-only: a trusted directory whose hyperparameters hold objects (as upgrade_checkpoint takes it)
        trusted = "--no-weights-only" in argv
        argv = [a for a in argv if a != "--no-weights-only"]
        if len(argv) != 3:
            raise SystemExit("usage: fulmen consolidate SHARDED_CHECKPOINT_DIR OUTPUT.ckpt [--no-weights-only]")
        from fulmen.utilities.distributed_checkpoint import consolidate

        checkpoint = consolidate(argv[1], argv[2], weights_only=not trusted)
        print(f"Wrote {argv[2]}: {len(checkpoint.get('state_dict', {}))} tensors of the model, "
              f"{len(checkpoint.get('optimizer_states', []))} optimizer state(s), from {argv[1]}.")  # fmt: skip
        return
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
    # the CLI reads the command line as rewritten (the demo's model added), as if it had been typed
    token = _ARGS_ARE_THE_COMMAND_LINE.set(True)
    try:
        LightningCLI(args=argv)
    finally:
        _ARGS_ARE_THE_COMMAND_LINE.reset(token)


__all__ = [
    "LRSchedulerCallable", "LRSchedulerType", "LRSchedulerTypeTuple", "LRSchedulerTypeUnion", "LightningArgumentParser",
    "LightningCLI", "OptimizerCallable", "ReduceLROnPlateau", "SaveConfigCallback", "instantiate_class",
    "instantiate_module", "main", "plot_run",
]  # fmt: skip
