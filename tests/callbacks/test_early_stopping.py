"""``EarlyStopping``'s reasons: the same reason as Lightning for each way a run stops, and kept in checkpoints."""

from __future__ import annotations

import math

import pytest
import torch

import fulmen
from fulmen.callbacks.early_stopping import EarlyStopping, EarlyStoppingReason
from tests.parity import oracle
from tests.parity.oracle import parity


def _model(base, losses):
    class Model(base.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def validation_step(self, batch, batch_idx):
            self.log("val_loss", losses[min(self.current_epoch, len(losses) - 1)])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4, 2)), batch_size=2)

        val_dataloader = train_dataloader

    return Model()


CASES = {
    "patience": ([10.0] * 6, {"patience": 2}),
    "stopping_threshold": ([1.0, 0.7, 0.5, 0.4], {"stopping_threshold": 0.6}),
    "divergence": ([1.0, 5.0, 10.0, 12.0], {"divergence_threshold": 8.0}),
    "non_finite": ([1.0, 0.5, math.nan, 0.1], {}),
    "not_stopped": ([3.0, 2.0, 1.0], {}),
}


@parity
@pytest.mark.parametrize("case", sorted(CASES))
def test_stopping_reason_matches_lightning(tmp_path, case):
    losses, kwargs = CASES[case]
    seen = []
    for base in (fulmen, oracle.lightning()):
        stopper = base.callbacks.EarlyStopping(monitor="val_loss", **kwargs)
        trainer = base.Trainer(max_epochs=len(losses), callbacks=[stopper], logger=False, enable_progress_bar=False,
                               enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path)  # fmt: skip
        trainer.fit(_model(base, losses))
        seen.append((stopper.stopping_reason.name, stopper.stopped_epoch, stopper.stopping_reason_message is None))
    assert seen[0] == seen[1]


def test_the_reason_survives_a_checkpoint():
    stopper = EarlyStopping(monitor="val_loss")
    stopper.stopping_reason, stopper.stopping_reason_message = EarlyStoppingReason.PATIENCE_EXHAUSTED, "why"
    restored = EarlyStopping(monitor="val_loss")
    restored.load_state_dict(stopper.state_dict())
    assert (restored.stopping_reason, restored.stopping_reason_message) == (EarlyStoppingReason.PATIENCE_EXHAUSTED, "why")
    old = EarlyStopping(monitor="val_loss")  # a checkpoint from before the reason was kept
    old.load_state_dict({"wait_count": 2, "stopped_epoch": 5, "best_score": torch.tensor(0.5), "patience": 3})
    assert old.stopping_reason is EarlyStoppingReason.NOT_STOPPED and old.stopping_reason_message is None
