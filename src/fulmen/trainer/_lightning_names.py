"""The names Lightning's ``trainer/trainer.py`` holds besides ``Trainer`` (libraries import them from there):
``fulmen.trainer.trainer`` resolves them on first use from this table, kept here so that trainer.py stays small."""

from fulmen.utilities.imports import lazy_aliases

trainer_module_getattr = lazy_aliases("fulmen.trainer.trainer", {
    "CSVLogger": "fulmen.loggers.csv_logs.CSVLogger",
    "Checkpoint": "fulmen.callbacks.checkpoint.Checkpoint",
    "EarlyStopping": "fulmen.callbacks.early_stopping.EarlyStopping",
    "GradClipAlgorithmType": "fulmen.utilities.enums.GradClipAlgorithmType",
    "Logger": "fulmen.loggers.logger.Logger",
    "PossibleUserWarning": "fulmen.utilities.warnings.PossibleUserWarning",
    "Profiler": "fulmen.profilers.profiler.Profiler",
    "ProgressBar": "fulmen.callbacks.progress.progress_bar.ProgressBar",
    "TensorBoardLogger": "fulmen.loggers.tensorboard.TensorBoardLogger",
    "convert_tensors_to_scalars": "fulmen.utilities.apply_func.convert_tensors_to_scalars",
    "download_model_from_registry": "fulmen.utilities.model_registry.download_model_from_registry",
    "is_overridden": "fulmen.utilities.model_helpers.is_overridden",
    "isolate_rng": "fulmen.utilities.seed.isolate_rng",
    "rank_zero_info": "fulmen.utilities.rank_zero.rank_zero_info",
})  # fmt: skip
