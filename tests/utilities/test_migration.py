"""Checkpoints of older Lightning versions are upgraded as Lightning upgrades them: in memory when loaded
(``migrate_checkpoint``), for good with ``python -m fulmen.utilities.upgrade_checkpoint``.

The old checkpoints are made here from a fresh one, by putting back the keys and layouts that Lightning's
format changes removed (the version, the loop layout before 1.6 / 2.0, ModelCheckpoint's 1.x state key, the
top-level callback keys before 0.10)."""

from __future__ import annotations

import copy
import logging
import os
import pickle
import subprocess
import sys
import types

import pytest
import torch

from fulmen import Trainer
from fulmen.callbacks import EarlyStopping, ModelCheckpoint
from fulmen.demos.boring_classes import BoringModel
from fulmen.utilities.migration import migrate_checkpoint, pl_legacy_patch
from fulmen.utilities.migration.utils import _pl_migrate_checkpoint
from fulmen.utilities.warnings import PossibleUserWarning
from tests.parity import oracle

VERSION = "pytorch-lightning_version"


class _LoggingModel(BoringModel):
    def training_step(self, batch, batch_idx):
        out = super().training_step(batch, batch_idx)
        self.log("train_metric", out["loss"])
        return out


@pytest.fixture(scope="module")
def fresh_checkpoint(tmp_path_factory):
    """A checkpoint fulmen writes today: two epochs of two batches, with ModelCheckpoint and EarlyStopping."""
    root = tmp_path_factory.mktemp("fresh")
    checkpoint_cb = ModelCheckpoint(dirpath=root, monitor="train_metric", save_last=False)
    trainer = Trainer(default_root_dir=root, max_epochs=2, limit_train_batches=2, limit_val_batches=0, logger=False,
                      enable_progress_bar=False, enable_model_summary=False,
                      callbacks=[checkpoint_cb, EarlyStopping(monitor="train_metric", patience=5)])  # fmt: skip
    trainer.fit(_LoggingModel())
    path = root / "fresh.ckpt"
    trainer.save_checkpoint(path)
    return torch.load(path, weights_only=True)


def _as_1_5(checkpoint):
    """The checkpoint as Lightning 1.5 wrote it: no loop progress tracking, ModelCheckpoint's state key with
    ``save_on_train_epoch_end``, apex's AMP state."""
    old = copy.deepcopy(checkpoint)
    old[VERSION] = "1.5.10"
    old.pop("loops")
    old["callbacks"] = {
        (k[:-1] + ", 'save_on_train_epoch_end': True}" if k.startswith("ModelCheckpoint") else k): v
        for k, v in old["callbacks"].items()
    }
    old["amp_scaling_state"] = {"loss_scale": 1.0}
    return old


def _as_0_9(checkpoint):
    """Before 0.10: the checkpoint and early-stopping state were top-level keys, no ``callbacks``."""
    old = _as_1_5(checkpoint)
    old[VERSION] = "0.9.0"
    old.pop("callbacks")
    old.update(checkpoint_callback_best_model_score=torch.tensor(0.5), checkpoint_callback_best_model_path="a.ckpt",
               early_stop_callback_wait=2, early_stop_callback_patience=3)  # fmt: skip
    return old


def _as_1_8(checkpoint):
    """1.6 - 1.9: loops in the layout with a training batch loop, an optimizer position and dataloader loops
    around the evaluation loops (built by running the upgrades up to 1.6.5 on the 1.5 checkpoint)."""
    old, _ = migrate_checkpoint(_as_1_5(checkpoint), target_version="1.6.5")
    old.pop("legacy_pytorch-lightning_version")
    old[VERSION] = "1.8.6"
    old["loops"]["fit_loop"]["epoch_loop.batch_loop.state_dict"] = {"custom": 1}
    batch = {"current": {"ready": 3, "completed": 3, "started": 3, "processed": 3}, "is_last_batch": True}
    old["loops"]["validate_loop"] = {"dataloader_progress": {"current": {"ready": 1, "completed": 1}},
                                     "epoch_loop.batch_progress": batch, "epoch_loop.state_dict": {},
                                     "state_dict": {}}  # fmt: skip
    return old


def _by_name(value):
    """Callback states keyed by class (before 1.5) compared by the class's name: each library has its own."""
    if isinstance(value, dict):
        return {(k.__name__ if isinstance(k, type) else k): _by_name(v) for k, v in value.items()}
    return value


def _assert_same(ours, theirs):
    assert set(map(str, _by_name(ours))) == set(map(str, _by_name(theirs)))
    for key, value in _by_name(ours).items():
        other = _by_name(theirs)[key]
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, other), key
        elif key == "state_dict":
            assert all(torch.equal(value[k], other[k]) for k in value)
        else:
            assert value == other, key


@oracle.parity
@pytest.mark.parametrize("make_old", [_as_0_9, _as_1_5, _as_1_8], ids=["0.9", "1.5", "1.8"])
def test_old_checkpoints_are_upgraded_as_lightning_upgrades_them(fresh_checkpoint, make_old):
    oracle.lightning()
    from lightning.pytorch.utilities.migration import migrate_checkpoint as lightning_migrate

    old = make_old(fresh_checkpoint)
    # before 0.10 the states are keyed by class, which the 1.9 upgrade cannot rename (it warns, as Lightning's)
    expected = "apex|colliding" if make_old is _as_0_9 else "apex"
    with pytest.warns(UserWarning, match=expected):
        ours, applied = migrate_checkpoint(copy.deepcopy(old))
    with pytest.warns(UserWarning, match=expected):
        theirs, their_applied = lightning_migrate(copy.deepcopy(old))
    assert applied == their_applied and "2.0.0" in applied
    _assert_same(ours, theirs)
    assert ours[VERSION] == "2.6.6" and ours["legacy_pytorch-lightning_version"] == old[VERSION]
    assert "amp_scaling_state" not in ours


def test_the_upgrade_gives_the_layout_fulmen_writes(fresh_checkpoint):
    """A 1.5 checkpoint upgraded has the loop entries and callback keys of a checkpoint written today."""
    with pytest.warns(UserWarning, match="apex"):
        upgraded, applied = migrate_checkpoint(_as_1_5(fresh_checkpoint))
    assert list(applied) == ["1.6.0", "1.6.5", "1.9.0", "2.0.0"]
    assert set(upgraded["callbacks"]) == set(fresh_checkpoint["callbacks"])
    fit_loop = upgraded["loops"]["fit_loop"]
    assert fit_loop["epoch_progress"]["current"]["completed"] == fresh_checkpoint["epoch"]
    assert fit_loop["epoch_loop.automatic_optimization.optim_progress"]["optimizer"]["step"]["total"]["completed"] \
        == fresh_checkpoint["global_step"]  # fmt: skip
    # 1.6.0's layout starts this counter at 0, and 1.6.5's upgrade only fills in a missing one (as Lightning's)
    assert fit_loop["epoch_loop.state_dict"]["_batches_that_stepped"] == 0
    assert not any("batch_loop" in key for key in fit_loop)


def test_pre_0_10_callback_state_goes_to_fulmens_callback_classes(fresh_checkpoint):
    """Keyed by class, as the trainer matches a callback's state when there is no newer (string) key."""
    with pytest.warns(UserWarning, match="apex|colliding"):
        upgraded, _ = migrate_checkpoint(_as_0_9(fresh_checkpoint))
    assert upgraded["callbacks"][ModelCheckpoint] == {"best_model_score": torch.tensor(0.5),
                                                      "best_model_path": "a.ckpt"}  # fmt: skip
    assert upgraded["callbacks"][EarlyStopping] == {"wait_count": 2, "patience": 3}
    assert not any(key.startswith(("checkpoint_callback", "early_stop")) for key in upgraded if isinstance(key, str))


def test_upgrades_stop_at_the_target_version_and_record_the_original_once(fresh_checkpoint):
    old = _as_1_5(fresh_checkpoint)
    partial, applied = migrate_checkpoint(old, target_version="1.6.0")
    assert list(applied) == ["1.6.0"] and partial is old  # in place
    assert "epoch_loop.batch_loop.optimizer_loop.optim_progress" in partial["loops"]["fit_loop"]
    assert partial["legacy_pytorch-lightning_version"] == "1.5.10"
    again, applied = migrate_checkpoint(partial)
    assert applied == {}  # now at the current version: nothing left to do
    assert again["legacy_pytorch-lightning_version"] == "1.5.10"


@oracle.parity
def test_a_newer_checkpoint_is_left_as_it_is_with_lightnings_warning(fresh_checkpoint):
    oracle.lightning()
    from lightning.pytorch.utilities.migration import migrate_checkpoint as lightning_migrate

    newer = {**fresh_checkpoint, VERSION: "9.0.0"}
    with pytest.warns(PossibleUserWarning, match="newer than"):
        ours, applied = migrate_checkpoint(dict(newer))
    with pytest.warns(UserWarning, match="newer than"):
        _, their_applied = lightning_migrate(dict(newer))
    assert applied == their_applied == {} and ours[VERSION] == "9.0.0" and "legacy_pytorch-lightning_version" not in ours


@oracle.parity
def test_colliding_model_checkpoint_keys_are_kept_with_lightnings_warning():
    oracle.lightning()
    from lightning.pytorch.utilities.migration import migrate_checkpoint as lightning_migrate

    key = "ModelCheckpoint{'monitor': None, 'mode': 'min', 'every_n_train_steps': 0, 'every_n_epochs': 1, " \
          "'train_time_interval': None"  # fmt: skip
    old = {VERSION: "1.8.0", "epoch": 0, "global_step": 0, "loops": {"fit_loop": {"epoch_loop.state_dict": {}}},
           "callbacks": {key + ", 'save_on_train_epoch_end': True}": {"a": 1},
                         key + ", 'save_on_train_epoch_end': False}": {"a": 2}}}  # fmt: skip
    with pytest.warns(PossibleUserWarning, match="colliding"):
        ours, _ = migrate_checkpoint(copy.deepcopy(old))
    with pytest.warns(UserWarning, match="colliding"):
        theirs, _ = lightning_migrate(copy.deepcopy(old))
    assert ours["callbacks"] == theirs["callbacks"] == old["callbacks"]


def test_a_checkpoint_without_a_version_is_named():
    with pytest.raises(KeyError, match="pytorch-lightning_version"):
        migrate_checkpoint({"state_dict": {}})
    plain = {"state_dict": {}}
    assert _pl_migrate_checkpoint(plain, "weights.safetensors") is plain  # loading leaves it alone


def test_loading_names_the_command_that_upgrades_the_file(fresh_checkpoint, caplog):
    with caplog.at_level(logging.INFO, logger="fulmen"), pytest.warns(UserWarning, match="apex"):
        _pl_migrate_checkpoint(_as_1_5(fresh_checkpoint), checkpoint_path=os.path.join("logs", "old.ckpt"))
    assert "from v1.5.10 to v2.6.6" in caplog.text
    assert f"python -m fulmen.utilities.upgrade_checkpoint {os.path.join('logs', 'old.ckpt')}" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="fulmen"):
        _pl_migrate_checkpoint(copy.deepcopy(fresh_checkpoint), checkpoint_path="new.ckpt")
    assert "upgraded" not in caplog.text  # a current checkpoint needs nothing


@pytest.mark.filterwarnings("ignore:The dirpath has changed")
def test_a_trainer_resumes_an_old_checkpoint_where_it_stopped(fresh_checkpoint, tmp_path):
    """Resuming from a 1.5 file: the upgraded loop state puts the run at the epoch and step it had reached."""
    old = _as_1_5(fresh_checkpoint)
    del old["amp_scaling_state"]
    path = tmp_path / "old.ckpt"
    torch.save(old, path)
    trainer = Trainer(default_root_dir=tmp_path, max_epochs=3, limit_train_batches=2, limit_val_batches=0,
                      logger=False, enable_progress_bar=False, enable_model_summary=False,
                      callbacks=[ModelCheckpoint(dirpath=tmp_path, monitor="train_metric"),
                                 EarlyStopping(monitor="train_metric", patience=5)])  # fmt: skip
    trainer.fit(_LoggingModel(), ckpt_path=path)
    assert trainer.global_step == fresh_checkpoint["global_step"] + 2  # one more epoch of two batches
    assert trainer.current_epoch == 3


@pytest.mark.filterwarnings("ignore:You have multiple `ModelCheckpoint` callback states")
def test_old_checkpoints_load_into_the_module(fresh_checkpoint, tmp_path):
    path = tmp_path / "old.ckpt"
    old = _as_0_9(fresh_checkpoint)
    del old["amp_scaling_state"]
    torch.save(old, path)
    model = _LoggingModel.load_from_checkpoint(path, weights_only=False)
    assert all(torch.equal(p, fresh_checkpoint["state_dict"][k]) for k, p in model.state_dict().items())


# -- reading files that pickled objects of old Lightning versions -----------------------------------------------
def _legacy_objects():
    """An ``AttributeDict`` and ``_gpus_arg_default`` under the module paths Lightning 1.2 pickled them with
    (``argparse_utils`` no longer exists anywhere)."""
    parsing = types.ModuleType("pytorch_lightning.utilities.parsing")
    argparse_utils = types.ModuleType("pytorch_lightning.utilities.argparse_utils")

    class AttributeDict(dict):
        pass

    def _gpus_arg_default(value):
        return value

    for module, obj in ((parsing, AttributeDict), (argparse_utils, _gpus_arg_default)):
        obj.__module__, obj.__qualname__ = module.__name__, obj.__name__
        setattr(module, obj.__name__, obj)
    # the parent packages too: pickle imports them, and the installed pytorch_lightning must not be the one read
    modules = {m.__name__: m for m in (parsing, argparse_utils)}
    modules.update({name: types.ModuleType(name) for name in ("pytorch_lightning", "pytorch_lightning.utilities")})
    return modules, AttributeDict, _gpus_arg_default


def test_legacy_patch_loads_objects_old_lightning_versions_pickled(tmp_path, monkeypatch):
    from fulmen.utilities import argparse as fulmen_argparse
    from fulmen.utilities import enums as fulmen_enums
    from fulmen.utilities.parsing import AttributeDict

    modules, legacy_dict, legacy_fn = _legacy_objects()
    path = tmp_path / "old.ckpt"
    with monkeypatch.context() as patch:
        for name, module in modules.items():
            patch.setitem(sys.modules, name, module)
        torch.save({"hparams": legacy_dict(gpus=legacy_fn, lr=0.1), VERSION: "1.2.0"}, path)
    unpickler = pickle.Unpickler
    with pl_legacy_patch():
        assert fulmen_argparse._gpus_arg_default(3) == 3 and "fulmen.utilities.argparse_utils" in sys.modules
        assert fulmen_enums._FaultTolerantMode("automatic") == "automatic"
        with pytest.warns(UserWarning, match="Redirecting import") as record:
            checkpoint = torch.load(path, weights_only=False)
    assert sorted(str(w.message) for w in record) == [
        "Redirecting import of pytorch_lightning.utilities.argparse_utils._gpus_arg_default to "
        "fulmen.utilities.argparse_utils._gpus_arg_default",
        "Redirecting import of pytorch_lightning.utilities.parsing.AttributeDict to "
        "fulmen.utilities.parsing.AttributeDict",
    ]
    hparams = checkpoint["hparams"]
    assert type(hparams) is AttributeDict and hparams.lr == 0.1 and hparams.gpus(5) == 5
    # everything the patch added is gone again
    assert pickle.Unpickler is unpickler and "fulmen.utilities.argparse_utils" not in sys.modules
    assert not hasattr(fulmen_argparse, "_gpus_arg_default") and not hasattr(fulmen_enums, "_FaultTolerantMode")


# -- python -m fulmen.utilities.upgrade_checkpoint ------------------------------------------------------------------
def _run(module, *args, cwd):
    return subprocess.run([sys.executable, "-m", module, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})  # fmt: skip


@pytest.mark.slow
@oracle.parity
def test_upgrade_command_upgrades_in_place_as_lightnings_does(fresh_checkpoint, tmp_path, monkeypatch):
    oracle.lightning()
    old = _as_1_5(fresh_checkpoint)
    for name in ("ours", "theirs"):
        (tmp_path / name / "sub").mkdir(parents=True)
        torch.save(old, tmp_path / name / "sub" / "a.ckpt")
        torch.save(old, tmp_path / name / "b.ckpt")
        (tmp_path / name / "c.pt").write_bytes(b"not looked at: another extension")
    originals = {name: (tmp_path / "ours" / f"{name}.ckpt").read_bytes() for name in ("sub/a", "b")}
    ours = _run("fulmen.utilities.upgrade_checkpoint", tmp_path / "ours", cwd=tmp_path)
    theirs = _run("lightning.pytorch.utilities.upgrade_checkpoint", tmp_path / "theirs", cwd=tmp_path)
    assert ours.returncode == theirs.returncode == 0, ours.stderr + theirs.stderr
    for relative in ("sub/a", "b"):
        assert (tmp_path / "ours" / f"{relative}.bak").read_bytes() == originals[relative]  # the untouched original
        upgraded = torch.load(tmp_path / "ours" / f"{relative}.ckpt", weights_only=True)
        _assert_same(upgraded, torch.load(tmp_path / "theirs" / f"{relative}.ckpt", weights_only=True))
        assert upgraded[VERSION] == "2.6.6" and "amp_scaling_state" not in upgraded
    assert sorted(os.listdir(tmp_path / "ours")) == sorted(os.listdir(tmp_path / "theirs"))
    # a second upgrade keeps the first backup, the original (the command's main() in this process: the command
    # line itself ran above, and a second start of it would only add its import time)
    from fulmen.utilities import upgrade_checkpoint

    monkeypatch.setattr(sys, "argv", ["upgrade_checkpoint", str(tmp_path / "ours" / "b.ckpt")])
    upgrade_checkpoint.main()
    assert (tmp_path / "ours" / "b.bak").read_bytes() == originals["b"]


def test_upgrade_command_errors(tmp_path, monkeypatch, caplog):
    from fulmen.utilities import upgrade_checkpoint

    def run(*argv):
        monkeypatch.setattr(sys, "argv", ["upgrade_checkpoint", *map(str, argv)])
        caplog.clear()
        with pytest.raises(SystemExit) as exit_info:
            upgrade_checkpoint.main()
        return exit_info.value.code

    assert run(tmp_path / "missing.ckpt") == 1 and "does not exist" in caplog.text
    (tmp_path / "a.pt").write_bytes(b"")
    assert run(tmp_path) == 1 and "No checkpoint files with extension .ckpt" in caplog.text
    assert run(tmp_path, "--extension", "txt") == 1 and "extension .txt" in caplog.text


def test_upgrade_refuses_pickled_objects_unless_trusted(tmp_path, monkeypatch, caplog):
    from fulmen.utilities import upgrade_checkpoint

    modules, legacy_dict, legacy_fn = _legacy_objects()
    path = tmp_path / "old.ckpt"
    with monkeypatch.context() as patch:
        for name, module in modules.items():
            patch.setitem(sys.modules, name, module)
        torch.save({"hparams": legacy_dict(lr=0.1), "gpus": legacy_fn, VERSION: "1.2.0", "epoch": 0,
                    "global_step": 0}, path)  # fmt: skip
    monkeypatch.setattr(sys, "argv", ["upgrade_checkpoint", str(path)])
    with pytest.raises(SystemExit):
        upgrade_checkpoint.main()
    assert "--no-weights-only" in caplog.text and (tmp_path / "old.bak").exists()
    monkeypatch.setattr(sys, "argv", ["upgrade_checkpoint", str(path), "--no-weights-only"])
    with pytest.warns(UserWarning, match="Redirecting import"):
        upgrade_checkpoint.main()
    upgraded = torch.load(path, weights_only=False)
    assert upgraded[VERSION] == "2.6.6" and upgraded["loops"]["fit_loop"]["epoch_progress"]


def test_pre_0_10_state_is_keyed_by_the_class_only_once_it_is_defined(tmp_path):
    """The upgrade sits below the callbacks: it finds ModelCheckpoint / EarlyStopping through the classes that
    registered themselves. In a process that never defined one, no instance can claim the state, so its name
    keys it; the ``upgrade_checkpoint`` command loads both, so the files it writes hold the classes."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from fulmen.utilities.migration import migrate_checkpoint\n"
        "ckpt = {'epoch': 0, 'global_step': 0, 'pytorch-lightning_version': '0.9.0', 'state_dict': {},\n"
        "        'checkpoint_callback_best_model_path': 'a.ckpt', 'early_stop_callback_wait': 2}\n"
        "assert 'fulmen.callbacks.early_stopping' not in sys.modules\n"
        "migrated, _ = migrate_checkpoint(ckpt)\n"
        "print(sorted(k if isinstance(k, str) else k.__name__ + '-class' for k in migrated['callbacks']))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")[-2]
    assert out == "['EarlyStopping', 'ModelCheckpoint']"
    from fulmen.callbacks import EarlyStopping, ModelCheckpoint
    from fulmen.utilities.migration import migrate_checkpoint

    ckpt = {"epoch": 0, "global_step": 0, "pytorch-lightning_version": "0.9.0", "state_dict": {},
            "checkpoint_callback_best_model_path": "a.ckpt", "early_stop_callback_wait": 2}  # fmt: skip
    migrated, _ = migrate_checkpoint(ckpt)
    assert set(migrated["callbacks"]) == {EarlyStopping, ModelCheckpoint}
