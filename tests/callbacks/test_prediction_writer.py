"""BasePredictionWriter: per batch and per epoch, with the samples' dataset indices, as Lightning passes them."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

from fulmen import Trainer
from fulmen.callbacks import BasePredictionWriter
from fulmen.demos.boring_classes import BoringModel, RandomDataset
from fulmen.utilities.exceptions import MisconfigurationException
from tests.parity import oracle


def _writer(base):
    class Writer(base):
        def __init__(self, interval):
            super().__init__(interval)
            self.batches, self.epochs = [], []

        def write_on_batch_end(self, trainer, pl_module, prediction, batch_indices, batch, batch_idx, dataloader_idx):
            self.batches.append((batch_idx, dataloader_idx, list(batch_indices), prediction.shape[0]))

        def write_on_epoch_end(self, trainer, pl_module, predictions, batch_indices):
            self.epochs.append((_shapes(predictions), batch_indices))

    return Writer


def _shapes(x):
    return [_shapes(v) for v in x] if isinstance(x, list) else tuple(x.shape)


def _model(base, loaders):
    class Model(base):
        def predict_dataloader(self):
            return loaders()

    return Model()


def _loaders_one():
    torch.manual_seed(0)
    return DataLoader(RandomDataset(32, 10), batch_size=4, shuffle=True)


def _loaders_two():
    return [DataLoader(RandomDataset(32, 6), batch_size=4), DataLoader(RandomDataset(32, 3), batch_size=2, num_workers=1)]


@oracle.parity
@pytest.mark.parametrize("interval", ["batch", "epoch", "batch_and_epoch"])
@pytest.mark.parametrize("loaders", [_loaders_one, _loaders_two], ids=["one_loader", "two_loaders"])
@pytest.mark.parametrize("return_predictions", [True, False])
def test_writes_what_lightning_writes(interval, loaders, return_predictions):
    pl = oracle.lightning()
    from lightning.pytorch.demos.boring_classes import BoringModel as LBoring

    seen = []
    for trainer_cls, base, model_base in ((Trainer, BasePredictionWriter, BoringModel),
                                          (pl.Trainer, pl.callbacks.BasePredictionWriter, LBoring)):  # fmt: skip
        writer = _writer(base)(interval)
        trainer = trainer_cls(callbacks=[writer], logger=False, enable_progress_bar=False, enable_model_summary=False)
        out = trainer.predict(_model(model_base, loaders), return_predictions=return_predictions)
        seen.append((writer.batches, writer.epochs, out is None))
    assert seen[0] == seen[1]
    assert seen[0][0] or seen[0][1]


def test_batch_interval_keeps_no_predictions_when_none_are_returned():
    writer = _writer(BasePredictionWriter)("batch")
    trainer = Trainer(callbacks=[writer], logger=False, enable_progress_bar=False, enable_model_summary=False)
    assert trainer.predict(_model(BoringModel, _loaders_one), return_predictions=False) is None
    assert trainer.predict_loop.predictions == [] and len(writer.batches) == 3
    # without a writer, no indices are tracked (the loader is not rebuilt)
    trainer = Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.predict(_model(BoringModel, _loaders_one))
    assert trainer.predict_loop.epoch_batch_indices == [[]]


def test_bad_interval_is_refused():
    with pytest.raises(MisconfigurationException, match="write_interval='step'"):
        BasePredictionWriter("step")  # type: ignore[arg-type]


def test_prediction_file_writer_per_batch_to_an_fsspec_url():
    import io

    import fsspec

    from fulmen.callbacks import PredictionFileWriter

    fs = fsspec.filesystem("memory")
    writer = PredictionFileWriter("memory://preds", write_interval="batch")
    trainer = Trainer(callbacks=[writer], logger=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.predict(_model(BoringModel, _loaders_two), return_predictions=False)
    assert sorted(writer.written) == [f"memory://preds/batch_{d}_{b}.pt" for d, b in ((0, 0), (0, 1), (1, 0), (1, 1))]
    saved = torch.load(io.BytesIO(fs.cat("/preds/batch_1_1.pt")), weights_only=True)
    assert saved["batch_indices"] == [2] and saved["prediction"].shape == (1, 2)
    fs.rm("/preds", recursive=True)
