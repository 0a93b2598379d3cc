"""Validation and test runs (also the sanity check and validation inside fit), and prediction."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from fulmen.loops.fetchers import prefetch_iterator
from fulmen.loops.progress import EvaluationProgress, Progress
from fulmen.runtime.results import ResultCollection
from fulmen.runtime.state import RunningStage as RunningStage
from fulmen.runtime.state import TrainerFn as TrainerFn
from fulmen.utilities.apply_func import apply_to_collection as apply_to_collection
from fulmen.utilities.combined_loader import CombinedLoader as CombinedLoader
from fulmen.utilities.data import has_len_all_ranks as has_len_all_ranks
from fulmen.utilities.data import record_batch_indices, set_sampler_epoch
from fulmen.utilities.exceptions import SIGTERMException as SIGTERMException
from fulmen.utilities.imports import _RICH_AVAILABLE as _RICH_AVAILABLE
from fulmen.utilities.imports import lazy_aliases as _lazy_aliases
from fulmen.utilities.model_helpers import is_overridden as is_overridden
from fulmen.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from fulmen.runtime.context import RunContext, StopRequests
    from fulmen.runtime.data import DataLoaderSource


class ValidationInterrupted(Exception):
    """A signal (SIGTERM, SLURM's, Ctrl-C) came during a validation run inside fit: the run stops after the
    current batch instead of finishing a validation that may outlast the notice (see ``TrainingEpochLoop``)."""


def no_grad_context(inference_mode: bool) -> contextlib.AbstractContextManager[Any]:
    return torch.inference_mode() if inference_mode else torch.no_grad()


_PREFIX = {"validation": "val", "test": "test", "predict": "predict"}


def check_dataloader_idx(module: Any, stage: str, several: bool) -> None:
    """Before a run's first hook: the module's step and batch hooks take ``dataloader_idx`` exactly when they will
    be passed one (several loaders run one after another). Otherwise the mismatch surfaced at the first batch as a
    bare ``TypeError`` about a positional argument, or, worse, several loaders' batches were logged as if they
    came from one. ``RuntimeError``, the class Lightning raises, which programs catch."""
    if module is None:
        return
    prefix = _PREFIX[stage]
    for hook in (f"{stage}_step", f"on_{stage}_batch_start", f"on_{stage}_batch_end"):
        method = getattr(module, hook, None)
        if method is None:
            continue
        try:
            params = inspect.signature(method).parameters
        except (TypeError, ValueError):
            continue
        takes_any = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params.values())
        named = params.get("dataloader_idx")
        where = f"`{type(module).__name__}.{hook}()`"
        # the wording is Lightning's: programs and test suites match on it
        if several and named is None and not takes_any:
            raise RuntimeError(
                f"You provided multiple `{prefix}_dataloader`, but no `dataloader_idx` argument in {where}. Try "
                "adding `dataloader_idx=0` to its signature."
            )
        if not several and named is not None and named.default is inspect.Parameter.empty:
            raise RuntimeError(
                f"You provided only a single `{prefix}_dataloader`, but have included `dataloader_idx` in {where}. "
                "Either remove the argument or give it a default value i.e. `dataloader_idx=0`."
            )


class EvaluationLoop:
    """Runs ``validation_step`` or ``test_step`` over every evaluation dataloader once."""

    def __init__(self, context: RunContext, stage: str) -> None:
        self.context = context
        self.stage = stage  # "validation" or "test"
        self.results = ResultCollection(training=False)
        self.has_run = False  # a (non-sanity) run finished: monitored metrics must exist from now on
        self.progress = EvaluationProgress()

    @property
    def batch_progress(self) -> Progress:
        """Lightning's tracker of this run's batches (read-only)."""
        return self.progress.view()

    @property
    def _data_source(self) -> DataLoaderSource:
        """Where this stage's dataloaders come from (Lightning's name, which callbacks and libraries read)."""
        return self.context.data.source("val" if self.stage == "validation" else "test")

    def run(
        self, dataloaders: list[Any], num_batches: list[int | float], in_fit: bool
    ) -> list[dict[str, float]]:
        context = self.context
        hooks, strategy = context.hooks, context.strategy
        stage = self.stage
        if not dataloaders or sum(num_batches) == 0:
            return []
        sanity_checking = context.state.sanity_checking
        self._prepare(dataloaders, in_fit)
        step = strategy.validation_step if stage == "validation" else strategy.test_step
        # Inside fit (its sanity check included) validation runs under no_grad, not inference mode, whatever the
        # flag says: a module may cache a tensor during validation and use it in the next training step, and an
        # inference tensor cannot be saved for backward. ``validate()`` / ``test()`` use the flag.
        inference = context.config.inference_mode and strategy.supports_inference_mode and not in_fit
        with context.enter(results=self.results), no_grad_context(inference):
            if in_fit and not sanity_checking and context.progress.window.done:
                # not inside an accumulation window: the gradients gathered so far are still to be stepped
                hooks.call_module("on_validation_model_zero_grad")
            # the first loader's iterator is made before the start hooks, as in Lightning: a hook that draws random
            # numbers sees the state after the iterator drew its seed
            fetch = f"[_EvaluationLoop].{'val' if stage == 'validation' else stage}_next"  # Lightning's name
            first = prefetch_iterator(hooks, fetch, dataloaders[0], num_batches[0])
            self.progress.start_run()
            module = context.module
            modes = {name: m.training for name, m in module.named_modules()} if module is not None else {}
            self._call_start_hooks()
            stop = context.stop if in_fit and not sanity_checking else None  # a signal interrupts fit's validation
            for dl_idx, (loader, limit) in enumerate(zip(dataloaders, num_batches)):
                batches = first if dl_idx == 0 else prefetch_iterator(hooks, fetch, loader, limit)
                self._run_batches(batches, step, dl_idx, len(dataloaders), stop, (module, modes))
            output_metrics = self._finish(len(dataloaders), sanity_checking, (module, modes))
        return output_metrics

    def _prepare(self, dataloaders: list[Any], in_fit: bool) -> None:
        """Before the run's first hook: the step signatures checked, the samplers' epoch, fresh results."""
        context = self.context
        metrics = context.metrics
        check_dataloader_idx(context.module, self.stage, len(dataloaders) > 1)
        if in_fit:  # an evaluation order may follow training's epochs (a sampler with set_epoch)
            for loader in dataloaders:
                set_sampler_epoch(loader, context.progress.current_epoch)
        metrics.refresh()  # the views keep the training step values that readers see during this run
        self.results.reset()
        self.results.sync = context.strategy.sync_metric
        metrics.epoch_end = False

    def _call_start_hooks(self) -> None:
        hooks, stage = self.context.hooks, self.stage
        hooks.call_module(f"on_{stage}_model_eval")
        hooks.call_callbacks(f"on_{stage}_start")
        hooks.call_module(f"on_{stage}_start")
        getattr(self.context.strategy, f"on_{stage}_start")()
        hooks.call_callbacks(f"on_{stage}_epoch_start")
        hooks.call_module(f"on_{stage}_epoch_start")

    def _run_batches(
        self, batches: Any, step: Callable[..., Any], dl_idx: int, loaders: int, stop: StopRequests | None,
        module_modes: tuple[Any, dict[str, bool]],
    ) -> None:  # fmt: skip
        """One dataloader's batches (``dl_idx`` of ``loaders``); ``stop``: a signal ends fit's validation here,
        with each submodule back in its mode (``module_modes``: the module, and the mode each submodule was in)."""
        context = self.context
        hooks, strategy, metrics, progress = context.hooks, context.strategy, context.metrics, self.progress
        stage, multiple = self.stage, loaders > 1
        extra = (dl_idx,) if multiple else ()
        for batch_idx, (batch, last) in enumerate(batches):
            batch = strategy.batch_to_device(batch, dataloader_idx=dl_idx)
            self.results.set_batch(batch, dl_idx if multiple else None)
            progress.ready += 1
            progress.is_last_batch = last and dl_idx == loaders - 1
            hooks.call_callbacks(f"on_{stage}_batch_start", batch, batch_idx, *extra)
            hooks.call_module(f"on_{stage}_batch_start", batch, batch_idx, *extra)
            output = step(batch, batch_idx, *extra)
            progress.processed = progress.ready
            hooks.call_callbacks(f"on_{stage}_batch_end", output, batch, batch_idx, *extra)
            hooks.call_module(f"on_{stage}_batch_end", output, batch, batch_idx, *extra)
            progress.completed = progress.ready
            metrics.on_eval_step_end(self.results)
            self.results.clear_batch()
            context.ticks += 1
            if stop is not None and stop.signal is not None:
                self._restore_modes(*module_modes)
                raise ValidationInterrupted(stage)
            if last:
                break  # known to be the last: no further fetch just to meet the end

    def _finish(
        self, loaders: int, sanity_checking: bool, module_modes: tuple[Any, dict[str, bool]]
    ) -> list[dict[str, float]]:
        """The epoch's end: aggregates reduced, the end hooks, each submodule back in its mode."""
        context = self.context
        hooks, strategy, metrics, stage = context.hooks, context.strategy, context.metrics, self.stage
        self.results.dataloader_idx = None
        metrics.epoch_end = True
        self.results.reduce_epoch()  # sync_dist values reduced here, where every rank is
        self._on_evaluation_epoch_end()
        output_metrics = metrics.on_eval_epoch_end(self.results, loaders)
        if not sanity_checking:
            self.has_run = True
        hooks.call_callbacks(f"on_{stage}_end")
        hooks.call_module(f"on_{stage}_end")
        getattr(strategy, f"on_{stage}_end")()
        self.results.release_metrics()
        if hooks.module_overrides(f"on_{stage}_model_train") or module_modes[0] is None:
            hooks.call_module(f"on_{stage}_model_train")
        else:
            self._restore_modes(*module_modes)
        return output_metrics

    def _on_evaluation_epoch_end(self) -> None:
        """The epoch-end hooks, callbacks' first (a method of its own: Lightning's tests patch it by this name)."""
        hooks = self.context.hooks
        hooks.call_callbacks(f"on_{self.stage}_epoch_end")
        hooks.call_module(f"on_{self.stage}_epoch_end")

    @staticmethod
    def _restore_modes(module: Any, modes: dict[str, bool]) -> None:
        """Each submodule back in its own mode (one the user froze with .eval() stays in eval)."""
        if module is None:
            return
        for name, submodule in module.named_modules():
            submodule.training = modes.get(name, submodule.training)


class PredictionLoop:
    """Runs ``predict_step`` over every predict dataloader once.

    ``predictions`` and ``epoch_batch_indices`` (a list per dataloader) are kept when ``predict`` returns
    them or when a callback asked for them with ``request_outputs`` (a prediction writer that writes at the
    epoch end); ``current_batch_indices`` holds the sample indices of the batch being predicted when batch
    indices were asked for. Nothing is kept or tracked otherwise, so a plain predict pays nothing for it."""

    def __init__(self, context: RunContext) -> None:
        self.context = context
        self.return_predictions = True
        self.progress = EvaluationProgress()
        self._predictions: list[list[Any]] = []
        self.epoch_batch_indices: list[list[list[int]]] = []
        self.current_batch_indices: list[int] = []
        self._wants_predictions = False
        self._wants_indices = False
        self._warned_none = False  # this run warned that predict_step returned None

    @property
    def batch_progress(self) -> Progress:
        """Lightning's tracker of this run's batches (read-only)."""
        return self.progress.view()

    @property
    def _data_source(self) -> DataLoaderSource:
        """Where the prediction dataloaders come from (Lightning's name)."""
        return self.context.data.source("predict")

    @property
    def predictions(self) -> list[Any]:
        """The kept predictions: a list per dataloader, or one list when there is one dataloader."""
        return self._predictions[0] if len(self._predictions) == 1 else self._predictions

    def request_outputs(self, predictions: bool = False, batch_indices: bool = False) -> None:
        """Keep the predictions and/or track the batch indices during the next run (callbacks call this in
        ``setup``; the request ends with the run)."""
        self._wants_predictions |= predictions
        self._wants_indices |= batch_indices

    def run(self, dataloaders: list[Any], num_batches: list[int | float], return_predictions: bool) -> Any:
        try:
            return self._run(dataloaders, num_batches, return_predictions)
        finally:
            self._wants_predictions = self._wants_indices = False

    def _run(self, dataloaders: list[Any], num_batches: list[int | float], return_predictions: bool) -> Any:
        context = self.context
        hooks, strategy = context.hooks, context.strategy
        multiple = len(dataloaders) > 1
        self.return_predictions = return_predictions
        keep = return_predictions or self._wants_predictions
        self._warned_none = False
        self._predictions = [[] for _ in dataloaders]
        self.progress.start_run()
        self.epoch_batch_indices = [[] for _ in dataloaders]
        self.current_batch_indices = []
        if not dataloaders or sum(num_batches) == 0:
            return None
        check_dataloader_idx(context.module, "predict", multiple)
        with no_grad_context(context.config.inference_mode and strategy.supports_inference_mode):
            # the first loader's iterator is made before the start hooks, as in the evaluation loop
            first = self._open_batches(dataloaders[0], num_batches[0])
            hooks.call_module("on_predict_model_eval")
            hooks.call_callbacks("on_predict_start")
            hooks.call_module("on_predict_start")
            strategy.on_predict_start()
            hooks.call_callbacks("on_predict_epoch_start")
            hooks.call_module("on_predict_epoch_start")
            for dl_idx, (loader, limit) in enumerate(zip(dataloaders, num_batches)):
                batches, recorder = first if dl_idx == 0 else self._open_batches(loader, limit)
                self._predict_batches(batches, recorder, dl_idx, len(dataloaders), keep)
            hooks.call_callbacks("on_predict_epoch_end")
            hooks.call_module("on_predict_epoch_end")
            hooks.call_callbacks("on_predict_end")
            hooks.call_module("on_predict_end")
            strategy.on_predict_end()
        if not return_predictions:
            return None
        return self.predictions

    def _open_batches(self, loader: Any, limit: int | float) -> tuple[Any, Any]:
        """The loader's batches, and the recorder of their sample indices when they were asked for."""
        recorder = None
        if self._wants_indices:
            loader, recorder = record_batch_indices(loader)
        return prefetch_iterator(self.context.hooks, "[_PredictionLoop].predict_next", loader, limit), recorder

    def _predict_batches(self, batches: Any, recorder: Any, dl_idx: int, loaders: int, keep: bool) -> None:
        """One dataloader's batches (``dl_idx`` of ``loaders``); ``keep``: its predictions are kept."""
        context = self.context
        hooks, strategy, progress = context.hooks, context.strategy, self.progress
        extra = (dl_idx,) if loaders > 1 else ()
        for batch_idx, (batch, last) in enumerate(batches):
            if recorder is not None:
                self.current_batch_indices = recorder.pop()
                self.epoch_batch_indices[dl_idx].append(self.current_batch_indices)
            batch = strategy.batch_to_device(batch, dataloader_idx=dl_idx)
            progress.ready += 1
            progress.is_last_batch = last and dl_idx == loaders - 1
            hooks.call_callbacks("on_predict_batch_start", batch, batch_idx, *extra)
            hooks.call_module("on_predict_batch_start", batch, batch_idx, *extra)
            output = strategy.predict_step(batch, batch_idx, *extra)
            progress.processed = progress.ready
            if keep:
                self._keep(output, dl_idx)
            hooks.call_callbacks("on_predict_batch_end", output, batch, batch_idx, *extra)
            hooks.call_module("on_predict_batch_end", output, batch, batch_idx, *extra)
            progress.completed = progress.ready
            context.ticks += 1
            if last:
                break

    def _keep(self, output: Any, dl_idx: int) -> None:
        if output is None and not self._warned_none:
            self._warned_none = True  # a step that forgot its `return` would leave holes silently
            rank_zero_warn(
                "predict returned None for a batch: if that is on purpose, ignore this warning; "
                "otherwise return the predictions from `predict_step`."
            )
        self._predictions[dl_idx].append(output)


__all__ = ["EvaluationLoop", "PredictionLoop"]


__all__ = ["EvaluationLoop", "RestartStage"]


# Lightning's name for this loop (its test suites and some programs import or patch it)
_EvaluationLoop = EvaluationLoop


class RestartStage:
    """Whether a restored evaluation run restarts in the middle, as plain strings (what code that reads a
    Lightning evaluation loop's restart stage compares with)."""

    NONE = "none"
    RESTARTED_MID_EVALUATION = "restarted_mid_evaluation"


# names Lightning's module holds, which libraries import from here; this module's code does not use them
__getattr__ = _lazy_aliases(__name__, {
    "is_param_in_hook_signature": "fulmen.utilities.signature_utils.is_param_in_hook_signature",
})  # fmt: skip
