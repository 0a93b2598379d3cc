"""torch.compile with the inductor backend on the CPU: train, validate, checkpoint, resume.

One test, because a cold inductor compile takes tens of seconds here; the eager-backend test in
test_trainer.py covers the cheap paths.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import fulmen
from fulmen.callbacks import ModelCheckpoint


class Net(fulmen.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
        self.val_losses: list[float] = []

    def forward(self, x):
        return self.layers(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("val_loss", loss)

    def on_validation_epoch_end(self):
        self.val_losses.append(float(self.trainer.callback_metrics["val_loss"]))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.2)


def loaders():
    g = torch.Generator().manual_seed(3)
    data = TensorDataset(torch.randn(64, 8, generator=g), torch.randint(0, 3, (64,), generator=g))
    return DataLoader(data, batch_size=16), DataLoader(data, batch_size=32)


def run(model, tmp_path, max_epochs, ckpt_path=None, **kwargs):
    trainer = fulmen.Trainer(
        max_epochs=max_epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path, callbacks=[ModelCheckpoint(dirpath=tmp_path, save_top_k=-1)], **kwargs,
    )  # fmt: skip
    trainer.fit(model, *loaders(), ckpt_path=ckpt_path)
    return trainer


@pytest.mark.slow
def test_a_compiled_module_trains_validates_checkpoints_and_resumes_with_inductor(tmp_path):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    eager = Net()
    run(eager, tmp_path / "eager", max_epochs=2)

    compiled_module = Net()
    compiled = torch.compile(compiled_module, backend="inductor")
    run(compiled, tmp_path / "compiled", max_epochs=1)
    # the forward really ran compiled: dynamo saw frames (and the module trained in place)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1
    checkpoint = torch.load(tmp_path / "compiled" / "epoch=0-step=4.ckpt", weights_only=True)
    assert sorted(checkpoint["state_dict"]) == sorted(Net().state_dict())  # no "_orig_mod." prefixes
    assert compiled_module.val_losses[0] == pytest.approx(eager.val_losses[0], rel=1e-5)

    # resume the compiled run in a fresh module compiled by the trainer: Trainer(compile=...)
    resumed = Net()
    run(resumed, tmp_path / "resumed", max_epochs=2, ckpt_path=tmp_path / "compiled" / "epoch=0-step=4.ckpt",
        compile={"backend": "inductor"})  # fmt: skip
    assert resumed._compiled_from is not None
    for (name, p), q in zip(resumed.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)
    assert resumed.val_losses[-1] == pytest.approx(eager.val_losses[-1], rel=1e-5)


def test_a_training_step_that_calls_its_layers_directly_is_compiled_too(tmp_path):
    """As Lightning: torch.compile(module) / Trainer(compile=...) compiles the step methods, not only forward
    (a training_step calling self.net(x) would otherwise run eagerly). The eager backend: tracing, no codegen."""
    import fulmen

    class Direct(fulmen.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return self.net(batch[0]).pow(2).mean()  # never calls forward

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 4)), batch_size=4)
    trainer = fulmen.Trainer(max_epochs=1, compile={"backend": "eager"}, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(Direct(), data)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1
