"""The training, evaluation and prediction loops (see fit.py's docstring for the whole loop)."""

from fulmen.utilities.imports import lazy_exports as _lazy_exports

# its submodules read as attributes (``fulmen.trainer.states``) without their own import, as after Lightning's
# package imports
__getattr__, __dir__ = _lazy_exports(__name__, {
    "_EvaluationLoop": "evaluation_loop", "_FitLoop": "fit_loop", "_PredictionLoop": "prediction_loop",
    "_TrainingEpochLoop": "training_epoch_loop",
})  # fmt: skip
