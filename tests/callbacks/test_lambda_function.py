"""LambdaCallback: every hook it takes is called with that hook's arguments, in Lightning's order."""

from __future__ import annotations

import pytest

from fulmen import Trainer
from fulmen.callbacks import LambdaCallback
from fulmen.callbacks.lambda_function import HOOKS
from fulmen.demos.boring_classes import BoringModel
from tests.parity import oracle


def _record(hooks, calls):
    def make(name):
        return lambda *args, **kwargs: calls.append(name)

    return {name: make(name) for name in hooks}


def _run(trainer_cls, callback_cls, model_cls, tmp_path, hooks):
    calls: list[str] = []
    kwargs = dict(max_epochs=1, limit_train_batches=2, limit_val_batches=1, limit_test_batches=1,
                  limit_predict_batches=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                  default_root_dir=tmp_path)  # fmt: skip
    trainer = trainer_cls(callbacks=[callback_cls(**_record(hooks, calls))], **kwargs)
    model = model_cls()
    trainer.fit(model)
    trainer.test(model)
    trainer.predict(model)
    return calls


@oracle.parity
def test_every_hook_is_called_as_lightning_calls_it(tmp_path):
    pl = oracle.lightning()
    from lightning.pytorch.demos.boring_classes import BoringModel as LBoring

    ours = _run(Trainer, LambdaCallback, BoringModel, tmp_path / "f", HOOKS)
    theirs = _run(pl.Trainer, pl.callbacks.LambdaCallback, LBoring, tmp_path / "l", HOOKS)
    assert ours == theirs
    assert {"on_save_checkpoint", "on_before_backward", "on_predict_batch_end", "teardown"} <= set(ours)


def test_unknown_hook_and_non_callable_are_refused():
    with pytest.raises(TypeError, match="unexpected keyword argument 'on_train_step_end'"):
        LambdaCallback(on_train_step_end=print)
    with pytest.raises(TypeError, match="on_fit_start=3"):
        LambdaCallback(on_fit_start=3)
    assert LambdaCallback(on_fit_start=None).on_fit_start.__func__ is LambdaCallback.on_fit_start


@oracle.parity
def test_the_hooks_are_lightnings_keywords_in_lightnings_order():
    """Positional calls (``LambdaCallback(setup_fn, teardown_fn)``) land on the same hooks as in Lightning."""
    import inspect

    pl = oracle.lightning()
    theirs = list(inspect.signature(pl.callbacks.LambdaCallback).parameters)
    assert list(inspect.signature(LambdaCallback).parameters) == theirs == list(HOOKS)
    first, second = (lambda *a: None), (lambda *a: None)
    callback = LambdaCallback(first, second)
    assert callback.setup is first and callback.teardown is second
