"""A fit under a (simulated) one-task SLURM job that signals itself mid-epoch; run by test_environments.py.

Usage: ``python slurm_signal_run.py OUTDIR SIGNAL [auto_requeue]``: ``plugins=[SLURMEnvironment(...)]`` when a
third argument is given. ``TEST_FAILING_SAVES=1``: checkpoints are written in the background by a writer that
fails (a full disk)."""

from __future__ import annotations

import os
import signal
import sys

import fulmen
from fulmen.demos.boring_classes import BoringModel
from fulmen.plugins import AsyncCheckpointIO, SLURMEnvironment, TorchCheckpointIO


class SignalAt(fulmen.Callback):
    def __init__(self, signum: int) -> None:
        self.signum = signum

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == 3:
            os.kill(os.getpid(), self.signum)


class FullDisk(TorchCheckpointIO):
    def save_checkpoint(self, checkpoint, path, storage_options=None):
        raise OSError(28, "No space left on device")


def main() -> None:
    outdir, name = sys.argv[1], sys.argv[2]
    signum = getattr(signal, name)
    plugins = None
    if len(sys.argv) > 3:
        plugins = [SLURMEnvironment(auto_requeue=sys.argv[3] == "true", requeue_signal=signum)]
    if os.environ.get("TEST_FAILING_SAVES"):
        plugins = [*(plugins or []), AsyncCheckpointIO(FullDisk())]
    trainer = fulmen.Trainer(max_epochs=2, limit_train_batches=8, limit_val_batches=0, logger=False,
                             enable_progress_bar=False, default_root_dir=outdir, callbacks=[SignalAt(signum)],
                             plugins=plugins)  # fmt: skip
    trainer.fit(BoringModel())
    print("fit returned")  # not reached: the signal ends the process after saving


if __name__ == "__main__":
    main()
