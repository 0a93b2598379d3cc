"""GlobalBatchSize: the accumulation that keeps the samples per optimizer step, and what it refuses. The elastic
restarts that rely on it are in tests/strategies/test_elastic.py."""

from __future__ import annotations

import pytest
from torch.utils.data import DataLoader

import fulmen
from fulmen.callbacks import GlobalBatchSize, GradientAccumulationScheduler
from fulmen.demos.boring_classes import BoringModel, RandomDataset
from fulmen.utilities.exceptions import MisconfigurationException


class Counting(BoringModel):
    def __init__(self):
        super().__init__()
        self.factors: list[int] = []

    def training_step(self, batch, batch_idx):
        self.factors.append(self.trainer.accumulate_grad_batches)
        return super().training_step(batch, batch_idx)


def _trainer(callbacks, **kwargs):
    return fulmen.Trainer(accelerator="cpu", max_epochs=1, callbacks=callbacks, logger=False, enable_progress_bar=False,
                          enable_model_summary=False, enable_checkpointing=False, limit_val_batches=0, **kwargs)  # fmt: skip


def _loader(batch_size):
    return DataLoader(RandomDataset(32, 48), batch_size=batch_size)


@pytest.mark.parametrize(("size", "batch_size", "world", "factor"), [(16, 4, 1, 4), (16, 4, 2, 2), (16, 4, 4, 1), (64, 8, 2, 4)])
def test_the_accumulation_keeps_the_samples_per_step(size, batch_size, world, factor):
    assert GlobalBatchSize(size).accumulation(batch_size, world) == factor


def test_a_size_that_does_not_divide_is_refused_with_the_sizes_that_would():
    with pytest.raises(MisconfigurationException, match=r"batch_size=4 per process x 3 processes.*multiple of 12 \(e.g. 12 or 24\)"):
        GlobalBatchSize(16).accumulation(4, 3)
    with pytest.raises(MisconfigurationException, match=r"multiple of 32 \(e.g. 32\)"):
        GlobalBatchSize(16).accumulation(8, 4)


@pytest.mark.parametrize("size", [0, -8, 2.0, True, "16"])
def test_the_size_must_be_a_positive_int(size):
    with pytest.raises(MisconfigurationException, match=rf"GlobalBatchSize\(size={size!r}\)"):
        GlobalBatchSize(size)


def test_fit_steps_the_optimizer_every_size_over_batch_size_batches():
    model = Counting()
    trainer = _trainer([GlobalBatchSize(12)])
    trainer.fit(model, _loader(4))
    assert set(model.factors) == {3}
    assert trainer.global_step == 4  # 12 batches of 4, 3 per step


def test_it_refuses_a_second_source_of_the_accumulation():
    with pytest.raises(MisconfigurationException, match="accumulate_grad_batches=2"):
        _trainer([GlobalBatchSize(8)], accumulate_grad_batches=2).fit(BoringModel(), _loader(4))
    with pytest.raises(MisconfigurationException, match="GradientAccumulationScheduler"):
        _trainer([GlobalBatchSize(8), GradientAccumulationScheduler({0: 2})]).fit(BoringModel(), _loader(4))


def test_a_loader_without_a_batch_size_is_refused():
    loader = DataLoader(RandomDataset(32, 6), batch_size=None)
    with pytest.raises(MisconfigurationException, match="batch_size=None"):
        _trainer([GlobalBatchSize(8)]).fit(BoringModel(), loader)


def test_manual_optimization_is_refused():
    class Manual(BoringModel):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False

    with pytest.raises(RuntimeError, match="automatic optimization"):
        _trainer([GlobalBatchSize(8)]).fit(Manual(), _loader(4))


def test_the_size_is_saved_and_a_changed_one_is_said(tmp_path):
    callback = GlobalBatchSize(8)
    assert callback.state_dict() == {"size": 8}
    other = GlobalBatchSize(16)
    with pytest.warns(UserWarning, match="trained with 8 samples per optimizer step, this run asks for 16"):
        other.load_state_dict(callback.state_dict())
    assert other.size == 16
