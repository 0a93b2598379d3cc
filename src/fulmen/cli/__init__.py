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

# The package's modules, by purpose: parser (LightningArgumentParser, jsonargparse's names), optimizers
# (ReduceLROnPlateau, the optimizer / scheduler types), instantiate (instantiate_class, instantiate_module),
# save_config (SaveConfigCallback), lightning_cli (LightningCLI), subcommands (what predict / tune / fit print),
# command (the `fulmen` console script, main). Every name below is also one the single-module fulmen.cli had.
from fulmen.cli.command import _DEMO_DATA as _DEMO_DATA
from fulmen.cli.command import _DEMO_MODEL as _DEMO_MODEL
from fulmen.cli.command import main as main
from fulmen.cli.instantiate import _configurable as _configurable
from fulmen.cli.instantiate import _import_object as _import_object
from fulmen.cli.instantiate import _plain as _plain
from fulmen.cli.instantiate import _RecordingInstantiator as _RecordingInstantiator
from fulmen.cli.instantiate import _set_nested as _set_nested
from fulmen.cli.instantiate import instantiate_class as instantiate_class
from fulmen.cli.instantiate import instantiate_module as instantiate_module
from fulmen.cli.lightning_cli import _ARGS_ARE_THE_COMMAND_LINE as _ARGS_ARE_THE_COMMAND_LINE
from fulmen.cli.lightning_cli import _TUNE_HELP as _TUNE_HELP
from fulmen.cli.lightning_cli import LightningCLI as LightningCLI
from fulmen.cli.optimizers import LRSchedulerCallable as LRSchedulerCallable
from fulmen.cli.optimizers import LRSchedulerType as LRSchedulerType
from fulmen.cli.optimizers import LRSchedulerTypeTuple as LRSchedulerTypeTuple
from fulmen.cli.optimizers import LRSchedulerTypeUnion as LRSchedulerTypeUnion
from fulmen.cli.optimizers import OptimizerCallable as OptimizerCallable
from fulmen.cli.optimizers import ReduceLROnPlateau as ReduceLROnPlateau
from fulmen.cli.optimizers import _class_path_config as _class_path_config
from fulmen.cli.parser import _AUTOMATIC as _AUTOMATIC
from fulmen.cli.parser import _FULMEN_ONLY_TRAINER_ARGS as _FULMEN_ONLY_TRAINER_ARGS
from fulmen.cli.parser import _JSONARGPARSE_AVAILABLE as _JSONARGPARSE_AVAILABLE
from fulmen.cli.parser import _JSONARGPARSE_SIGNATURES_AVAILABLE as _JSONARGPARSE_SIGNATURES_AVAILABLE
from fulmen.cli.parser import LightningArgumentParser as LightningArgumentParser
from fulmen.cli.parser import Namespace as Namespace
from fulmen.cli.parser import _ParserBase as _ParserBase
from fulmen.cli.parser import _register_short_names as _register_short_names
from fulmen.cli.parser import _same as _same
from fulmen.cli.parser import _without_default_fulmen_args as _without_default_fulmen_args
from fulmen.cli.save_config import SaveConfigCallback as SaveConfigCallback

if _JSONARGPARSE_AVAILABLE:
    from fulmen.cli.parser import ActionConfigFile as ActionConfigFile
    from fulmen.cli.parser import class_from_function as class_from_function

# What the single module imported at its top level, still reachable as fulmen.cli.<name> for code that used it
# so (fulmen.cli.get_filesystem, fulmen.cli.Trainer, ...); the modules of the package use their own imports.

from torch.optim import Optimizer as Optimizer
from torch.optim.lr_scheduler import LRScheduler as LRScheduler

from fulmen.callbacks.callback import Callback as Callback
from fulmen.core.datamodule import LightningDataModule as LightningDataModule
from fulmen.core.module import LightningModule as LightningModule
from fulmen.trainer.trainer import Trainer as Trainer
from fulmen.utilities.cloud_io import get_filesystem as get_filesystem
from fulmen.utilities.curves import plot_run as plot_run
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.imports import RequirementCache as RequirementCache
from fulmen.utilities.model_helpers import is_overridden as is_overridden
from fulmen.utilities.parsing import given_init_config as given_init_config
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn
from fulmen.utilities.seed import seed_everything as seed_everything

__all__ = [
    "LRSchedulerCallable", "LRSchedulerType", "LRSchedulerTypeTuple", "LRSchedulerTypeUnion", "LightningArgumentParser",
    "LightningCLI", "OptimizerCallable", "ReduceLROnPlateau", "SaveConfigCallback", "instantiate_class",
    "instantiate_module", "main", "plot_run",
]  # fmt: skip
