"""Paths through fsspec: memory://, file://, ~, s3:// on a local S3 server; permissions of checkpoint files."""

from __future__ import annotations

import csv
import io
import os
import socket
import subprocess
import sys
import time

import pytest
import torch

from fulmen import Trainer
from fulmen.callbacks import ModelCheckpoint
from fulmen.checkpoint import files as checkpoint_io
from fulmen.demos.boring_classes import BoringModel
from fulmen.loggers import CSVLogger
from fulmen.utilities import cloud_io


@pytest.fixture
def memfs():
    import fsspec

    fs = fsspec.filesystem("memory")
    fs.store.clear()
    fs.pseudo_dirs.clear()
    fs.pseudo_dirs.append("")
    yield fs
    fs.store.clear()


class LoggingModel(BoringModel):
    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        self.log("train_loss", out["loss"])
        return out


def _trainer(**kwargs) -> Trainer:
    kwargs.setdefault("max_epochs", 2)
    return Trainer(limit_train_batches=3, limit_val_batches=1, enable_progress_bar=False,
                   enable_model_summary=False, **kwargs)  # fmt: skip


def _weights(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_paths_are_classified_and_joined():
    assert cloud_io.protocol("s3://bucket/a") == "s3"
    assert cloud_io.protocol("/tmp/x") is None
    assert cloud_io.is_remote("memory://runs") and not cloud_io.is_remote("file:///tmp/x")
    assert cloud_io.normalize("file:///tmp/x/") == os.path.realpath("/tmp/x")
    assert cloud_io.normalize("s3://b/runs/") == "s3://b/runs"
    assert cloud_io.join("s3://b/runs", "v0", "checkpoints") == "s3://b/runs/v0/checkpoints"
    assert cloud_io.dirname("s3://b/runs/a.ckpt") == "s3://b/runs"
    assert cloud_io.basename("memory://runs/a.ckpt") == "a.ckpt"


def test_default_root_dir_in_memory_writes_nothing_locally_and_resumes_from_last(memfs, tmp_path):
    model = LoggingModel()
    trainer = _trainer(default_root_dir="memory://runs", logger=CSVLogger("memory://runs"), log_every_n_steps=1,
                       callbacks=[ModelCheckpoint(save_last=True)])  # fmt: skip
    trainer.fit(model)
    assert os.listdir(tmp_path) == [], "a memory:// root must not create local folders (e.g. 'memory:')"
    ckpt_dir = "memory://runs/lightning_logs/version_0/checkpoints"
    assert sorted(cloud_io.listdir(ckpt_dir)) == ["epoch=1-step=6.ckpt", "last.ckpt"]
    assert trainer.checkpoint_callback.best_model_path == f"{ckpt_dir}/epoch=1-step=6.ckpt"
    rows = list(csv.DictReader(io.StringIO(memfs.cat("/runs/lightning_logs/version_0/metrics.csv").decode())))
    assert [int(r["step"]) for r in rows] == list(range(6)) and all(r["train_loss"] for r in rows)

    # the file read back is a real checkpoint, safely loaded
    checkpoint = checkpoint_io.load(f"{ckpt_dir}/last.ckpt")
    assert checkpoint["global_step"] == 6
    for name, tensor in model.state_dict().items():
        assert torch.equal(checkpoint["state_dict"][name], tensor)

    # resume from "last" on the same store: the run goes on from step 6
    resumed = LoggingModel()
    trainer2 = _trainer(max_epochs=3, default_root_dir="memory://runs", logger=False,
                        callbacks=[ModelCheckpoint(dirpath=ckpt_dir, save_last=True)])  # fmt: skip
    trainer2.fit(resumed, ckpt_path="last")
    assert trainer2.global_step == 9
    assert trainer2.ckpt_path == f"{ckpt_dir}/last.ckpt"
    # and load_from_checkpoint reads a URL
    loaded = LoggingModel.load_from_checkpoint(f"{ckpt_dir}/last.ckpt")
    for a, b in zip(_weights(loaded), _weights(resumed)):
        assert torch.equal(a, b)
    assert os.listdir(tmp_path) == []


def test_top_k_rotation_removes_old_files_on_the_store(memfs):
    class Decreasing(BoringModel):
        def validation_step(self, batch, batch_idx):
            self.log("val_loss", 10.0 - self.current_epoch)

    cb = ModelCheckpoint(dirpath="memory://ck", monitor="val_loss", save_top_k=1, save_last="link")
    _trainer(max_epochs=3, logger=False, callbacks=[cb]).fit(Decreasing())
    # one best file and a last file that is a copy (object stores have no symlinks)
    assert sorted(cloud_io.listdir("memory://ck")) == ["epoch=2-step=9.ckpt", "last.ckpt"]
    assert memfs.cat("/ck/last.ckpt") == memfs.cat("/ck/epoch=2-step=9.ckpt")
    assert not any(name.endswith(".tmp") for name in cloud_io.listdir("memory://ck"))


def test_file_urls_and_home_are_local_paths(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    trainer = _trainer(max_epochs=1, default_root_dir="~/runs", logger=False)
    trainer.fit(BoringModel())
    assert trainer.default_root_dir == str(tmp_path / "home" / "runs")
    assert os.listdir(tmp_path / "home" / "runs" / "checkpoints") == ["epoch=0-step=3.ckpt"]

    url = f"file://{tmp_path}/byurl"
    cb = ModelCheckpoint(dirpath=url)
    assert cb.dirpath == os.path.realpath(tmp_path / "byurl")
    trainer = _trainer(max_epochs=1, logger=False, callbacks=[cb])
    trainer.fit(BoringModel())
    path = f"{url}/epoch=0-step=3.ckpt"
    assert os.path.isfile(tmp_path / "byurl" / "epoch=0-step=3.ckpt")
    _trainer(max_epochs=2, logger=False).fit(BoringModel(), ckpt_path=path)
    assert not os.path.exists("file:"), "a file:// URL must not become a folder named 'file:'"


def _missing_protocol() -> str:
    import importlib.util

    from fsspec.registry import known_implementations

    for proto in ("oci", "adl", "dropbox", "gdrive", "box"):
        spec = known_implementations.get(proto)
        if spec is None:
            continue
        module = spec["class"].split(".")[0]
        if importlib.util.find_spec(module) is None:
            return proto
    pytest.fail("every candidate filesystem package is installed; pick another protocol")


def test_url_whose_package_is_missing_fails_before_training():
    proto = _missing_protocol()
    with pytest.raises(ModuleNotFoundError, match=rf"default_root_dir.*{proto}://.*not installed"):
        Trainer(default_root_dir=f"{proto}://bucket/runs")
    with pytest.raises(ModuleNotFoundError, match=r"ModelCheckpoint\(dirpath\)"):
        ModelCheckpoint(dirpath=f"{proto}://bucket/ck")
    model = BoringModel()
    trainer = _trainer(max_epochs=1, logger=False, enable_checkpointing=False)
    with pytest.raises(ModuleNotFoundError, match="ckpt_path"):
        trainer.fit(model, ckpt_path=f"{proto}://bucket/x.ckpt")
    assert trainer.global_step == 0


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_checkpoint_files_get_ordinary_permissions(tmp_path, umask):
    old = os.umask(umask)
    try:
        trainer = _trainer(max_epochs=1, logger=False, callbacks=[ModelCheckpoint(dirpath=tmp_path / "ck")])
        trainer.fit(BoringModel())
        trainer.save_checkpoint(tmp_path / "manual.ckpt")
    finally:
        os.umask(old)
    for path in (tmp_path / "ck" / "epoch=0-step=3.ckpt", tmp_path / "manual.ckpt"):
        assert oct(os.stat(path).st_mode & 0o777) == oct(0o666 & ~umask)


# -- S3, against moto's server on 127.0.0.1 ------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def s3_server(monkeypatch):
    pytest.importorskip("s3fs", reason="the test extras install s3fs")
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            pytest.fail("moto's S3 server did not start")
        for key, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL_S3": endpoint,
                           "AWS_ENDPOINT_URL": endpoint, "FSSPEC_S3_ENDPOINT_URL": endpoint}.items():  # fmt: skip
            monkeypatch.setenv(key, value)
        import fsspec
        import s3fs

        fsspec.config.conf.setdefault("s3", {})
        monkeypatch.setitem(fsspec.config.conf, "s3", {"client_kwargs": {"endpoint_url": endpoint}})
        s3fs.S3FileSystem.clear_instance_cache()
        fs = fsspec.filesystem("s3")
        fs.mkdir("fulmen-runs")
        yield fs
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.slow
def test_s3_checkpoints_logs_and_resume_from_last(s3_server, tmp_path):
    root = "s3://fulmen-runs/exp"
    model = LoggingModel()
    trainer = _trainer(default_root_dir=root, logger=CSVLogger(root), log_every_n_steps=1,
                       callbacks=[ModelCheckpoint(save_last=True)])  # fmt: skip
    trainer.fit(model)
    ckpt_dir = f"{root}/lightning_logs/version_0/checkpoints"
    assert sorted(cloud_io.listdir(ckpt_dir)) == ["epoch=1-step=6.ckpt", "last.ckpt"]
    assert s3_server.exists("fulmen-runs/exp/lightning_logs/version_0/metrics.csv")
    assert os.listdir(tmp_path) == []

    trainer2 = _trainer(max_epochs=3, logger=False, callbacks=[ModelCheckpoint(dirpath=ckpt_dir, save_last=True)])
    resumed = BoringModel()
    trainer2.fit(resumed, ckpt_path="last")
    assert trainer2.global_step == 9
    loaded = BoringModel.load_from_checkpoint(f"{ckpt_dir}/last.ckpt")
    for a, b in zip(_weights(loaded), _weights(resumed)):
        assert torch.equal(a, b)
    assert not any(".tmp" in name for name in cloud_io.listdir(ckpt_dir))
