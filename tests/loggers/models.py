"""The module the logger tests train, built on a framework namespace (fulmen or lightning.pytorch) so that both
frameworks log the same run."""

from __future__ import annotations

from typing import Any

import torch


def model_class(pl: Any, odd_metric_name: bool = False) -> type:
    class Model(pl.LightningModule):
        def __init__(self, lr: float = 0.1, nested: dict | None = None):
            super().__init__()
            self.save_hyperparameters()
            torch.manual_seed(0)
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            loss = self.layer(batch).pow(2).mean()
            self.log("train_loss", loss)
            if odd_metric_name:
                self.log("bad key!", 1.0)
            return loss

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", 1.0 - self.current_epoch * 0.1)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

        def train_dataloader(self):
            data = torch.randn(12, 4, generator=torch.Generator().manual_seed(1))
            return torch.utils.data.DataLoader(data, batch_size=4)

        def val_dataloader(self):
            return torch.utils.data.DataLoader(torch.randn(4, 4), batch_size=4)

    return Model
