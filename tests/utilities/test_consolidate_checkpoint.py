"""``python -m fulmen.utilities.consolidate_checkpoint FOLDER [--output_file F]``: Lightning's command line
(argument names, default output next to the folder, errors) over fulmen's consolidation."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys

import pytest
import torch

from fulmen.utilities import consolidate_checkpoint
from tests.parity import oracle
from tests.strategies.test_fsdp_arguments import _checkpoint_shards

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


def _consolidate(*argv):
    """The command in this process; the exit status when it exits."""
    try:
        consolidate_checkpoint._main([str(a) for a in argv])
    except SystemExit as exit_info:
        return exit_info.code
    return 0


def _assert_is_the_model(checkpoint, model, positional):
    assert checkpoint["global_step"] == 1 and checkpoint["pytorch-lightning_version"] == "2.6.6"
    assert all(torch.equal(checkpoint["state_dict"][k], v) for k, v in model.state_dict().items())
    assert checkpoint["optimizer_states"][0]["param_groups"] == positional["param_groups"]


def test_the_default_output_is_the_folder_name_with_consolidated_appended(tmp_path):
    path, model, positional = _checkpoint_shards(tmp_path)
    assert _consolidate(path) == 0
    output = tmp_path / "epoch=0-step=1.ckpt.consolidated"
    _assert_is_the_model(torch.load(output, weights_only=True), model, positional)


def test_output_file_is_where_it_says(tmp_path):
    path, model, positional = _checkpoint_shards(tmp_path)
    assert _consolidate(path, "--output_file", tmp_path / "out" / "model.ckpt") == 0
    _assert_is_the_model(torch.load(tmp_path / "out" / "model.ckpt", weights_only=True), model, positional)


def test_errors_are_logged_and_exit_with_status_one(tmp_path, caplog):
    path, _, _ = _checkpoint_shards(tmp_path)
    caplog.set_level(logging.ERROR)
    assert _consolidate(tmp_path / "missing") == 1 and "folder does not exist" in caplog.text
    (tmp_path / "file.ckpt").write_bytes(b"")
    assert _consolidate(tmp_path / "file.ckpt") == 1 and "must be a folder" in caplog.text
    (tmp_path / "plain").mkdir()
    assert _consolidate(tmp_path / "plain") == 1 and "not in that format" in caplog.text
    os.remove(path / "meta.pt")  # DCP's shards without the training state
    assert _consolidate(path) == 1
    assert _consolidate(path, "--output_file", tmp_path / "file.ckpt") == 1
    # an existing output is never overwritten
    path, _, _ = _checkpoint_shards(tmp_path / "again")
    caplog.clear()
    assert _consolidate(path, "--output_file", tmp_path / "file.ckpt") == 1 and "already exists" in caplog.text
    assert (tmp_path / "file.ckpt").read_bytes() == b""


def test_arguments_are_lightnings():
    with pytest.raises(SystemExit):  # the folder is required
        consolidate_checkpoint._parse_cli_args([])
    args = consolidate_checkpoint._parse_cli_args(["folder", "--output_file", "f.ckpt"])
    assert (args.checkpoint_folder, args.output_file) == ("folder", "f.ckpt")


@pytest.mark.slow
@oracle.parity
def test_the_command_line_writes_what_lightnings_writes(tmp_path):
    """Both commands on the same folder: same default file name, same weights and training state (fulmen keys
    the optimizer states by position, as a single process's checkpoint does)."""
    oracle.lightning()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    path, model, positional = _checkpoint_shards(tmp_path / "ours")
    shutil.copytree(tmp_path / "ours", tmp_path / "theirs")
    outputs = {}
    for name, module in (("ours", "fulmen"), ("theirs", "lightning.pytorch")):
        command = [sys.executable, "-m", f"{module}.utilities.consolidate_checkpoint", str(tmp_path / name / path.name)]
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        outputs[name] = torch.load(tmp_path / name / f"{path.name}.consolidated", weights_only=False)
    ours, theirs = outputs["ours"], outputs["theirs"]
    _assert_is_the_model(ours, model, positional)
    assert ours.keys() == theirs.keys() - {"sharded_optimizers"}
    assert all(torch.equal(ours["state_dict"][k], v) for k, v in theirs["state_dict"].items())
    assert (ours["epoch"], ours["global_step"]) == (theirs["epoch"], theirs["global_step"])
