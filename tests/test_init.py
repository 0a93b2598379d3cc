"""``import fulmen`` stays cheap, and its submodules are reachable as attributes, as Lightning's are."""

from __future__ import annotations

import subprocess
import sys

import fulmen


def test_submodules_are_attributes_loaded_on_first_use():
    assert fulmen.loggers.CSVLogger.__name__ == "CSVLogger"
    assert fulmen.plugins.MixedPrecision is fulmen.precision.MixedPrecision
    assert not hasattr(fulmen, "no_such_module")
    code = "import sys, fulmen; print('fulmen.loggers.tensorboard' in sys.modules, 'fulmen.plugins' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


OPTIONAL = ("tensorboard", "rich", "mlflow", "wandb", "comet_ml", "neptune", "matplotlib", "jsonargparse",
            "onnx", "onnxruntime", "scipy", "psutil", "fsspec", "s3fs", "gcsfs", "safetensors", "sklearn")  # fmt: skip


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
