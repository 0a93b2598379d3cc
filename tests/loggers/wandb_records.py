"""Read the records of an offline W&B run (``wandb/offline-run-*/run-<id>.wandb``) with W&B's own protobuf
definitions. The file is a LevelDB-style log: a 7-byte header (``:W&B``, magic 0xBEE1, version), then 32 KiB
blocks of chunks, each with a 7-byte header (crc32, length, type: full / first / middle / last)."""

from __future__ import annotations

import glob
import json
import struct
import time
from typing import Any

_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _payloads(data: bytes) -> list[bytes]:
    ident, magic, _version = struct.unpack("<4sHB", data[:7])
    assert ident == b":W&B" and magic == 0xBEE1, "not a W&B run file"
    out, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:  # the block's tail is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            break
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == _FULL:
            out.append(chunk)
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            out.append(pending + chunk)
            pending = b""
    return out


def read_run(folder: str, wait: float = 20.0) -> dict[str, Any]:
    """The run's id / project / name, config, history rows (key -> value) and artifacts. W&B's own service
    process writes the file; on a busy machine its run record can land after ``wandb.finish()`` returned, so the
    file is read again (up to ``wait`` seconds) until that record is there."""
    deadline = time.monotonic() + wait
    while True:
        run = _read_run_once(folder)
        if "id" in run or time.monotonic() > deadline:
            return run
        time.sleep(0.2)


def _read_run_once(folder: str) -> dict[str, Any]:
    from wandb.proto import wandb_internal_pb2 as pb

    (path,) = glob.glob(f"{folder}/wandb/offline-run-*/run-*.wandb")
    run: dict[str, Any] = {"history": [], "config": {}, "artifacts": []}
    with open(path, "rb") as f:
        payloads = _payloads(f.read())
    for payload in payloads:
        record = pb.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.update(id=record.run.run_id, project=record.run.project, name=record.run.display_name)
            for item in record.run.config.update:
                run["config"][item.key] = json.loads(item.value_json)
        elif kind == "config":
            for item in record.config.update:
                run["config"][item.key] = json.loads(item.value_json)
        elif kind == "history":
            row = {(item.key or "/".join(item.nested_key)): json.loads(item.value_json) for item in record.history.item}
            run["history"].append({k: v for k, v in row.items() if not k.startswith("_")})
        elif kind == "artifact":
            art = record.artifact
            run["artifacts"].append({"name": art.name, "type": art.type, "aliases": list(art.aliases),
                                     "metadata": json.loads(art.metadata) if art.metadata else {},
                                     "files": [entry.path for entry in art.manifest.contents]})  # fmt: skip
    return run
