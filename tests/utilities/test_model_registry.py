"""utilities.model_registry: registry paths read as Lightning reads them, a downloaded model's checkpoint
found on disk; downloading needs ``litmodels`` and says so."""

from __future__ import annotations

import sys
import types

import pytest

from fulmen.utilities import model_registry
from fulmen.utilities.model_registry import download_model_from_registry, find_model_local_ckpt_path
from tests.parity import oracle

PATHS = ["registry", "REGISTRY:model-name", "registry:model-name", "registry:model-name:version:1.0",
         "registry:version:v2", "registry:org/model:version:v3", "something_registry", "", None, "model.ckpt"]  # fmt: skip


def _outcome(fn, *args):
    try:
        return fn(*args)
    except ValueError:
        return ValueError


@oracle.parity
@pytest.mark.parametrize("path", PATHS)
def test_registry_paths_are_read_as_lightning_reads_them(path):
    theirs = oracle.lightning("lightning.pytorch.utilities.model_registry")
    for name, extra in (("_is_registry", ()), ("_parse_registry_model_version", ()),
                        ("_determine_model_name", ("default-model",)), ("_determine_model_name", (None,))):  # fmt: skip
        assert _outcome(getattr(model_registry, name), path, *extra) == _outcome(getattr(theirs, name), path, *extra)
    for model in ("model-name", "org/model:1.0", ""):
        assert _outcome(model_registry._determine_model_folder, model, "/root") == _outcome(
            theirs._determine_model_folder, model, "/root"
        )


@oracle.parity
def test_the_downloaded_checkpoint_is_found_as_lightning_finds_it(tmp_path):
    theirs = oracle.lightning("lightning.pytorch.utilities.model_registry").find_model_local_ckpt_path
    folder = tmp_path / "org_model_v3"
    folder.mkdir()
    (folder / "notes.txt").write_text("")
    with pytest.raises(RuntimeError, match="Parsing files from downloaded model: org/model:v3"):
        find_model_local_ckpt_path("registry:org/model:version:v3", None, str(tmp_path))
    (folder / "best.ckpt").write_bytes(b"")
    for args in (("registry:org/model:version:v3", None, str(tmp_path)), ("registry:version:v3", "org/model", str(tmp_path))):
        assert find_model_local_ckpt_path(*args) == theirs(*args) == str(folder / "best.ckpt")
    with pytest.raises(FileNotFoundError):
        find_model_local_ckpt_path("registry:other", None, str(tmp_path))


class _Trainer:
    def __init__(self, root, local_rank=0, registry=None):
        self.default_root_dir, self.local_rank = str(root), local_rank
        self.config = types.SimpleNamespace(model_registry=registry)
        self.barriers = []
        self.strategy = types.SimpleNamespace(barrier=self.barriers.append)


def test_downloading_without_litmodels_names_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "litmodels", None)  # not importable, whether installed or not
    with pytest.raises(ImportError, match="`litmodels` package.*pip install litmodels"):
        download_model_from_registry("registry:model", _Trainer(tmp_path))
    trainer = _Trainer(tmp_path, local_rank=1)  # other ranks only wait for local rank 0
    download_model_from_registry("registry:model", trainer)
    assert trainer.barriers == ["download_model_from_registry"]


def test_downloading_goes_to_the_models_folder(tmp_path, monkeypatch):
    calls = []
    fake = types.ModuleType("litmodels")
    fake.download_model = lambda name, download_dir: calls.append((name, download_dir)) or [f"{download_dir}/m.ckpt"]
    monkeypatch.setitem(sys.modules, "litmodels", fake)
    trainer = _Trainer(tmp_path, registry="team/model:v1")  # the Trainer's registry names the model (its version aside)
    download_model_from_registry("registry:version:v2", trainer)
    assert calls == [("team/model:v2", str(tmp_path / "team_model_v2"))]
    assert trainer.barriers == ["download_model_from_registry"]
    fake.download_model = lambda name, download_dir: []
    with pytest.raises(RuntimeError, match="Download model failed - other"):
        download_model_from_registry("registry:other", trainer)
