"""``BatchSizeFinder``: the batch-size finder as a callback, run when the stage starts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fulmen.core.hooks import Callback
from fulmen.tuner.batch_size_scaling import check_arguments, scale_batch_size
from fulmen.utilities.exceptions import MisconfigurationException as MisconfigurationException
from fulmen.utilities.exceptions import _TunerExitException
from fulmen.utilities.parsing import lightning_hasattr as lightning_hasattr
from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn

if TYPE_CHECKING:
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer

_LOADER_ARGUMENT = {"fit": ("train", "train_dataloaders"), "validate": ("val", "dataloaders"),
                    "test": ("test", "dataloaders"), "predict": ("predict", "dataloaders")}  # fmt: skip


class BatchSizeFinder(Callback):
    """Finds the largest batch size that fits before the run trains (or evaluates) with it.

    Unlike Lightning's, it also works with dataloaders passed straight to ``fit``/``validate``/...: the loader
    is rebuilt with the size found (its other arguments kept) for the run that follows. The size is in
    ``optimal_batch_size`` afterwards.
    """

    SUPPORTED_MODES = ("power", "binsearch")

    def __init__(
        self,
        mode: str = "power",
        steps_per_trial: int = 3,
        init_val: int = 2,
        max_trials: int = 25,
        batch_arg_name: str = "batch_size",
        margin: float = 0.05,
        max_val: int | None = 8192,
    ) -> None:
        check_arguments(mode, "fit", steps_per_trial, init_val, max_trials, margin, max_val)
        # the arguments under Lightning's attribute names (subclasses and libraries read and set them)
        self._mode = mode
        self._steps_per_trial = steps_per_trial
        self._init_val = init_val
        self._max_trials = max_trials
        self._batch_arg_name = batch_arg_name
        self._margin = margin
        self._max_val = max_val
        self._early_exit = False  # True: the run ends once the search is done (what Tuner.scale_batch_size does)
        self.optimal_batch_size: int | None = init_val
        self._done = False

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str | None = None) -> None:
        """Lightning refuses here what it cannot search: distributed strategies and dataloaders passed to the
        method, which fulmen searches (the loader passed is rebuilt), and checks the batch-size field and the
        number of evaluation loaders, which fulmen checks when the search starts (it knows then which loader
        is searched). Nothing is left to do here; a subclass may extend the hook with its own checks."""
        super().setup(trainer, pl_module, stage)  # type: ignore[arg-type]

    def scale_batch_size(self, trainer: Trainer, pl_module: LightningModule) -> None:
        method = trainer.state.fn.value if trainer.state.fn is not None else "fit"
        stage, argument = _LOADER_ARGUMENT[method]
        data = trainer.run_context.data
        passed = data.passed(stage)

        def swap_loader(size: int, rebuilt: dict[str, Any]) -> None:
            if argument in rebuilt:
                data.replace(stage, rebuilt[argument])

        self.optimal_batch_size = scale_batch_size(
            trainer, pl_module, datamodule=trainer.datamodule, method=method, mode=self._mode,
            steps_per_trial=self._steps_per_trial, init_val=self._init_val, max_trials=self._max_trials,
            batch_arg_name=self._batch_arg_name, margin=self._margin, max_val=self._max_val,
            on_result=swap_loader, **({argument: passed} if passed is not None else {}),
        )  # fmt: skip
        self._done = True
        if self._early_exit:
            raise _TunerExitException()

    def _once(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not self._done:
            self.scale_batch_size(trainer, pl_module)

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._once(trainer, pl_module)

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.state.fn is not None and trainer.state.fn.value == "validate":
            self._once(trainer, pl_module)

    def on_test_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._once(trainer, pl_module)

    def on_predict_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._once(trainer, pl_module)
