"""A torchmetrics ``Metric`` passed to ``self.log`` is reset when its run ends (a training epoch, an evaluation
run), whether it was logged per step or per epoch: libraries built on Lightning (torchmetrics' own integration
tests) rely on it, and a user's metric object starts the next run clean."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.parity import oracle

torchmetrics = pytest.importorskip("torchmetrics")

# (name, logged in, on_step, on_epoch)
_LOGGED = [
    ("train_per_step", "train", True, False),
    ("train_per_epoch", "train", False, True),
    ("val_per_step", "val", True, False),
    ("val_per_epoch", "val", False, True),
]


def _run(pl: Any, boring: Any) -> dict[str, Any]:
    class Model(boring.BoringModel):
        def __init__(self) -> None:
            super().__init__()
            for name, *_ in _LOGGED:
                setattr(self, name, torchmetrics.SumMetric())
            self.events: list[tuple[str, tuple[bool, ...]]] = []

        def _log(self, stage: str, batch: Any) -> None:
            for name, logged_in, on_step, on_epoch in _LOGGED:
                if logged_in == stage:
                    metric = getattr(self, name)
                    metric.update(batch.sum())
                    self.log(name, metric, on_step=on_step, on_epoch=on_epoch)

        def note(self, where: str) -> None:
            # which metric objects still hold state from updates (False: reset since)
            self.events.append((where, tuple(getattr(self, name).update_called for name, *_ in _LOGGED)))

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            self._log("train", batch)
            return super().training_step(batch, batch_idx)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self._log("val", batch)

        def on_train_epoch_start(self) -> None:
            self.note("train_epoch_start")

        def on_train_epoch_end(self) -> None:
            self.note("train_epoch_end")

        def on_validation_start(self) -> None:
            self.note("validation_start")

        def on_validation_end(self) -> None:
            self.note("validation_end")

        def on_train_end(self) -> None:
            self.note("train_end")

    torch.manual_seed(0)
    model = Model()
    trainer = pl.Trainer(
        max_epochs=2, limit_train_batches=2, limit_val_batches=2, num_sanity_val_steps=1, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(model)
    model.note("after fit")
    fit_metrics = {k: round(float(v), 4) for k, v in trainer.callback_metrics.items()}
    trainer.validate(model, verbose=False)
    model.note("after validate")
    return {
        "events": model.events,
        "fit_metrics": fit_metrics,
        "validate_metrics": {k: round(float(v), 4) for k, v in trainer.callback_metrics.items()},
    }


@oracle.parity
def test_logged_metrics_are_reset_when_their_run_ends() -> None:
    import fulmen
    import fulmen.demos.boring_classes as fulmen_boring

    oracle.lightning()
    import lightning.pytorch as lightning_pl
    import lightning.pytorch.demos.boring_classes as lightning_boring

    ours = _run(fulmen, fulmen_boring)
    assert ours == _run(lightning_pl, lightning_boring)
    # metrics logged per step are reset too, and the values read from the trainer outlive the reset
    assert ("after fit", (False, False, False, False)) in ours["events"]
    assert ours["fit_metrics"]["train_per_epoch"] != 0.0 and ours["validate_metrics"]["val_per_epoch"] != 0.0
