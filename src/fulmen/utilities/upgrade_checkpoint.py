"""Lightning's import path ``lightning.pytorch.utilities.upgrade_checkpoint``: the command that upgrades
checkpoint files of older Lightning versions to the current format, in place::

    python -m fulmen.utilities.upgrade_checkpoint model.ckpt
    python -m fulmen.utilities.upgrade_checkpoint lightning_logs/ --extension .pt

Each file is first copied to a backup beside it (``model.bak``: the suffix replaced; an existing backup is
never overwritten, it holds the original), then loaded, upgraded by
:func:`~fulmen.utilities.migration.migrate_checkpoint` and written back. Loading a checkpoint upgrades it in
memory anyway; this makes it permanent, and the file loadable by tools that do not upgrade.
"""

from __future__ import annotations

import glob
import logging
import sys
from argparse import ArgumentParser, Namespace
from pathlib import Path
from shutil import copyfile
from typing import Any

import torch

# the callbacks whose pre-0.10 state an upgrade moves under `callbacks`, keyed by their classes: loaded so that
# the files written back hold the classes (see fulmen.utilities.migration.migration.holds_legacy_state)
import fulmen.callbacks.early_stopping
import fulmen.callbacks.model_checkpoint  # noqa: F401
from fulmen.checkpoint import files as checkpoint_io
from fulmen.utilities.migration import migrate_checkpoint, pl_legacy_patch

# named, not __name__: run with `python -m` this module is __main__, and its messages would miss fulmen's handler
_log = logging.getLogger("fulmen.utilities.upgrade_checkpoint")


def _upgrade(args: Namespace) -> None:
    path = Path(args.path).absolute()
    extension: str = args.extension if args.extension.startswith(".") else f".{args.extension}"
    if not path.exists():
        _log.error(
            f"The path {path} does not exist. Please provide a valid path to a checkpoint file or a directory "
            f"containing checkpoints ending in {extension}."
        )
        sys.exit(1)
    if path.is_file():
        files = [path]
    else:
        files = [Path(p) for p in sorted(glob.glob(str(path / "**" / f"*{extension}"), recursive=True))]
    if not files:
        _log.error(
            f"No checkpoint files with extension {extension} were found in {path}. HINT: Try setting the "
            "`--extension` option to specify the right file extension to look for."
        )
        sys.exit(1)

    _log.info("Creating a backup of the existing checkpoint files before overwriting in the upgrade process.")
    for file in files:
        backup = file.with_suffix(".bak")
        if not backup.exists():  # an existing backup is the untouched original of an earlier upgrade
            copyfile(file, backup)

    from tqdm import tqdm

    _log.info("Upgrading checkpoints ...")
    map_location = torch.device("cpu") if args.map_to_cpu else None
    for file in tqdm(files):
        checkpoint = _load(file, map_location, weights_only=not args.no_weights_only)
        migrate_checkpoint(checkpoint)
        checkpoint_io.save(checkpoint, file)
    _log.info("Done.")


def _load(file: Path, map_location: torch.device | None, weights_only: bool) -> dict[str, Any]:
    if weights_only:
        try:
            return checkpoint_io.load(file, map_location=map_location, weights_only=True)
        except checkpoint_io.UnsafeCheckpointError as err:
            _log.error(
                f"{err}\nTo upgrade it anyway, run the upgrade again with --no-weights-only (only for files you "
                "trust: unpickling runs code the file names). Its backup is kept."
            )
            sys.exit(1)
    with pl_legacy_patch():  # objects old versions pickled are read as fulmen's
        return torch.load(file, map_location=map_location, weights_only=False)


def main() -> None:
    """The command line: ``python -m fulmen.utilities.upgrade_checkpoint PATH [--extension .ckpt] [--map-to-cpu]``."""
    parser = ArgumentParser(
        description="A utility to upgrade old checkpoints to the format of the current Lightning version. This "
        "will also save a backup of the original files."
    )
    parser.add_argument("path", type=str, help="Path to a checkpoint file or a directory with checkpoints to upgrade")
    parser.add_argument(
        "--extension",
        "-e",
        type=str,
        default=".ckpt",
        help="The file extension to look for when searching for checkpoint files in a directory.",
    )
    parser.add_argument(
        "--map-to-cpu",
        action="store_true",
        help="Map all tensors in the checkpoint to CPU. Enable this option if you are converting a GPU checkpoint "
        "on a machine without GPUs.",
    )
    parser.add_argument(
        "--no-weights-only",
        action="store_true",
        help="Read the files with the full unpickler (torch.load(weights_only=False)), for old checkpoints that "
        "pickled objects (hyperparameter Namespaces, callback classes). It runs code the file names: use it only "
        "for files you trust.",
    )
    _upgrade(parser.parse_args())


if __name__ == "__main__":
    main()
