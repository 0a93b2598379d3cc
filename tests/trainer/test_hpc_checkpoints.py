"""HPC checkpoints (``hpc_ckpt_<n>.ckpt`` in ``default_root_dir``): where the next one goes, ``ckpt_path="hpc"``,
and a SLURM job resuming from the newest one by itself, as in Lightning (run on both)."""

from __future__ import annotations

import importlib
import os
from unittest import mock

import pytest
import torch

from tests.parity import oracle

ROOTS = ["fulmen", pytest.param("lightning.pytorch", marks=oracle.parity)]


def _lib(root: str):
    if root != "fulmen":
        oracle.lightning()
    return importlib.import_module(root), importlib.import_module(f"{root}.demos.boring_classes").BoringModel


def _trainer(pl, tmp_path, **kwargs):
    flags = dict(default_root_dir=tmp_path, enable_checkpointing=False, logger=False, enable_progress_bar=False,
                 enable_model_summary=False)  # fmt: skip
    return pl.Trainer(**{**flags, **kwargs})


@pytest.mark.parametrize("root", ROOTS)
def test_the_next_hpc_checkpoint_and_the_newest_one(root, tmp_path):
    pl, BoringModel = _lib(root)
    trainer = _trainer(pl, tmp_path, max_steps=1)
    trainer.fit(BoringModel())
    connector = trainer._checkpoint_connector
    assert connector.hpc_save_path(tmp_path) == os.path.join(tmp_path, "hpc_ckpt_1.ckpt")
    assert connector._hpc_resume_path is None
    for name in ("hpc_ckpt.ckpt", "hpc_ckpt_0.ckpt", "hpc_ckpt_3.ckpt", "hpc_ckpt_33.ckpt"):
        trainer.save_checkpoint(tmp_path / name)
    assert connector._hpc_resume_path == str(tmp_path / "hpc_ckpt_33.ckpt")
    assert connector.hpc_save_path(tmp_path) == os.path.join(tmp_path, "hpc_ckpt_34.ckpt")
    assert type(connector)._CheckpointConnector__max_ckpt_version_in_folder(tmp_path / "not" / "there") is None


@pytest.mark.parametrize("root", ROOTS)
def test_a_slurm_job_resumes_from_its_newest_hpc_checkpoint(root, tmp_path, monkeypatch):
    pl, BoringModel = _lib(root)
    model = BoringModel()
    trainer = _trainer(pl, tmp_path, max_steps=1)
    trainer.fit(model)
    trainer.save_checkpoint(tmp_path / "hpc_ckpt_3.ckpt")
    for param in model.parameters():
        torch.nn.init.constant_(param, 0)
    environments = importlib.import_module(f"{root}.plugins.environments")
    with mock.patch.object(environments.SLURMEnvironment, "detect", return_value=True):
        trainer = _trainer(pl, tmp_path, max_steps=2)
        trainer.fit(model)
    assert all(param.abs().sum() > 0 for param in model.parameters())  # the checkpoint's weights, trained on
    assert trainer.global_step == 2


@pytest.mark.parametrize("root", ROOTS)
def test_ckpt_path_hpc(root, tmp_path):
    pl, BoringModel = _lib(root)
    trainer = _trainer(pl, tmp_path, max_steps=1)
    with pytest.raises(ValueError, match=r'`.fit\(ckpt_path="hpc"\)` is set but no HPC checkpoint'):
        trainer.fit(BoringModel(), ckpt_path="hpc")
    trainer = _trainer(pl, tmp_path, max_steps=1)
    trainer.fit(BoringModel())
    trainer.save_checkpoint(tmp_path / "hpc_ckpt_1.ckpt")
    trainer = _trainer(pl, tmp_path, max_steps=2)
    trainer.fit(BoringModel(), ckpt_path="hpc")
    assert trainer.global_step == 2 and trainer.ckpt_path == str(tmp_path / "hpc_ckpt_1.ckpt")
