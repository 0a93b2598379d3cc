"""``fulmen.install_as_lightning()`` and ``python -m fulmen.as_lightning``: a program (or a library) that imports
``lightning.pytorch`` / ``pytorch_lightning`` runs on fulmen unchanged, its subprocesses included.

Every check runs in a fresh interpreter: the alias changes a process's imports for good, and this test process
may have imported Lightning itself (the parity tests do)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str, *args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    script = cwd / "program.py"
    script.write_text(textwrap.dedent(code))
    env = dict(os.environ, PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    result = subprocess.run(
        [sys.executable, *args] if args else [sys.executable, str(script)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.mark.slow  # two interpreters with torch and Lightning (5 s)
def test_lightning_names_are_fulmen_modules(tmp_path):
    out = _run(
        """
        import fulmen
        fulmen.install_as_lightning()
        fulmen.install_as_lightning()  # a second call changes nothing

        import lightning
        import lightning.fabric, lightning_fabric, lightning_utilities
        import lightning.pytorch as pl
        import pytorch_lightning as ptl
        from lightning.pytorch.callbacks.early_stopping import EarlyStopping
        from pytorch_lightning.loggers import CSVLogger
        import lightning.pytorch.utilities.rank_zero as rank_zero
        import fulmen.utilities.rank_zero

        assert EarlyStopping is fulmen.callbacks.EarlyStopping and CSVLogger is fulmen.loggers.CSVLogger
        assert pl.Trainer is ptl.Trainer is lightning.Trainer is fulmen.Trainer
        assert rank_zero is fulmen.utilities.rank_zero  # a submodule is fulmen's module object itself
        assert pl.__version__ == ptl.__version__ == "2.6.6" and fulmen.__version__ != "2.6.6"
        # the real packages stay real
        assert "site-packages" in lightning.fabric.__file__ and lightning_fabric.__name__ == "lightning_fabric"
        assert lightning.pytorch is pl

        class LibraryCallback(ptl.Callback):  # a library's class, subclassing "Lightning"
            def on_train_end(self, trainer, module):
                print("library callback ran", isinstance(trainer, pl.Trainer))

        class Model(fulmen.demos.boring_classes.BoringModel):
            pass

        assert isinstance(Model(), pl.LightningModule) and isinstance(LibraryCallback(), fulmen.Callback)
        pl.Trainer(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False, callbacks=[LibraryCallback()]).fit(Model())
        """,
        cwd=tmp_path,
    )
    assert "library callback ran True" in out.stdout


@pytest.mark.slow
def test_submodules_are_attributes_as_after_lightnings_imports(tmp_path):
    _run(
        """
        import fulmen
        fulmen.install_as_lightning()
        import lightning.pytorch as pl
        assert pl.callbacks.early_stopping.EarlyStopping is pl.callbacks.EarlyStopping
        assert pl.callbacks.model_checkpoint.ModelCheckpoint is fulmen.callbacks.ModelCheckpoint
        assert pl.loggers.csv_logs.CSVLogger is fulmen.loggers.CSVLogger
        assert pl.utilities.rank_zero.rank_zero_only is fulmen.utilities.rank_zero_only
        assert pl.trainer.states.TrainerFn is fulmen.trainer.states.TrainerFn
        """,
        cwd=tmp_path,
    )


def test_without_lightning_installed_lightning_is_a_package_around_fulmen(tmp_path):
    out = _run(
        """
        import importlib.abc, sys

        class HideLightning(importlib.abc.MetaPathFinder):  # as if lightning were not installed
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("lightning", "pytorch_lightning", "lightning_fabric"):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)

        sys.meta_path.insert(0, HideLightning())
        import fulmen
        fulmen.install_as_lightning()
        import lightning as L
        import lightning.pytorch as pl
        from pytorch_lightning.callbacks import ModelCheckpoint
        assert L.pytorch is pl and L.Trainer is fulmen.Trainer and ModelCheckpoint is fulmen.callbacks.ModelCheckpoint
        try:
            import lightning.fabric
        except ModuleNotFoundError as err:
            print("no fabric:", err.name)
        try:
            import lightning.pytorch.no_such_module
        except ModuleNotFoundError as err:
            print(err)
        """,
        cwd=tmp_path,
    )
    assert "no fabric: lightning.fabric" in out.stdout
    assert "No module named 'lightning.pytorch.no_such_module': fulmen has no counterpart" in out.stdout


@pytest.mark.slow
def test_installing_after_lightning_was_imported_names_the_modules(tmp_path):
    out = _run(
        """
        import pytorch_lightning.callbacks.early_stopping
        import fulmen
        try:
            fulmen.install_as_lightning()
        except RuntimeError as err:
            print(err)
        """,
        cwd=tmp_path,
    )
    assert "install_as_lightning() was called after Lightning's own modules were imported: " in out.stdout
    assert "pytorch_lightning" in out.stdout and "python -m fulmen.as_lightning" in out.stdout


# An unchanged Lightning program: the classes it defines at the top are what spawned DataLoader workers unpickle,
# so a worker that imported real Lightning (or nothing) would fail or say so.
PROGRAM = """
import os, subprocess, sys
import torch
import lightning.pytorch as pl
from lightning.pytorch.demos.boring_classes import BoringModel


def where(module=pl):
    return type(module.Trainer).__module__ + ":" + module.Trainer.__module__


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.full((32,), float(i))


def report_worker(_):
    print("worker", where(), flush=True)


if __name__ == "__main__":
    print("main", where(), sys.argv[1:], flush=True)
    child = subprocess.run([sys.executable, "-c", "import pytorch_lightning as pl; print(pl.Trainer.__module__)"],
                           capture_output=True, text=True, check=True)
    print("subprocess", child.stdout.strip(), flush=True)
    loader = torch.utils.data.DataLoader(Data(), batch_size=4, num_workers=1, multiprocessing_context="spawn",
                                         worker_init_fn=report_worker)
    pl.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
               enable_model_summary=False).fit(BoringModel(), loader)
    print("done", flush=True)
"""


@pytest.mark.slow
def test_python_m_fulmen_as_lightning_runs_a_program_and_its_subprocesses(tmp_path):
    out = _run(PROGRAM, "-m", "fulmen.as_lightning", "program.py", "--flag", "1", cwd=tmp_path).stdout
    assert "main builtins:fulmen.trainer.trainer ['--flag', '1']" in out.replace("<class 'type'>", "builtins")
    assert "subprocess fulmen.trainer.trainer" in out
    assert "worker builtins:fulmen.trainer.trainer" in out.replace("<class 'type'>", "builtins")
    assert out.rstrip().endswith("done")


def test_python_m_fulmen_as_lightning_runs_a_module(tmp_path):
    (tmp_path / "mypackage").mkdir()
    (tmp_path / "mypackage" / "__init__.py").write_text("")
    (tmp_path / "mypackage" / "train.py").write_text(
        "import sys\nimport pytorch_lightning as pl\nprint(pl.Trainer.__module__, pl.__version__, sys.argv[1:])\n"
    )
    out = _run("", "-m", "fulmen.as_lightning", "-m", "mypackage.train", "x", cwd=tmp_path).stdout
    assert "fulmen.trainer.trainer 2.6.6 ['x']" in out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


DDP_PROGRAM = """
import lightning.pytorch as pl
from lightning.pytorch.demos.boring_classes import BoringModel


class Model(BoringModel):
    def on_train_end(self):
        print(f"rank {self.global_rank} of {self.trainer.world_size}: {type(self.trainer).__module__}", flush=True)


if __name__ == "__main__":
    pl.Trainer(accelerator="cpu", strategy="ddp", devices=2, max_steps=2, logger=False,
               enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False).fit(Model())
"""


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["fulmen", "torchrun"])
def test_ddp_ranks_started_by_fulmen_or_torchrun_run_on_fulmen(tmp_path, launcher):
    args = ["-m", "fulmen.as_lightning"]
    if launcher == "torchrun":
        args += ["-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
                 f"--master_port={_free_port()}"]  # fmt: skip
    out = _run(DDP_PROGRAM, *args, "program.py", cwd=tmp_path, timeout=240).stdout
    assert "rank 0 of 2: fulmen.trainer.trainer" in out and "rank 1 of 2: fulmen.trainer.trainer" in out


def test_usage(tmp_path):
    result = subprocess.run([sys.executable, "-m", "fulmen.as_lightning"], capture_output=True, text=True)
    assert result.returncode == 2 and "usage: python -m fulmen.as_lightning SCRIPT" in result.stderr
    missing = subprocess.run([sys.executable, "-m", "fulmen.as_lightning", str(tmp_path / "nope.py")],
                             capture_output=True, text=True)  # fmt: skip
    assert missing.returncode != 0 and "nope.py" in missing.stderr


UMBRELLA_PROGRAM = """
import sys
import lightning
import lightning.pytorch as pl

print("fabric imported at start:", "lightning.fabric" in sys.modules)
print("metadata:", lightning.__version__, lightning.__license__, lightning.__author__)
print("trainer:", lightning.Trainer is pl.Trainer, lightning.LightningModule.__module__)
print("fabric:", lightning.Fabric.__module__, lightning.seed_everything.__module__)
print("logger:", [type(h).__name__ for h in __import__("logging").getLogger("lightning").handlers])
"""


@pytest.mark.slow
def test_the_installed_umbrella_package_imports_fabric_only_when_read(tmp_path):
    """With Lightning installed, ``import lightning`` under the alias is the real package's files without its
    ``__init__``'s Fabric import (seconds of every aliased process's start); its names are the same."""
    import lightning

    out = _run(UMBRELLA_PROGRAM, "-m", "fulmen.as_lightning", "program.py", cwd=tmp_path).stdout
    assert "fabric imported at start: False" in out
    assert f"metadata: {lightning.__version__} {lightning.__license__} {lightning.__author__}" in out
    assert "trainer: True fulmen.core.module" in out
    assert "fabric: lightning.fabric.fabric lightning.fabric.utilities.seed" in out
    assert "logger: ['StreamHandler']" in out
