"""BackboneFinetuning / BaseFinetuning: the same weights and learning rates as Lightning, epoch by epoch; the
groups added while training rebuilt on resume, which then continues exactly."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fulmen.callbacks import BackboneFinetuning, BaseFinetuning, ModelCheckpoint
from fulmen.utilities.exceptions import MisconfigurationException
from tests.parity import oracle


def _module_class(pl):
    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.backbone = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU())
            self.head = nn.Linear(16, 3)
            self.lrs = []

        def forward(self, x):
            return self.head(self.backbone(x))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.cross_entropy(self(x), y)

        def on_train_epoch_start(self):
            self.lrs.append([g["lr"] for g in self.trainer.optimizers[0].param_groups])

        def configure_optimizers(self):
            return torch.optim.Adam(filter(lambda p: p.requires_grad, self.parameters()), lr=0.01)

        def train_dataloader(self):
            g = torch.Generator().manual_seed(1)
            data = TensorDataset(torch.randn(32, 8, generator=g), torch.randint(0, 3, (32,), generator=g))
            return DataLoader(data, batch_size=8)

    return Net


def _fit(pl, tmp_path, epochs, callbacks, ckpt_path=None, model=None):
    model = model or _module_class(pl)()
    trainer = pl.Trainer(max_epochs=epochs, callbacks=callbacks, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model, ckpt_path=ckpt_path)
    return model, trainer


def _backbone():
    return BackboneFinetuning(unfreeze_backbone_at_epoch=1, lambda_func=lambda epoch: 2.0, backbone_initial_lr=1e-3)


@oracle.parity
def test_same_weights_and_learning_rates_as_lightning(tmp_path):
    pl = oracle.lightning()
    ours, _ = _fit(__import__("fulmen"), tmp_path / "f", 4, [_backbone()])
    lcb = pl.callbacks.BackboneFinetuning(unfreeze_backbone_at_epoch=1, lambda_func=lambda epoch: 2.0,
                                          backbone_initial_lr=1e-3)  # fmt: skip
    theirs, _ = _fit(pl, tmp_path / "l", 4, [lcb])
    assert ours.lrs == theirs.lrs == [[0.01], [0.01, 0.001], [0.01, 0.002], [0.01, 0.004]]
    for (name, a), b in zip(ours.state_dict().items(), theirs.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)


def test_resume_after_unfreezing_continues_exactly(tmp_path):
    import fulmen

    whole, _ = _fit(fulmen, tmp_path / "whole", 4, [_backbone()])
    saver = ModelCheckpoint(dirpath=tmp_path / "ck", save_top_k=-1)
    _fit(fulmen, tmp_path / "part", 3, [_backbone(), saver])
    resumed, trainer = _fit(fulmen, tmp_path / "resumed", 4, [_backbone()],
                            ckpt_path=str(tmp_path / "ck" / "epoch=2-step=12.ckpt"))  # fmt: skip
    assert len(trainer.optimizers[0].param_groups) == 2
    assert resumed.lrs == [[0.01, 0.004]]  # the epoch-3 rate, grown from the restored previous rate
    assert all(p.requires_grad for p in resumed.backbone.parameters())
    for (name, a), b in zip(whole.state_dict().items(), resumed.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)


def test_helpers_freeze_filter_and_refuse_a_module_without_backbone(tmp_path):
    import fulmen

    net = _module_class(fulmen)()
    BaseFinetuning.freeze(net.backbone, train_bn=True)
    assert [p.requires_grad for p in net.backbone.parameters()] == [False, False, True, True]
    assert len(list(BaseFinetuning.filter_params(net.backbone, train_bn=False, requires_grad=True))) == 0
    optimizer = torch.optim.SGD(net.head.parameters(), lr=0.1)
    BaseFinetuning.unfreeze_and_add_param_group(net.backbone, optimizer)
    assert optimizer.param_groups[1]["lr"] == pytest.approx(0.01) and len(optimizer.param_groups[1]["params"]) == 4
    with pytest.warns(UserWarning, match="already in the optimizer"):
        BaseFinetuning.unfreeze_and_add_param_group(net.backbone, optimizer)

    from fulmen.demos.boring_classes import BoringModel

    class NoBackbone(BoringModel):
        pass

    with pytest.raises(MisconfigurationException, match="`backbone` attribute"):
        _fit(fulmen, tmp_path, 1, [BackboneFinetuning()], model=NoBackbone())
