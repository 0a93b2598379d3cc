"""Behaviour at the edges of the loops, compared with Lightning 2.6.6: the same program under both frameworks."""

from __future__ import annotations

import importlib
import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Sampler

from tests.parity import oracle

FRAMEWORKS = ("lightning.pytorch", "fulmen")


def _pl(name: str) -> Any:
    if name != "fulmen":
        oracle.lightning()
    importlib.import_module(name + ".demos.boring_classes")
    return importlib.import_module(name)


def _trainer(pl: Any, **kwargs: Any) -> Any:
    defaults = dict(
        max_epochs=1, limit_train_batches=2, limit_val_batches=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1,
    )  # fmt: skip
    return pl.Trainer(**{**defaults, **kwargs})


def _loader(pl: Any, n: int = 8, sampler: Any = None) -> DataLoader:
    return DataLoader(pl.demos.boring_classes.RandomDataset(32, n), batch_size=2, sampler=sampler)


def _both(program: Any) -> list[Any]:
    out = []
    for name in FRAMEWORKS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.manual_seed(0)
            out.append(program(_pl(name)))
    return out


@oracle.parity
def test_validation_inside_fit_runs_under_no_grad_so_a_cached_tensor_can_be_trained_on():
    """A module that keeps a tensor computed in validation and uses it in the next training step: under
    inference mode that tensor could not be saved for backward ("Inference tensors cannot be saved")."""

    def program(pl: Any) -> Any:
        seen = []

        class Model(pl.demos.boring_classes.BoringModel):
            cached: torch.Tensor | None = None

            def training_step(self, batch, batch_idx):
                loss = self.layer(batch).sum()
                if self.cached is not None:
                    loss = loss + (self.layer(batch) * self.cached.mean()).sum()
                return loss

            def validation_step(self, batch, batch_idx):
                seen.append((self.trainer.sanity_checking, torch.is_inference_mode_enabled(), torch.is_grad_enabled()))
                self.cached = self.layer(batch)

        model = Model()
        trainer = _trainer(pl, max_epochs=2, val_check_interval=1)
        trainer.fit(model, _loader(pl), _loader(pl))
        trainer.validate(model, _loader(pl), verbose=False)  # validate() itself: inference mode (the flag's default)
        seen.append(("validate", torch.is_inference_mode_enabled()))
        return seen

    theirs, ours = _both(program)
    assert ours == theirs
    assert ours[0] == (True, False, False)  # the sanity check: no_grad, not inference mode


@oracle.parity
def test_no_teardown_hook_after_an_exception():
    def program(pl: Any) -> list[str]:
        calls: list[str] = []

        class Record(pl.Callback):
            def on_exception(self, trainer, pl_module, exception):
                calls.append("on_exception")

            def teardown(self, trainer, pl_module, stage):
                calls.append("teardown")

        class Model(pl.demos.boring_classes.BoringModel):
            def training_step(self, batch, batch_idx):
                raise ValueError("boom")

            def teardown(self, stage):
                calls.append("module.teardown")

        with pytest.raises(ValueError, match="boom"):
            _trainer(pl, callbacks=[Record()]).fit(Model(), _loader(pl))
        return calls

    theirs, ours = _both(program)
    assert ours == theirs == ["on_exception"]


@pytest.mark.parametrize(
    ("case", "hook"),
    [
        ("required with one loader", "validation_step"),
        ("hook requires it with one loader", "on_validation_batch_start"),
        ("missing with several loaders", "validation_step"),
        ("test step missing with several loaders", "test_step"),
    ],
)
@oracle.parity
def test_a_dataloader_idx_mismatch_is_a_runtime_error_before_the_run(case, hook):
    def program(pl: Any) -> Any:
        base = pl.demos.boring_classes.BoringModel
        several = "several" in case
        if case == "required with one loader":

            class Model(base):
                def validation_step(self, batch, batch_idx, dataloader_idx):
                    return super().validation_step(batch, batch_idx)

        elif case == "hook requires it with one loader":

            class Model(base):  # type: ignore[no-redef]
                def on_validation_batch_start(self, batch, batch_idx, dataloader_idx):
                    pass

        elif case == "missing with several loaders":

            class Model(base):  # type: ignore[no-redef]
                def validation_step(self, batch, batch_idx):
                    return super().validation_step(batch, batch_idx)

        else:

            class Model(base):  # type: ignore[no-redef]
                def test_step(self, batch, batch_idx):
                    return super().test_step(batch, batch_idx)

        trainer = _trainer(pl, limit_test_batches=1, num_sanity_val_steps=0)
        loaders = [_loader(pl), _loader(pl)] if several else _loader(pl)
        try:
            if hook == "test_step":
                trainer.test(Model(), loaders, verbose=False)
            else:
                trainer.fit(Model(), _loader(pl), loaders)
        except Exception as err:
            return type(err), f"{hook}()" in str(err) and "dataloader_idx" in str(err)
        return None

    theirs, ours = _both(program)
    assert theirs == ours == (RuntimeError, True)


@oracle.parity
def test_an_epoch_ended_by_minus_one_still_steps_its_schedulers():
    """``on_train_batch_start`` returning -1 ends the epoch; its 'epoch' and 'step' schedulers step as at any last
    batch, so the learning rate follows the epochs."""

    def program(pl: Any) -> list[list[float]]:
        lrs: list[list[float]] = []

        class Model(pl.demos.boring_classes.BoringModel):
            def on_train_batch_start(self, batch, batch_idx):
                return -1 if batch_idx == 1 else None

            def on_train_epoch_end(self):
                lrs.append([s.get_last_lr()[0] for s in self.lr_schedulers()])

            def configure_optimizers(self):
                a = torch.optim.SGD(self.layer.parameters(), lr=1.0)
                epoch = torch.optim.lr_scheduler.StepLR(a, step_size=1, gamma=0.5)
                step = torch.optim.lr_scheduler.StepLR(a, step_size=1, gamma=0.9)
                return [a], [{"scheduler": epoch, "interval": "epoch"}, {"scheduler": step, "interval": "step"}]

        _trainer(pl, max_epochs=3, limit_train_batches=4).fit(Model(), _loader(pl))
        return lrs

    theirs, ours = _both(program)
    assert ours == theirs


class _EpochSampler(Sampler[int]):
    def __init__(self, n: int, name: str, calls: list[Any]) -> None:
        self.n, self.name, self.calls = n, name, calls

    def set_epoch(self, epoch: int) -> None:
        self.calls.append((self.name, epoch))

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(range(self.n))

    def __len__(self) -> int:
        return self.n


@oracle.parity
def test_set_epoch_reaches_every_sampler_of_a_combined_train_loader_and_the_validation_samplers():
    def program(pl: Any) -> list[Any]:
        calls: list[Any] = []

        class Model(pl.demos.boring_classes.BoringModel):
            def training_step(self, batch, batch_idx):
                return super().training_step(batch["a"], batch_idx)

            def on_train_epoch_start(self):
                calls.append(("epoch start", self.current_epoch))

        train = pl.utilities.CombinedLoader(
            {"a": _loader(pl, 8, _EpochSampler(8, "a", calls)), "b": _loader(pl, 4, _EpochSampler(4, "b", calls))}
        )
        val = _loader(pl, 4, _EpochSampler(4, "val", calls))
        _trainer(pl, max_epochs=2).fit(Model(), train, val)
        return calls

    theirs, ours = _both(program)
    assert ours == theirs
    assert ("val", 1) in ours


@oracle.parity
def test_num_val_batches_is_known_from_the_sanity_check_and_the_start_of_training():
    def program(pl: Any) -> list[Any]:
        seen: list[Any] = []

        class Model(pl.demos.boring_classes.BoringModel):
            def on_train_start(self):
                seen.append(("train start", list(self.trainer.num_val_batches)))

            def on_train_batch_start(self, batch, batch_idx):
                return -1  # no epoch reaches its validation

        for sanity in (0, 2):
            _trainer(pl, max_epochs=2, num_sanity_val_steps=sanity, check_val_every_n_epoch=2, limit_val_batches=3).fit(
                Model(), _loader(pl), _loader(pl)
            )
        trainer = _trainer(pl, overfit_batches=2)
        seen.append(("overfit", trainer.limit_train_batches, trainer.limit_val_batches))
        return seen

    theirs, ours = _both(program)
    assert ours == theirs


@oracle.parity
def test_a_validation_inside_an_accumulation_window_keeps_the_gradients_gathered_so_far():
    """``val_check_interval`` can put a validation run between the batches of one optimizer step: the model's
    gradients are cleared before validation only when no accumulation window is open (found by the fuzzer:
    they were cleared, so the step used the last batch's gradients alone)."""

    def program(pl: Any) -> list[Any]:
        seen: list[Any] = []

        class Model(pl.demos.boring_classes.BoringModel):
            def on_before_optimizer_step(self, optimizer):
                seen.append(round(float(self.layer.weight.grad.norm()), 5))

            def on_validation_model_zero_grad(self):
                seen.append("zero_grad")
                super().on_validation_model_zero_grad()

        trainer = _trainer(pl, limit_train_batches=4, val_check_interval=1, accumulate_grad_batches=2,
                           num_sanity_val_steps=0)  # fmt: skip
        trainer.fit(Model(), _loader(pl, 16), _loader(pl))
        return seen

    theirs, ours = _both(program)
    assert ours == theirs
    assert ours[:2] != ["zero_grad", ours[1]] and ours.count("zero_grad") == 2  # only after a step


@oracle.parity
def test_a_reloaded_shuffled_train_loader_gives_lightnings_order():
    """``reload_dataloaders_every_n_epochs``: the reloaded loader's first iterator is made before the epoch's start
    hooks, as Lightning makes it, so the worker base seed it draws shifts the global RNG the same way and the
    shuffle that follows (and every later random number) is Lightning's (found by the fuzzer)."""

    def program(pl: Any) -> list[float]:
        sums: list[float] = []

        class Model(pl.demos.boring_classes.BoringModel):
            def on_train_batch_start(self, batch, batch_idx):
                sums.append(round(float(batch.sum()), 4))

            def train_dataloader(self):
                return DataLoader(pl.demos.boring_classes.RandomDataset(32, 16), batch_size=8, shuffle=True)

        pl.seed_everything(3)
        _trainer(pl, max_epochs=3, limit_train_batches=None, limit_val_batches=0,
                 reload_dataloaders_every_n_epochs=1).fit(Model())  # fmt: skip
        return sums

    theirs, ours = _both(program)
    assert ours == theirs


@oracle.parity
def test_a_cycled_combined_loader_restarts_its_loaders_when_lightning_does():
    """``max_size_cycle``: a shorter loader restarts (a new iterator, which draws a base seed from the global RNG)
    at the step that needs it, and the longest one is never restarted at the epoch's end (found by the fuzzer:
    reading one batch ahead restarted it, which shifted the next epoch's shuffle)."""

    def program(pl: Any) -> list[Any]:
        sums: list[Any] = []

        class Model(pl.demos.boring_classes.BoringModel):
            def training_step(self, batch, batch_idx):
                sums.append((round(float(batch["a"].sum()), 4), round(float(batch["b"].sum()), 4)))
                return super().training_step(batch["a"], batch_idx)

        pl.seed_everything(3)
        data = pl.demos.boring_classes.RandomDataset(32, 6)
        train = pl.utilities.CombinedLoader(
            {"a": DataLoader(data, batch_size=2, shuffle=True), "b": _loader(pl, 3)}, "max_size_cycle"
        )
        _trainer(pl, max_epochs=3, limit_train_batches=None, limit_val_batches=0).fit(Model(), train)
        return sums

    theirs, ours = _both(program)
    assert ours == theirs


@oracle.parity
def test_num_val_and_test_batches_count_each_loader_of_a_combined_evaluation_loader():
    """A validation / test CombinedLoader in a combined mode runs its combined count of batches, and
    ``trainer.num_val_batches`` / ``num_test_batches`` report each inner loader's count (what progress bars read)."""

    def program(pl: Any) -> list[Any]:
        seen: list[Any] = []

        class Model(pl.demos.boring_classes.BoringModel):
            def validation_step(self, batch, batch_idx):
                seen.append(("val step", batch_idx, list(self.trainer.num_val_batches)))
                return super().validation_step(batch["a"], batch_idx)

            def test_step(self, batch, batch_idx):
                seen.append(("test step", batch_idx, list(self.trainer.num_test_batches)))
                return super().test_step(batch["a"], batch_idx)

            def on_train_start(self):
                seen.append(("train start", list(self.trainer.num_val_batches)))

        for mode in ("max_size_cycle", "min_size", "max_size"):
            def combined(mode: str = mode) -> Any:
                return pl.utilities.CombinedLoader({"a": _loader(pl, 6), "b": _loader(pl, 4)}, mode=mode)

            model = Model()
            trainer = _trainer(pl, num_sanity_val_steps=1, limit_val_batches=None)
            trainer.fit(model, _loader(pl), combined())
            trainer.test(model, combined())
        return seen

    theirs, ours = _both(program)
    assert ("val step", 2, [3, 2]) in theirs
    assert ours == theirs
