"""``import fulmen`` stays cheap, and its submodules are reachable as attributes, as Lightning's are."""

from __future__ import annotations

import subprocess
import sys

import pytest

import fulmen


def test_submodules_are_attributes_loaded_on_first_use():
    assert fulmen.loggers.CSVLogger.__name__ == "CSVLogger"
    assert fulmen.plugins.MixedPrecision is fulmen.precision.MixedPrecision
    assert not hasattr(fulmen, "no_such_module")
    code = "import sys, fulmen; print('fulmen.loggers.tensorboard' in sys.modules, 'fulmen.plugins' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


OPTIONAL = ("tensorboard", "rich", "mlflow", "wandb", "comet_ml", "neptune", "matplotlib", "jsonargparse",
            "onnx", "onnxruntime", "scipy", "psutil", "fsspec", "s3fs", "gcsfs", "safetensors", "sklearn",
            "torchdata", "datasets", "litdata", "streaming")  # fmt: skip


def test_import_and_a_local_run_load_no_optional_package(tmp_path):
    """``import fulmen`` and a fit on local paths pay for none of the optional packages."""
    code = (
        "import sys, fulmen\n"
        "from fulmen import Trainer, LightningModule, LightningDataModule, seed_everything\n"
        "from fulmen.callbacks import ModelCheckpoint, EarlyStopping\n"
        "from fulmen.loggers import CSVLogger\n"
        "from fulmen.demos.boring_classes import BoringModel\n"
        f"Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1, default_root_dir={str(tmp_path)!r},\n"
        "        logger=CSVLogger(" + repr(str(tmp_path)) + "), enable_progress_bar=False).fit(BoringModel())\n"
        f"print(sorted(m for m in {OPTIONAL!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "[]"


@pytest.mark.slow  # two interpreters that fit (torch's optimizer imports torch._dynamo: 2 s each)
def test_info_messages_reach_the_console_as_lightnings_do():
    """Without logging configured, fulmen's INFO messages print (why fit stopped ...); an application's own
    logging configuration receives them instead."""
    code = (
        "import fulmen\n"
        "from fulmen.demos.boring_classes import BoringModel\n"
        "fulmen.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0, logger=False, "
        "enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False).fit(BoringModel())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "`Trainer.fit` stopped: `max_epochs=1` reached." in out.stderr
    configured = "import logging\nlogging.basicConfig(format='APP %(message)s', level=logging.INFO)\n" + code
    out = subprocess.run([sys.executable, "-c", configured], capture_output=True, text=True, check=True)
    assert "APP `Trainer.fit` stopped" in out.stderr and out.stderr.count("`Trainer.fit` stopped") == 1


def test_fulmen_s_earlier_module_paths_still_import():
    """A module that moved keeps its earlier path as a name table (no file there), so programs importing it run."""
    import importlib
    from pathlib import Path

    from fulmen._removed_paths import MOVED

    root = Path(fulmen.__file__).parent
    for old, new in MOVED.items():
        assert not root.joinpath(*old.split(".")[1:]).with_suffix(".py").exists(), old
        module, home = importlib.import_module(old), importlib.import_module(new)
        public = [n for n in vars(home) if not n.startswith("__")][:5]
        assert public and all(getattr(module, n) is getattr(home, n) for n in public), old
    from fulmen.utilities.checkpoint_io import CorruptCheckpointError as old_name

    from fulmen.checkpoint.files import CorruptCheckpointError

    assert old_name is CorruptCheckpointError
