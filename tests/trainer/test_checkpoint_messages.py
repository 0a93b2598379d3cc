"""Which checkpoint a run restored from, in Lightning 2.6.6's words, at the same moments: "Restoring states from
the checkpoint path at ..." as the file is read, then "Loaded model weights from the checkpoint at ..." (validate,
test, predict, before their start hooks) or "Restored all states from the checkpoint at ..." (fit, after
on_fit_start); on the framework's logger at INFO, with "best" and "last" resolved to the file."""

from __future__ import annotations

import logging

import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.parity import oracle


class _Recorder(logging.Handler):
    def __init__(self, events: list, root: str) -> None:
        super().__init__(logging.DEBUG)
        self.events, self.root = events, root

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "checkpoint" in message and ("Restor" in message or "Loaded" in message):
            self.events.append((record.levelname, message.replace(self.root, "<root>")))


def _restores(pl, root) -> list:
    events: list = []

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def validation_step(self, batch, batch_idx):
            self.log("v", self.layer(batch[0]).sum())

        test_step = validation_step

        def predict_step(self, batch, batch_idx):
            return self.layer(batch[0])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def on_load_checkpoint(self, checkpoint):
            events.append("on_load_checkpoint")

        def on_fit_start(self):
            events.append("on_fit_start")

        def on_train_start(self):
            events.append("on_train_start")

        def on_validation_start(self):
            events.append("on_validation_start")

        def on_test_start(self):
            events.append("on_test_start")

        def on_predict_start(self):
            events.append("on_predict_start")

    def data():
        return DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2)

    def trainer(max_epochs):
        checkpoint = pl.callbacks.ModelCheckpoint(monitor="v", save_last=True)
        return pl.Trainer(max_epochs=max_epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
                          num_sanity_val_steps=0, default_root_dir=root, callbacks=[checkpoint])  # fmt: skip

    recorder = _Recorder(events, str(root))
    loggers = [logging.getLogger("fulmen"), logging.getLogger("lightning.pytorch")]
    for logger in loggers:
        logger.addHandler(recorder)
    try:
        first, model = trainer(2), Model()
        first.fit(model, data(), data())
        best = first.checkpoint_callback.best_model_path
        for name, run in [
            ("test best", lambda: first.test(model, data(), ckpt_path="best", verbose=False)),
            ("validate last", lambda: first.validate(model, data(), ckpt_path="last", verbose=False)),
            ("predict path", lambda: first.predict(model, data(), ckpt_path=best)),
            ("test model, no ckpt_path", lambda: first.test(model, data(), verbose=False)),
            ("fit path", lambda: trainer(3).fit(Model(), data(), data(), ckpt_path=best)),
        ]:
            events.append(f"== {name}")
            run()
    finally:
        for logger in loggers:
            logger.removeHandler(recorder)
    return events


@oracle.parity
def test_restored_checkpoint_is_named_as_lightning_names_it(tmp_path):
    import fulmen

    lightning = oracle.lightning()
    theirs = _restores(lightning, tmp_path / "lightning")
    ours = _restores(fulmen, tmp_path / "fulmen")
    assert ours == theirs
    # not vacuous: each restore is named, with the file "best" stood for
    best = "<root>/checkpoints/epoch=1-step=4.ckpt"
    assert ours[ours.index("== test best") + 1] == ("INFO", f"Restoring states from the checkpoint path at {best}")
    assert ("INFO", "Loaded model weights from the checkpoint at <root>/checkpoints/last.ckpt") in ours
    fit = ours[ours.index("== fit path") + 1:]
    assert fit[:5] == [("INFO", f"Restoring states from the checkpoint path at {best}"), "on_load_checkpoint",
                       "on_fit_start", ("INFO", f"Restored all states from the checkpoint at {best}"),
                       "on_train_start"]  # fmt: skip
