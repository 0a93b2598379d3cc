"""Validation and test runs (also the sanity check and validation inside fit), and prediction."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch

from fulmen.loops.fetcher import PrefetchIterator
from fulmen.runtime.results import ResultCollection

if TYPE_CHECKING:
    from fulmen.runtime.context import RunContext


def no_grad_context(inference_mode: bool) -> contextlib.AbstractContextManager[Any]:
    return torch.inference_mode() if inference_mode else torch.no_grad()


class EvaluationLoop:
    """Runs ``validation_step`` or ``test_step`` over every evaluation dataloader once."""

    def __init__(self, context: RunContext, stage: str) -> None:
        self.context = context
        self.stage = stage  # "validation" or "test"
        self.results = ResultCollection(training=False)
        self.has_run = False  # a (non-sanity) run finished: monitored metrics must exist from now on

    def run(
        self, dataloaders: list[Any], num_batches: list[int | float], in_fit: bool
    ) -> list[dict[str, float]]:
        context = self.context
        hooks, strategy, metrics = context.hooks, context.strategy, context.metrics
        stage = self.stage
        if not dataloaders or sum(num_batches) == 0:
            return []
        multiple = len(dataloaders) > 1
        sanity_checking = context.state.sanity_checking
        previous_results = context.results
        metrics.refresh()  # the views keep the training step values that readers see during this run
        self.results.reset()
        self.results.sync = strategy.sync_metric
        context.results = self.results
        metrics.epoch_end = False
        step = strategy.validation_step if stage == "validation" else strategy.test_step
        with no_grad_context(context.config.inference_mode):
            if in_fit and not sanity_checking:
                hooks.call_module("on_validation_model_zero_grad")
            hooks.call_module(f"on_{stage}_model_eval")
            hooks.call_callbacks(f"on_{stage}_start")
            hooks.call_module(f"on_{stage}_start")
            hooks.call_callbacks(f"on_{stage}_epoch_start")
            hooks.call_module(f"on_{stage}_epoch_start")
            for dl_idx, (loader, limit) in enumerate(zip(dataloaders, num_batches)):
                extra = (dl_idx,) if multiple else ()
                for batch_idx, (batch, _) in enumerate(PrefetchIterator(loader, limit)):
                    batch = strategy.batch_to_device(batch, dataloader_idx=dl_idx)
                    self.results.set_batch(batch, dl_idx if multiple else None)
                    hooks.call_callbacks(f"on_{stage}_batch_start", batch, batch_idx, *extra)
                    hooks.call_module(f"on_{stage}_batch_start", batch, batch_idx, *extra)
                    output = step(batch, batch_idx, *extra)
                    hooks.call_callbacks(f"on_{stage}_batch_end", output, batch, batch_idx, *extra)
                    hooks.call_module(f"on_{stage}_batch_end", output, batch, batch_idx, *extra)
                    metrics.on_eval_step_end(self.results)
            self.results.dataloader_idx = None
            metrics.epoch_end = True
            self.results.reduce_epoch()  # sync_dist values reduced here, where every rank is
            hooks.call_callbacks(f"on_{stage}_epoch_end")
            hooks.call_module(f"on_{stage}_epoch_end")
            output_metrics = metrics.on_eval_epoch_end(self.results, len(dataloaders))
            if not sanity_checking:
                self.has_run = True
            hooks.call_callbacks(f"on_{stage}_end")
            hooks.call_module(f"on_{stage}_end")
            hooks.call_module(f"on_{stage}_model_train")
        context.results = previous_results
        return output_metrics


class PredictionLoop:
    def __init__(self, context: RunContext) -> None:
        self.context = context

    def run(self, dataloaders: list[Any], num_batches: list[int | float], return_predictions: bool) -> Any:
        context = self.context
        hooks, strategy = context.hooks, context.strategy
        multiple = len(dataloaders) > 1
        all_predictions: list[list[Any]] = [[] for _ in dataloaders]
        if not dataloaders or sum(num_batches) == 0:
            return None
        with no_grad_context(context.config.inference_mode):
            hooks.call_module("on_predict_model_eval")
            hooks.call_callbacks("on_predict_start")
            hooks.call_module("on_predict_start")
            hooks.call_callbacks("on_predict_epoch_start")
            hooks.call_module("on_predict_epoch_start")
            for dl_idx, (loader, limit) in enumerate(zip(dataloaders, num_batches)):
                extra = (dl_idx,) if multiple else ()
                for batch_idx, (batch, _) in enumerate(PrefetchIterator(loader, limit)):
                    batch = strategy.batch_to_device(batch, dataloader_idx=dl_idx)
                    hooks.call_callbacks("on_predict_batch_start", batch, batch_idx, *extra)
                    hooks.call_module("on_predict_batch_start", batch, batch_idx, *extra)
                    output = strategy.predict_step(batch, batch_idx, *extra)
                    if return_predictions:
                        all_predictions[dl_idx].append(output)
                    hooks.call_callbacks("on_predict_batch_end", output, batch, batch_idx, *extra)
                    hooks.call_module("on_predict_batch_end", output, batch, batch_idx, *extra)
            hooks.call_callbacks("on_predict_epoch_end")
            hooks.call_module("on_predict_epoch_end")
            hooks.call_callbacks("on_predict_end")
            hooks.call_module("on_predict_end")
        if not return_predictions:
            return None
        return all_predictions if multiple else all_predictions[0]


__all__ = ["EvaluationLoop", "PredictionLoop"]
