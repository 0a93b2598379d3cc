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


def test_log_graph_of_a_detached_model_and_what_it_cannot_trace(tmp_path):
    import torch
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    model = BoringModel()
    logger = TensorBoardLogger(tmp_path, log_graph=True)
    logger.log_graph(model, torch.rand(2, 32))  # no trainer attached: tracing must not trip over `trainer`
    logger.finalize("success")
    events = EventAccumulator(logger.log_dir)
    events.Reload()
    assert events.Graph() is not None
    model.example_input_array = None
    with pytest.warns(UserWarning, match="Could not log computational graph to TensorBoard: The `model.example_"):
        TensorBoardLogger(tmp_path, log_graph=True).log_graph(model)
    model.example_input_array = {"x": 1}
    with pytest.warns(UserWarning, match="can't be traced by TensorBoard"):
        TensorBoardLogger(tmp_path, log_graph=True).log_graph(model)


def test_save_dir_and_sub_dir_expand_user_and_environment_variables(tmp_path, monkeypatch):
    import os

    monkeypatch.setenv("RUNS", str(tmp_path))

    class Named(TensorBoardLogger):
        @property
        def name(self):
            return "name"

    monkeypatch.setenv("RUNS_SUB", "sub")
    logger = Named("$RUNS/tb", version="v", sub_dir="$RUNS_SUB")
    assert logger.log_dir == os.path.join(str(tmp_path), "tb", "name", "v", "sub")
