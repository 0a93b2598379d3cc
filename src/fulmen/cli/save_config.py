"""``SaveConfigCallback``: writes a CLI run's full config next to its logs, so that the file repeats the run."""

from __future__ import annotations

import os
from typing import Any

from fulmen.callbacks.callback import Callback
from fulmen.core.module import LightningModule
from fulmen.trainer.trainer import Trainer
from fulmen.utilities.rank_zero import rank_zero_warn


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
