"""LayerSync plugins: TorchSyncBatchNorm converts and reverts as Lightning's does; sync_batchnorm=True, a
TorchSyncBatchNorm or a LayerSync of your own in plugins= are what a multi-process fit applies (and reverts)."""

from __future__ import annotations

import os
import socket

import pytest
import torch
from torch import nn

import fulmen
from fulmen.demos.boring_classes import BoringModel, RandomDataset
from fulmen.plugins import LayerSync, TorchSyncBatchNorm
from fulmen.utilities.exceptions import MisconfigurationException
from tests import gloo
from tests.parity import oracle


def _model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Sequential(nn.BatchNorm1d(5, affine=False)),
                         nn.BatchNorm3d(2, track_running_stats=False))  # fmt: skip


@oracle.parity
def test_apply_and_revert_as_lightning():
    oracle.lightning()
    from lightning.pytorch.plugins import TorchSyncBatchNorm as Theirs

    ours, theirs = _model(), _model()
    theirs.load_state_dict(ours.state_dict())
    ours_synced, theirs_synced = TorchSyncBatchNorm().apply(ours), Theirs().apply(theirs)
    assert [type(m) for m in ours_synced.modules()] == [type(m) for m in theirs_synced.modules()]
    assert sum(isinstance(m, nn.SyncBatchNorm) for m in ours_synced.modules()) == 3
    weight = ours_synced[1].weight
    ours_synced[1].running_mean.add_(1.0)
    theirs_synced[1].running_mean.add_(1.0)
    ours_back, theirs_back = TorchSyncBatchNorm().revert(ours_synced), Theirs().revert(theirs_synced)
    assert [type(m).__name__ for m in ours_back.modules()] == [type(m).__name__ for m in theirs_back.modules()]
    assert not any(isinstance(m, nn.SyncBatchNorm) for m in ours_back.modules())
    assert ours_back[1].weight is weight  # the same parameter: an optimizer made before still holds it
    for (name, a), (_, b) in zip(ours_back.state_dict().items(), theirs_back.state_dict().items()):
        torch.testing.assert_close(a, b, msg=name)
    ours_back.eval()
    theirs_back.eval()
    x = torch.randn(2, 3, 6, 6)
    torch.testing.assert_close(ours_back[1](ours_back[0](x)), theirs_back[1](theirs_back[0](x)))
    # a reverted layer accepts any batch of (N, C, ...): its original dimension is not recorded
    assert ours_back[3](torch.randn(2, 2, 3, 3, 3)).shape == (2, 2, 3, 3, 3)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        ours_back[1](torch.randn(4))


def test_revert_keeps_the_mode_and_a_sync_layer_given_alone_is_replaced():
    sync = TorchSyncBatchNorm().apply(nn.BatchNorm1d(3))
    assert isinstance(sync, nn.SyncBatchNorm)  # a bare layer is itself replaced, so the result is what counts
    sync.eval()
    plain = TorchSyncBatchNorm().revert(sync)
    assert not isinstance(plain, nn.SyncBatchNorm) and isinstance(plain, nn.modules.batchnorm._BatchNorm)
    assert not plain.training


def test_the_flag_and_the_plugins_choose_the_layer_sync():
    assert fulmen.Trainer().config.layer_sync is None
    mine = TorchSyncBatchNorm()
    with pytest.warns(UserWarning, match="no effect with one process"):
        config = fulmen.Trainer(sync_batchnorm=True).config
        assert isinstance(config.layer_sync, TorchSyncBatchNorm) and config.sync_batchnorm
        config = fulmen.Trainer(plugins=[mine]).config
        assert config.layer_sync is mine and config.sync_batchnorm  # the plugin is what the flag means
        assert fulmen.Trainer(plugins=[mine], sync_batchnorm=True).config.layer_sync is mine

    class Groups(LayerSync):
        def apply(self, model):
            return model

        def revert(self, model):
            return model

    custom = Groups()
    config = fulmen.Trainer(plugins=[custom]).config
    assert config.layer_sync is custom and not config.sync_batchnorm
    with pytest.raises(MisconfigurationException, match=r"sync_batchnorm=True\) and plugins=\[Groups\(\)\]"):
        fulmen.Trainer(plugins=[custom], sync_batchnorm=True)
    with pytest.raises(MisconfigurationException, match="two layer sync plugins"):
        fulmen.Trainer(plugins=[custom, mine])


def test_torch_sync_batchnorm_in_plugins_is_refused_on_cpus_like_the_flag(monkeypatch):
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(MisconfigurationException, match="GPUs only"):
        fulmen.Trainer(accelerator="cpu", devices=2, strategy="ddp", plugins=[TorchSyncBatchNorm()], logger=False)


@oracle.parity
def test_lightnings_layer_sync_objects_are_layer_syncs():
    """A LayerSync written for Lightning is taken in plugins= as Lightning takes it; Lightning refuses it together
    with sync_batchnorm=True, and so does fulmen."""
    pl = oracle.lightning()
    from lightning.pytorch.plugins import LayerSync as TheirBase

    class Theirs(TheirBase):
        def apply(self, model):
            return model

        def revert(self, model):
            return model

    assert isinstance(Theirs(), LayerSync)
    assert fulmen.Trainer(plugins=[Theirs()]).config.layer_sync is not None
    with pytest.raises(pl.utilities.exceptions.MisconfigurationException, match="sync_batchnorm=True"):
        pl.Trainer(plugins=[Theirs()], sync_batchnorm=True)
    with pytest.raises(MisconfigurationException, match="sync_batchnorm=True"):
        fulmen.Trainer(plugins=[Theirs()], sync_batchnorm=True)


class _Marked(nn.BatchNorm1d):
    """What the test's LayerSync turns BatchNorm1d layers into."""


class _Marking(LayerSync):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def apply(self, model):
        self.calls.append("apply")
        for parent in model.modules():
            for name, child in list(parent.named_children()):
                if type(child) is nn.BatchNorm1d:
                    marked = _Marked(child.num_features)
                    marked.load_state_dict(child.state_dict())
                    parent.add_module(name, marked)
        return model

    def revert(self, model):
        self.calls.append("revert")
        for parent in model.modules():
            for name, child in list(parent.named_children()):
                if type(child) is _Marked:
                    plain = nn.BatchNorm1d(child.num_features)
                    plain.load_state_dict(child.state_dict())
                    parent.add_module(name, plain)
        return model


class _WithBatchNorm(BoringModel):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.BatchNorm1d(32)
        self.seen: list[type] = []

    def forward(self, x):
        return self.layer(self.norm(x))

    def train_dataloader(self):
        return torch.utils.data.DataLoader(RandomDataset(32, 16), batch_size=4)  # BatchNorm needs a batch

    def training_step(self, batch, batch_idx):
        self.seen.append(type(self.norm))
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        self.seen.append(type(self.norm))
        return super().validation_step(batch, batch_idx)


@pytest.fixture
def one_process_group(monkeypatch):
    """The variables torchrun sets for a world of one process: DDP runs in this process, with gloo."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key in [k for k in os.environ if k.startswith("SLURM_")] + ["GROUP_RANK", "FULMEN_LAUNCHER"]:
        monkeypatch.delenv(key, raising=False)
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    yield
    gloo.destroy_process_group()


def test_a_layer_sync_of_your_own_is_applied_for_the_fit_and_reverted(one_process_group, tmp_path):
    from fulmen.strategies import DDPStrategy

    sync, model = _Marking(), _WithBatchNorm()
    trainer = fulmen.Trainer(accelerator="cpu", devices=1, strategy=DDPStrategy(), plugins=[sync], max_epochs=1,
                             limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=0, logger=False,
                             enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                             default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model)
    assert sync.calls == ["apply", "revert"]
    assert model.seen == [_Marked, _Marked, _Marked]  # both training steps and the validation inside the fit
    assert type(model.norm) is nn.BatchNorm1d  # back to the plain layer when the fit ended
    model.seen.clear()
    trainer.validate(model, verbose=False)
    assert sync.calls == ["apply", "revert"] and model.seen == [nn.BatchNorm1d]  # applied when fitting only


def test_a_layer_sync_must_keep_the_module(one_process_group, tmp_path):
    from fulmen.strategies import DDPStrategy

    class Replacing(LayerSync):
        def apply(self, model):
            return nn.Sequential(model)

        def revert(self, model):
            return model

    trainer = fulmen.Trainer(accelerator="cpu", devices=1, strategy=DDPStrategy(), plugins=[Replacing()],
                             max_steps=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                             default_root_dir=tmp_path)  # fmt: skip
    with pytest.raises(MisconfigurationException, match=r"Replacing.apply\(module\) returned a different module"):
        trainer.fit(BoringModel())
