"""``TorchCheckpointIO``: the default checkpoint writer (``torch.save`` / ``torch.load``)."""

from __future__ import annotations

import os
from typing import Any

from fulmen.checkpoint import files as checkpoint_io
from fulmen.plugins.io.checkpoint_plugin import CheckpointIO
from fulmen.utilities import cloud_io

_Path = str | os.PathLike[str]


class TorchCheckpointIO(CheckpointIO):
    """``torch.save`` / ``torch.load`` through fulmen's safe, atomic checkpoint files (local paths and any
    fsspec URL; a ``.safetensors`` path exports the weights); loading is ``weights_only`` unless told
    otherwise (``None``: torch's default, see :func:`fulmen.checkpoint.files.resolve_weights_only`)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: _Path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(
                f"save_checkpoint(storage_options={storage_options!r}): {type(self).__name__} takes no storage "
                "options. Give credentials and endpoints to fsspec (e.g. fsspec.config.conf['s3']), or pass a "
                "CheckpointIO of your own that uses them: Trainer(plugins=[MyCheckpointIO()])."
            )
        path = os.fspath(path)
        if path.endswith(".safetensors"):
            checkpoint_io.save_safetensors(checkpoint, path)
        else:
            checkpoint_io.save(checkpoint, path)

    def load_checkpoint(
        self, path: _Path, map_location: Any | None = lambda storage, loc: storage, weights_only: bool | None = None
    ) -> dict[str, Any]:
        """The checkpoint at ``path``. ``map_location`` as ``torch.load``'s: by default every tensor is loaded on
        the CPU (a GPU checkpoint opens on a machine without one), as Lightning loads it."""
        return checkpoint_io.load(path, map_location=map_location, weights_only=weights_only)

    def remove_checkpoint(self, path: _Path) -> None:
        cloud_io.remove(path)


__all__ = ["TorchCheckpointIO"]
