"""What the CLI runs for ``predict`` and ``tune`` beyond the Trainer's method, and what it prints after each
(where predictions, checkpoints, logs and plots went)."""

from __future__ import annotations

import os
from typing import Any

from fulmen.core.datamodule import LightningDataModule
from fulmen.core.module import LightningModule
from fulmen.trainer.trainer import Trainer
from fulmen.utilities.curves import plot_run


def predict_and_report(trainer: Trainer, kwargs: dict[str, Any]) -> None:
    """Predict through the prediction writers among the callbacks, and say where they wrote; with none,
    say that nothing was kept and how to keep it (rather than compute and silently drop the results)."""
    from fulmen.callbacks.prediction_writer import BasePredictionWriter

    writers = [cb for cb in trainer.callbacks if isinstance(cb, BasePredictionWriter)]
    if kwargs.get("return_predictions") is None:
        kwargs["return_predictions"] = not writers
    predictions = trainer.predict(**kwargs)
    if not trainer.is_global_zero:
        return
    for writer in writers:
        where = getattr(writer, "output_dir", None)
        written = getattr(writer, "written", None)
        detail = f" ({len(written)} file{'s' if len(written) != 1 else ''})" if written is not None else ""
        print(f"predictions: written by {type(writer).__name__}" + (f" to {where}{detail}" if where else ""))
    if not writers:
        count = sum(len(p) for p in predictions) if predictions and isinstance(predictions[0], list) else len(predictions or [])
        print(
            f"predictions: {count} batches computed and not saved. To write them, add a prediction writer: "
            "--trainer.callbacks=fulmen.callbacks.PredictionFileWriter --trainer.callbacks.output_dir=DIR"
        )


def tune_and_report(trainer: Trainer, model: LightningModule, datamodule: LightningDataModule | None) -> None:
    """1.x's ``tune`` subcommand: ``trainer.tune``; the learning-rate finder when neither finder flag is
    given (1.x then ran nothing at all: a ``tune`` that tunes nothing is not what anyone asks for)."""
    if trainer.auto_scale_batch_size or trainer.auto_lr_find:
        result = trainer.tune(model, datamodule=datamodule)
    else:  # the flags are the Trainer's read-only configuration: run the finder directly
        from fulmen.tuner import Tuner

        result = {"scale_batch_size": None, "lr_find": Tuner(trainer).lr_find(model, datamodule=datamodule)}
    if not trainer.is_global_zero:
        return
    if result["scale_batch_size"] is not None:
        print(f"batch size: {result['scale_batch_size']}")
    finder = result["lr_find"]
    if finder is not None:
        print(f"learning rate: {finder.suggestion()}")
        try:
            figure = finder.plot(suggest=True)
        except ImportError:
            print("(install matplotlib for the plot)")
            return
        path = os.path.join(trainer.default_root_dir, "lr_find.png")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        figure.savefig(path)
        print(f"plot: {path}")


def report_fit(trainer: Trainer) -> None:
    """Where a fit's checkpoints, logs and metric curves went."""
    if not trainer.is_global_zero:
        return
    lines = []
    cb: Any = trainer.checkpoint_callback
    if cb is not None and getattr(cb, "dirpath", None):
        lines.append(
            f"checkpoints: {cb.dirpath}"
            + (f" (best: {cb.best_model_path})" if cb.best_model_path else "")
        )
    if trainer.loggers:
        lines.append(f"logs: {trainer.log_dir}")
        png = plot_run(trainer.log_dir) if trainer.log_dir and os.path.isdir(trainer.log_dir) else None
        if png:
            lines.append(f"curves: {png}")
    for line in lines:
        print(line)
