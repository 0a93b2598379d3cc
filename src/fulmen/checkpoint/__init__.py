"""Checkpoint files: how fulmen writes and reads them, whatever wrote the state in them.

- :mod:`fulmen.checkpoint.files`: one file, written atomically (temp + fsync + rename; remote stores through
  fsspec) and read safely (``weights_only`` unpickling, a clear error for a truncated or foreign file);
- :mod:`fulmen.checkpoint.sharded`: a directory of shards (``torch.distributed.checkpoint``), written as a
  hidden ``.partial`` directory and renamed in, read and consolidated into one file.

Older Lightning formats are upgraded on load by :mod:`fulmen.utilities.migration` (Lightning's module), and the
commands ``python -m fulmen.utilities.upgrade_checkpoint`` / ``consolidate_checkpoint`` work on files in place.
What a checkpoint holds (Lightning's keys) is the trainer's: ``fulmen.trainer.checkpointing``.
"""
