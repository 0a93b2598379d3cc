"""Train a small classifier on scikit-learn's bundled digits (8x8 images, 10 classes).

Run: ``python -m fulmen.demos.digits`` (or ``fulmen-demo``). It trains with a validation split, a progress
bar and early stopping, and prints the validation accuracy. The data ships inside scikit-learn, so no
download happens.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

import fulmen as pl
from fulmen.callbacks import EarlyStopping
from fulmen.utilities.in_memory import InMemoryDataLoader


class DigitsDataModule(pl.LightningDataModule):
    def __init__(self, batch_size: int = 64, val_fraction: float = 0.2, seed: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage: str) -> None:
        try:
            from sklearn.datasets import load_digits
        except ImportError as err:  # the demo's only optional dependency
            raise SystemExit("The digits demo needs scikit-learn: pip install 'fulmen[demo]'") from err
        x, y = load_digits(return_X_y=True)
        x = torch.tensor(x, dtype=torch.float32) / 16.0
        y = torch.tensor(y, dtype=torch.long)
        g = torch.Generator().manual_seed(self.hparams.seed)
        order = torch.randperm(len(x), generator=g)
        n_val = int(len(x) * self.hparams.val_fraction)
        val_idx, train_idx = order[:n_val], order[n_val:]
        self.train_set = TensorDataset(x[train_idx], y[train_idx])
        self.val_set = TensorDataset(x[val_idx], y[val_idx])

    # The whole data set is a few hundred kB: batches are sliced from tensors in memory (about 20x faster
    # per epoch than DataLoader(TensorDataset), which collates every batch sample by sample).
    def train_dataloader(self) -> InMemoryDataLoader:
        return InMemoryDataLoader(
            self.train_set, batch_size=self.hparams.batch_size, shuffle=True, seed=self.hparams.seed
        )

    def val_dataloader(self) -> InMemoryDataLoader:
        return InMemoryDataLoader(self.val_set, batch_size=256)


class DigitsClassifier(pl.LightningModule):
    def __init__(self, hidden: int = 128, lr: float = 3e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", (logits.argmax(-1) == y).float().mean(), prog_bar=True)

    def configure_optimizers(self) -> Any:
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description="Train a digits classifier with fulmen.")
    parser.add_argument("--max-epochs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress-bar", action="store_true")
    args = parser.parse_args(argv)
    pl.seed_everything(args.seed, verbose=False)
    torch.set_num_threads(min(2, torch.get_num_threads()))
    datamodule = DigitsDataModule(seed=args.seed)
    model = DigitsClassifier()
    trainer = pl.Trainer(
        max_epochs=args.max_epochs,
        callbacks=[EarlyStopping(monitor="val_acc", mode="max", patience=5)],
        enable_progress_bar=not args.no_progress_bar,
        logger=False,
        enable_checkpointing=False,
    )
    trainer.fit(model, datamodule=datamodule)
    accuracy = float(trainer.callback_metrics["val_acc"])
    print(
        f"validation accuracy: {accuracy:.2%} after {trainer.current_epoch} epochs ({trainer.global_step} steps)"
    )
    return accuracy


if __name__ == "__main__":
    main()
