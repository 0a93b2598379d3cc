"""``TensorBoardLogger`` keeps ``hparams.yaml`` beside its events, also when nothing was logged."""

from __future__ import annotations

import pytest

from fulmen import Trainer
from fulmen.core.saving import load_hparams_from_yaml
from fulmen.demos.boring_classes import BoringModel

pytest.importorskip("tensorboard", reason="the test extras install tensorboard")

from fulmen.loggers import TensorBoardLogger


class WithHparams(BoringModel):
    def __init__(self, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()


@pytest.mark.parametrize("model_cls", [BoringModel, WithHparams])
def test_hparams_yaml_is_written_and_loads_back(tmp_path, model_cls):
    logger = TensorBoardLogger(tmp_path, name="tb")
    trainer = Trainer(max_steps=1, logger=logger, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model_cls())
    path = tmp_path / "tb" / "version_0" / TensorBoardLogger.NAME_HPARAMS_FILE
    assert load_hparams_from_yaml(path) == ({} if model_cls is BoringModel else {"lr": 0.1})
    loaded = model_cls.load_from_checkpoint(trainer.checkpoint_callback.best_model_path, hparams_file=path)
    assert isinstance(loaded, model_cls)
