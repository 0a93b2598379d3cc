"""When the loops draw random numbers, relative to the hooks: as in Lightning.

A DataLoader's iterator draws a seed from the global generator when it is made; a dataset built in
``val_dataloader()`` (as Lightning's ``BoringModel`` builds its ``RandomDataset``) draws its data then. A seeded
run gives Lightning's numbers only if these draws come in Lightning's order: the first training epoch's iterator
is made when the training data is set up (before the validation data is loaded and before ``on_train_start``),
and an evaluation or prediction run makes its first iterator before its start hooks. Each test records a digest of
the generator's state at each hook, under fulmen and under Lightning.
"""

from __future__ import annotations

import hashlib
from importlib import import_module
from typing import Any

import pytest
import torch

import fulmen
from tests.parity import oracle
from tests.parity.oracle import parity

_HOOKS = ("on_fit_start", "on_train_start", "on_train_epoch_start", "on_validation_start",
          "on_validation_epoch_start", "on_test_start", "on_predict_start", "on_predict_epoch_start")  # fmt: skip


def _digests(pl: Any, method: str, sanity_steps: int) -> list[tuple[str, str]]:
    boring = import_module(f"{pl.__name__}.demos.boring_classes")
    seen: list[tuple[str, str]] = []

    def note(name: str) -> None:
        seen.append((name, hashlib.md5(torch.random.get_rng_state().numpy().tobytes()).hexdigest()))

    def recording(name: str) -> Any:
        def hook(self: Any, *args: Any) -> Any:
            note(name)
            return getattr(boring.BoringModel, name)(self, *args)

        return hook

    def loader(name: str) -> Any:
        def make(self: Any) -> Any:
            note(name)
            return getattr(boring.BoringModel, name)(self)

        return make

    names = ("train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader")
    Model = type("Model", (boring.BoringModel,), {
        **{h: recording(h) for h in _HOOKS}, **{n: loader(n) for n in names},
        "training_step": lambda self, batch, batch_idx: (note("training_step"), boring.BoringModel.training_step(self, batch, batch_idx))[1],
        "validation_step": lambda self, batch, batch_idx: (note("validation_step"), boring.BoringModel.validation_step(self, batch, batch_idx))[1],
    })  # fmt: skip
    pl.seed_everything(7)
    trainer = pl.Trainer(max_epochs=2, limit_train_batches=2, limit_val_batches=1, limit_test_batches=1,
                         limit_predict_batches=1, num_sanity_val_steps=sanity_steps, logger=False,
                         enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    getattr(trainer, method)(Model())
    return seen


@parity
@pytest.mark.parametrize(("method", "sanity_steps"), [("fit", 0), ("fit", 2), ("validate", 0), ("test", 0),
                                                      ("predict", 0)])  # fmt: skip
def test_the_generator_state_at_each_hook_is_lightnings(method, sanity_steps):
    ours = _digests(fulmen, method, sanity_steps)
    theirs = _digests(oracle.lightning(), method, sanity_steps)
    assert len({digest for _, digest in theirs}) > 1  # the run draws numbers between hooks: the test can fail
    assert ours == theirs
