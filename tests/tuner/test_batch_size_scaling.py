"""The batch-size finder on the CPU, with a module that raises CUDA's out-of-memory error above a size."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler

import fulmen
from fulmen.callbacks import BatchSizeFinder
from fulmen.tuner import Tuner
from fulmen.tuner.batch_size_scaling import is_oom_error
from fulmen.utilities.exceptions import MisconfigurationException
from tests.tuner.oom_model import OOM_MESSAGE, OOMModel, dataset


class Recorder(fulmen.Callback):
    def __init__(self):
        self.calls = []

    def on_train_batch_start(self, trainer, *args):
        self.calls.append(("train_batch", trainer.global_step))

    def on_fit_start(self, trainer, pl_module):
        self.calls.append(("fit_start", None))


def _trainer(**kwargs) -> fulmen.Trainer:
    return fulmen.Trainer(max_epochs=1, enable_progress_bar=False, enable_model_summary=False, **kwargs)


@pytest.mark.slow
def test_power_doubles_until_out_of_memory(tmp_path):
    model = OOMModel(fits_up_to=48)
    recorder = Recorder()
    trainer = _trainer(default_root_dir=tmp_path, callbacks=[recorder], limit_train_batches=7)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()
    assert Tuner(trainer).scale_batch_size(model) == 32  # 2, 4, 8, 16, 32 fit; 64 does not
    assert model.batch_size == 32
    tried = sorted(set(model.seen))
    assert tried == [2, 4, 8, 16, 32, 64]
    # everything the trials touched is as it was: weights (bitwise), RNG, the trainer and what it holds
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name]), name
    assert torch.equal(torch.get_rng_state(), rng)
    assert trainer.global_step == 0 and trainer.current_epoch == 0 and recorder.calls == []
    assert trainer.limit_train_batches == 7 and not (tmp_path / "lightning_logs").exists()
    assert model._trainer is None
    # and the fit that follows trains with the size found
    model.seen.clear()
    trainer.fit(model)
    assert set(model.seen) == {32} and trainer.global_step == 7


@pytest.mark.slow
def test_binsearch_bisects_then_takes_the_margin_off():
    model = OOMModel(fits_up_to=48)
    size = Tuner(_trainer(logger=False)).scale_batch_size(model, mode="binsearch", margin=0.05)
    # 2..32 fit, 64 fails; bisection 48 fits, 56/52/50/49 fail; 48 less 5% = 45 (as Lightning: not run again)
    assert size == 45 == model.batch_size
    assert max(s for s in model.seen if s <= 48) == 48
    exact = Tuner(_trainer(logger=False)).scale_batch_size(
        OOMModel(fits_up_to=48), mode="binsearch", margin=0.0
    )
    assert exact == 48


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["power", "binsearch"])
def test_never_past_the_dataset_nor_max_val(mode):
    def margin(size):  # binsearch always takes its 5% off, as Lightning's does
        return int(size * 0.95) if mode == "binsearch" else size

    assert (
        Tuner(_trainer(logger=False)).scale_batch_size(OOMModel(fits_up_to=10**6, samples=20), mode=mode)
        == margin(20)
    )
    assert (
        Tuner(_trainer(logger=False)).scale_batch_size(OOMModel(fits_up_to=10**6), mode=mode, max_val=100)
        == margin(100)
    )
    model = OOMModel(fits_up_to=10**6)
    assert Tuner(_trainer(logger=False)).scale_batch_size(model, mode=mode, max_trials=3, init_val=4) == margin(16)


def test_hparams_and_datamodule_are_both_written():
    class Data(fulmen.LightningDataModule):
        def __init__(self):
            super().__init__()
            self.save_hyperparameters({"batch_size": 3})
            self.batch_size = 3

        def train_dataloader(self):
            return DataLoader(dataset(), batch_size=self.batch_size)

    model = OOMModel(fits_up_to=20, in_hparams=True)
    data = Data()
    assert Tuner(_trainer(logger=False)).scale_batch_size(model, datamodule=data, init_val=3) == 12
    assert model.hparams.batch_size == data.batch_size == data.hparams.batch_size == 12


def test_dataloaders_passed_to_fit_are_rebuilt_by_the_callback():
    """Beyond Lightning: trainer.fit(model, DataLoader(...)) with BatchSizeFinder trains with the size found,
    the loader's other arguments (here shuffling) kept."""
    model = OOMModel(fits_up_to=24)
    del model.batch_size  # nothing on the module: only the loader carries a batch size
    finder = BatchSizeFinder()
    loaders = []

    class Look(fulmen.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            loaders.append(trainer.train_dataloader)

    trainer = _trainer(logger=False, callbacks=[finder, Look()], limit_train_batches=3, limit_val_batches=0)
    trainer.fit(model, DataLoader(dataset(), batch_size=2, shuffle=True, drop_last=True))
    assert finder.optimal_batch_size == 16
    assert model.seen[-3:] == [16, 16, 16] and trainer.global_step == 3
    used = loaders[0]
    assert used.batch_size == 16 and used.drop_last and isinstance(used.sampler, RandomSampler)
    with pytest.raises(MisconfigurationException, match="found no `batch_size`"):
        Tuner(_trainer(logger=False)).scale_batch_size(model)


def test_validate_method_searches_the_evaluated_loader():
    """method='validate' with dataloaders=: the trials validate with rebuilt copies of that loader."""
    model = OOMModel(fits_up_to=20)
    size = Tuner(_trainer(logger=False)).scale_batch_size(
        model, dataloaders=DataLoader(dataset(64), batch_size=2), method="validate"
    )
    assert size == 16 == model.batch_size and model.seen == []  # validation only: no training step ran


def test_other_errors_are_raised_at_once():
    class Broken(OOMModel):
        def training_step(self, batch, batch_idx):
            self.seen.append(len(batch[0]))
            raise ValueError("a bug, not memory")

    model = Broken()
    with pytest.raises(ValueError, match="a bug"):
        Tuner(_trainer(logger=False)).scale_batch_size(model)
    assert model.seen == [2] and model.batch_size == 2
    with pytest.raises(MisconfigurationException, match=r"runs out of memory \(tried 2, 1\)"):
        Tuner(_trainer(logger=False)).scale_batch_size(OOMModel(fits_up_to=0))


@pytest.mark.parametrize(("mode", "expected"), [("power", 62), ("binsearch", 95)])
def test_an_init_val_too_large_is_halved_until_one_fits(mode, expected):
    """500, 250, 125 run out of memory, 62 fits; binsearch then bisects up to 100 and takes 5% off."""
    model = OOMModel(fits_up_to=100, samples=1000)
    size = Tuner(_trainer(logger=False)).scale_batch_size(model, mode=mode, init_val=500, max_trials=10)
    assert size == expected == model.batch_size
    assert model.seen[:1] == [500]


def test_no_trials_keeps_init_val():
    model = OOMModel(fits_up_to=100)
    assert Tuner(_trainer(logger=False)).scale_batch_size(model, max_trials=0, init_val=3) == 3 and not model.seen


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"mode": "linear"}, "mode='linear'"), ({"steps_per_trial": 0}, "steps_per_trial=0"),
     ({"margin": 1.5}, "margin=1.5"), ({"max_val": 1}, "max_val=1"), ({"method": "train"}, "method 'train' is invalid")],
)  # fmt: skip
def test_bad_arguments(kwargs, match):
    with pytest.raises(MisconfigurationException, match=match):
        Tuner(_trainer(logger=False)).scale_batch_size(OOMModel(), **kwargs)


def test_out_of_memory_errors_are_recognised():
    assert is_oom_error(RuntimeError(OOM_MESSAGE)) and is_oom_error(torch.cuda.OutOfMemoryError("x"))
    assert is_oom_error(
        RuntimeError("[enforce fail at alloc_cpu.cpp:116] DefaultCPUAllocator: can't allocate memory")
    )
    assert is_oom_error(RuntimeError("MPS backend out of memory (MPS allocated: 1 GB)"))
    assert is_oom_error(RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if ..."))
    assert not is_oom_error(RuntimeError("shape mismatch")) and not is_oom_error(ValueError(OOM_MESSAGE))


@pytest.mark.slow
def test_one_x_tune():
    model = OOMModel(fits_up_to=40)
    trainer = _trainer(logger=False, auto_scale_batch_size="binsearch")
    result = trainer.tune(model, scale_batch_size_kwargs={"margin": 0.0})
    assert result == {"scale_batch_size": 40, "lr_find": None} and model.batch_size == 40
    assert _trainer(logger=False, auto_scale_batch_size=True).auto_scale_batch_size == "power"
    with pytest.raises(MisconfigurationException, match="auto_scale_batch_size='big'"):
        _trainer(auto_scale_batch_size="big")


def test_the_trainer_shows_the_loaders_built_with_the_size_found(caplog):
    """As Lightning leaves it: trainer.train_dataloader / val_dataloaders / datamodule after the search; a
    later run loads its own."""
    import logging

    class Data(fulmen.LightningDataModule):
        def __init__(self):
            super().__init__()
            self.batch_size = 2

        def train_dataloader(self):
            return DataLoader(dataset(64), batch_size=self.batch_size)

        def val_dataloader(self):
            return DataLoader(dataset(16), batch_size=self.batch_size)

    trainer, data = _trainer(logger=False), Data()
    with caplog.at_level(logging.INFO):
        size = Tuner(trainer).scale_batch_size(OOMModel(fits_up_to=10**6), datamodule=data, max_trials=3)
    assert size == 8
    assert trainer.datamodule is data
    assert trainer.train_dataloader.batch_size == trainer.val_dataloaders.batch_size == 8
    assert caplog.text.count("trying batch size") == 2  # 2 -> 4 -> 8, the third trial the last
    with caplog.at_level(logging.INFO):
        Tuner(_trainer(logger=False)).scale_batch_size(OOMModel(fits_up_to=10**6), datamodule=Data(), init_val=64)
    assert "greater or equal than the length of your dataset" in caplog.text

    trainer.fit(OOMModel(fits_up_to=10**6, batch_size=3), train_dataloaders=DataLoader(dataset(12), batch_size=3))
    assert trainer.train_dataloader.batch_size == 3


def test_several_evaluation_loaders_of_the_module_are_refused_before_any_trial():
    class TwoVal(OOMModel):
        def val_dataloader(self):
            return [DataLoader(dataset(8), batch_size=self.batch_size)] * 2

    model = TwoVal()
    with pytest.raises(MisconfigurationException, match="cannot be used with multiple validate dataloaders"):
        Tuner(_trainer(logger=False)).scale_batch_size(model, method="validate")
    assert model.seen == []
