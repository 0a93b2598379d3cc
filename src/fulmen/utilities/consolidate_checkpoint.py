"""Lightning's import path ``lightning.pytorch.utilities.consolidate_checkpoint``: the command that turns a
sharded checkpoint folder (FSDP's ``state_dict_type="sharded"``) into one checkpoint file::

    python -m fulmen.utilities.consolidate_checkpoint epoch=3-step=120.ckpt
    python -m fulmen.utilities.consolidate_checkpoint epoch=3-step=120.ckpt --output_file model.ckpt

The file (by default the folder's name with ``.consolidated`` appended, beside it) holds whole tensors and
loads on one process, without torch.distributed: ``torch.load``, ``load_from_checkpoint``,
``Trainer.fit(ckpt_path=...)``. ``fulmen consolidate FOLDER OUTPUT`` does the same.
"""

from __future__ import annotations

import logging
import sys
from argparse import ArgumentParser, Namespace
from pathlib import Path
from typing import NoReturn

from fulmen.checkpoint import sharded as distributed_checkpoint

# named, not __name__: run with `python -m` this module is __main__, and its messages would miss fulmen's handler
_log = logging.getLogger("fulmen.utilities.consolidate_checkpoint")


def _parse_cli_args(argv: list[str] | None = None) -> Namespace:
    parser = ArgumentParser(
        description="Converts a distributed/sharded checkpoint into a single file that can be loaded with "
        "`torch.load()`. Only supports FSDP sharded checkpoints at the moment."
    )
    parser.add_argument(
        "checkpoint_folder",
        type=str,
        help="Path to a checkpoint folder, containing the sharded checkpoint files saved using the "
        "`torch.distributed.checkpoint` API.",
    )
    parser.add_argument(
        "--output_file",
        type=str,
        help="Path to the file where the converted checkpoint should be saved. The file should not already exist. "
        "If no path is provided, the file will be saved next to the input checkpoint folder with the same name "
        "and a '.consolidated' suffix.",
    )
    return parser.parse_args(argv)


def _process_cli_args(args: Namespace) -> Namespace:
    """The folder and output file, checked (an error is logged and the process exits with status 1)."""
    folder = Path(args.checkpoint_folder)
    if not folder.exists():
        _exit(f"The provided checkpoint folder does not exist: {folder}")
    if not folder.is_dir():
        _exit(f"The provided checkpoint path must be a folder, containing the checkpoint shards: {folder}")
    if not distributed_checkpoint.is_sharded_checkpoint(folder) or not (folder / distributed_checkpoint.META_FILE).is_file():
        _exit(
            "Only FSDP-sharded checkpoints saved with Lightning or fulmen are supported for consolidation (a folder "
            f"with torch.distributed.checkpoint's {distributed_checkpoint.DCP_METADATA} and "
            f"{distributed_checkpoint.META_FILE}). The provided folder is not in that format: {folder}"
        )
    output = folder.with_suffix(folder.suffix + ".consolidated") if args.output_file is None else Path(args.output_file)
    if output.exists():
        _exit(
            "The path for the converted checkpoint already exists. Choose a different path by providing "
            f"`--output_file` or move/delete the file first: {output}"
        )
    return Namespace(checkpoint_folder=folder, output_file=output)


def _exit(message: str) -> NoReturn:
    _log.error(message)
    sys.exit(1)


def _main(argv: list[str] | None = None) -> None:
    config = _process_cli_args(_parse_cli_args(argv))
    distributed_checkpoint.consolidate(config.checkpoint_folder, config.output_file)


if __name__ == "__main__":
    _main()
