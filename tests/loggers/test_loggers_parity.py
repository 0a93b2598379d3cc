"""CSV and TensorBoard output against lightning==2.6.6: same files, metric names, steps and values; the
TensorBoard event files are read back with TensorBoard's own reader."""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from tests.parity import oracle

pl = oracle.lightning()
pytestmark = oracle.parity

import fulmen  # noqa: E402
from fulmen.loggers import CSVLogger, TensorBoardLogger  # noqa: E402


def _model_class(base: Any) -> Any:
    from torch.utils.data import DataLoader, TensorDataset

    class Model(base.LightningModule):
        def __init__(self, lr: float = 0.1, name: str = "m") -> None:
            super().__init__()
            self.save_hyperparameters()
            torch.manual_seed(0)
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            loss = torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
            self.log("train_loss", loss, on_step=True, on_epoch=True)
            self.logger.experiment  # noqa: B018 - the user-facing handle must exist
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

        def train_dataloader(self):
            g = torch.Generator().manual_seed(1)
            return DataLoader(TensorDataset(torch.randn(40, 4, generator=g), torch.randn(40, 1, generator=g)),
                              batch_size=4)  # fmt: skip

        def val_dataloader(self):
            g = torch.Generator().manual_seed(2)
            return DataLoader(TensorDataset(torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)),
                              batch_size=4)  # fmt: skip

    return Model


def _fit(framework: Any, loggers: list[Any], root: Path) -> Any:
    trainer = framework.Trainer(
        max_epochs=2, logger=loggers, log_every_n_steps=3, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, num_sanity_val_steps=0, default_root_dir=root,
    )  # fmt: skip
    trainer.fit(_model_class(framework)())
    return trainer


def _csv_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path) as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _tb_scalars(log_dir: str) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(log_dir)
    acc.Reload()
    return {tag: [(e.step, round(e.value, 5)) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_csv_and_tensorboard_match_lightning(tmp_path):
    pytest.importorskip("tensorboard")
    results = {}
    for name, framework, csv_cls, tb_cls in (
        ("fulmen", fulmen, CSVLogger, TensorBoardLogger),
        ("lightning", pl, pl.loggers.CSVLogger, pl.loggers.TensorBoardLogger),
    ):
        root = tmp_path / name
        loggers = [csv_cls(root, name="csv"), tb_cls(root, name="tb", default_hp_metric=False)]
        trainer = _fit(framework, loggers, root)
        csv_dir = Path(loggers[0].log_dir)
        header, rows = _csv_rows(csv_dir / "metrics.csv")
        results[name] = {
            "csv_dir": os.path.relpath(csv_dir, root),
            "tb_dir": os.path.relpath(loggers[1].log_dir, root),
            "trainer_log_dir": os.path.relpath(trainer.log_dir, root),
            "csv_header": sorted(header),
            "csv_rows": [
                {k: (f"{float(v):.5f}" if v and k not in ("epoch", "step") else v) for k, v in r.items()}
                for r in rows
            ],
            "hparams": yaml.safe_load((csv_dir / "hparams.yaml").read_text()),
            "tb_files": sorted(p.name.split(".")[0] for p in Path(loggers[1].log_dir).iterdir()),
            "tb": _tb_scalars(loggers[1].log_dir),
        }
    assert results["fulmen"] == results["lightning"]
    assert results["fulmen"]["tb"]["train_loss_step"], "TensorBoard read the step metrics back"


def test_versions_increase_and_default_logger(tmp_path):
    first = CSVLogger(tmp_path, name="exp")
    _fit(fulmen, [first], tmp_path)
    second = CSVLogger(tmp_path, name="exp")
    _fit(fulmen, [second], tmp_path)
    assert (first.version, second.version) == (0, 1)
    assert Path(second.log_dir) == tmp_path / "exp" / "version_1"
    trainer = fulmen.Trainer(default_root_dir=tmp_path, max_epochs=1)
    expected = TensorBoardLogger if _has_tensorboard() else CSVLogger
    assert isinstance(trainer.logger, expected)
    assert trainer.logger.save_dir == str(tmp_path)


def _has_tensorboard() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorboard") is not None
