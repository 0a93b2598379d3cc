"""DeepSpeed ZeRO checkpoints: find one's tag directory, and turn one into an ordinary fp32 checkpoint.

Reading the ZeRO shards needs DeepSpeed's own reader (``deepspeed.utils.zero_to_fp32``), so the conversion
runs only where the ``deepspeed`` package is installed. Finding the directory is plain file work.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from fulmen.utilities.imports import _DEEPSPEED_AVAILABLE as _DEEPSPEED_AVAILABLE
from fulmen.utilities.imports import package_available

_PATH = str | os.PathLike[str]

CPU_DEVICE = torch.device("cpu")

# what DeepSpeed itself keeps in a ZeRO model-states file: the rest is the trainer's state (loops, callbacks...)
_DEEPSPEED_KEYS = frozenset({
    "module", "optimizer", "lr_scheduler", "csr_tensor_module_names", "skipped_steps", "global_steps",
    "dp_world_size", "mp_world_size",
})  # fmt: skip


def ds_checkpoint_dir(checkpoint_dir: _PATH, tag: str | None = None) -> str:
    """The directory of one save inside a DeepSpeed checkpoint directory: ``checkpoint_dir/tag``, the tag
    read from the ``latest`` file DeepSpeed writes when none is given (``global_step14`` ...)."""
    if tag is None:
        latest = os.path.join(checkpoint_dir, "latest")
        if not os.path.isfile(latest):
            raise ValueError(
                f"Unable to find 'latest' file at {latest!r}: {os.fspath(checkpoint_dir)!r} is not a DeepSpeed "
                "checkpoint directory, or its save did not finish. Pass the save's tag (tag='global_step14')."
            )
        with open(latest) as file:
            tag = file.read().strip()
    directory = os.path.join(checkpoint_dir, tag)
    if not os.path.isdir(directory):
        raise FileNotFoundError(
            f"Directory {directory!r} doesn't exist: no save tagged {tag!r} in {os.fspath(checkpoint_dir)!r}."
        )
    return directory


def convert_zero_checkpoint_to_fp32_state_dict(
    checkpoint_dir: _PATH, output_file: _PATH, tag: str | None = None
) -> dict[str, Any]:
    """Write the ZeRO stage 2/3 checkpoint ``checkpoint_dir`` (a directory with a tag directory such as
    ``global_step14``, or the ``latest`` file naming it) as one checkpoint file ``output_file`` with whole fp32
    weights under ``state_dict`` and the trainer's state beside them, so that ``load_from_checkpoint`` and
    ``torch.load`` read it without DeepSpeed. Returns the checkpoint written.

    Needs the ``deepspeed`` package (its reader of ZeRO shards)."""
    if not package_available("deepspeed"):
        raise ModuleNotFoundError(
            f"convert_zero_checkpoint_to_fp32_state_dict({os.fspath(checkpoint_dir)!r}, ...) reads DeepSpeed ZeRO "
            "shards with DeepSpeed's own reader: the `deepspeed` package is not installed (pip install deepspeed). "
            "fulmen does not train with DeepSpeed; for its sharded (FSDP) checkpoints use "
            "`python -m fulmen.utilities.consolidate_checkpoint CHECKPOINT_FOLDER` instead."
        )
    from deepspeed.utils.zero_to_fp32 import (
        get_fp32_state_dict_from_zero_checkpoint,
        get_model_state_file,
        get_optim_files,
    )

    weights = get_fp32_state_dict_from_zero_checkpoint(checkpoint_dir, tag)
    directory = ds_checkpoint_dir(checkpoint_dir, tag)
    # DeepSpeed's files pickle its own classes: they are read as DeepSpeed itself reads them
    optim_state = torch.load(get_optim_files(directory)[0], map_location=CPU_DEVICE, weights_only=False)
    stage = optim_state["optimizer_state_dict"]["zero_stage"]
    model_state = torch.load(get_model_state_file(directory, stage), map_location=CPU_DEVICE, weights_only=False)
    checkpoint = {k: v for k, v in model_state.items() if k not in _DEEPSPEED_KEYS}
    # checkpoints of Lightning < 2.1 name the weights through the wrapper module `_forward_module.`
    checkpoint["state_dict"] = {k.removeprefix("_forward_module."): v for k, v in weights.items()}
    print(f"Saving fp32 state dict to {output_file}")
    torch.save(checkpoint, output_file)
    return checkpoint
