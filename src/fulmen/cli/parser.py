"""``LightningArgumentParser``: jsonargparse's parser (imported here when it is installed) with fulmen's
helpers, the short class names it resolves on the command line, and what a config it writes leaves out."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
from typing import Any

from torch.optim import Optimizer

from fulmen.callbacks.callback import Callback
from fulmen.cli.optimizers import LRSchedulerTypeTuple
from fulmen.core.datamodule import LightningDataModule
from fulmen.core.module import LightningModule
from fulmen.trainer.trainer import Trainer
from fulmen.utilities.exceptions import MisconfigurationException

_JSONARGPARSE_AVAILABLE = importlib.util.find_spec("jsonargparse") is not None
_JSONARGPARSE_SIGNATURES_AVAILABLE = _JSONARGPARSE_AVAILABLE and importlib.util.find_spec("docstring_parser") is not None

if _JSONARGPARSE_AVAILABLE:
    from jsonargparse import ActionConfigFile as ActionConfigFile  # the config option LightningCLI adds
    from jsonargparse import ArgumentParser as _ParserBase
    from jsonargparse import Namespace, class_from_function
else:  # the names stay importable; making a parser says what to install
    _ParserBase = object  # type: ignore[assignment,misc]
    Namespace = dict  # type: ignore[assignment,misc]

_AUTOMATIC = "AUTOMATIC"

# Trainer arguments Lightning's Trainer does not have, with their defaults. A config leaves them out while they are
# at their defaults, so that a config written by fulmen (``--print_config``, the saved config.yaml) also loads in
# Lightning's LightningCLI, which refuses keys it does not know.
_FULMEN_ONLY_TRAINER_ARGS = ("matmul_precision", "compile", "auto_scale_batch_size", "auto_lr_find",
                             "stochastic_weight_avg")  # fmt: skip


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
