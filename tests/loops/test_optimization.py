"""How the closure reaches the optimizer: torch's optimizers (LBFGS aside) get it run just before their step;
any other optimizer receives it and may call it as often as it likes."""

from __future__ import annotations

import torch
from torch import nn

import fulmen


class TwoEvaluations(torch.optim.SGD):
    """A SAM-like optimizer from another library: evaluates the loss twice per step."""

    def step(self, closure=None):
        closure()
        loss = closure()
        super().step()
        return loss


class Counting(fulmen.LightningModule):
    def __init__(self, optimizer_cls):
        super().__init__()
        self.net = nn.Linear(3, 1)
        self.optimizer_cls = optimizer_cls
        self.calls = 0

    def training_step(self, batch, batch_idx):
        self.calls += 1
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        return self.optimizer_cls(self.parameters(), lr=0.1)


def _fit(model):
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 3)), batch_size=2)
    trainer = fulmen.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False)  # fmt: skip
    trainer.fit(model, data)
    return trainer


def test_optimizers_from_elsewhere_get_the_closure_and_torchs_run_it_once():
    assert TwoEvaluations.__module__ != "torch.optim.sgd"
    other = Counting(TwoEvaluations)
    _fit(other)
    assert other.calls == 8  # 4 batches, the closure evaluated twice each
    plain = Counting(torch.optim.SGD)
    trainer = _fit(plain)
    assert plain.calls == 4 and trainer.global_step == 4


def test_lbfgs_reevaluates_the_closure():
    model = Counting(lambda params, lr: torch.optim.LBFGS(params, lr=lr, max_iter=3))
    _fit(model)
    assert model.calls > 4
