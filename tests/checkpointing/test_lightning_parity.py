"""Checkpoints against lightning==2.6.6 (test-only oracle): ModelCheckpoint file names and bookkeeping, the
hook order with checkpointing on, and files moving both ways between the two frameworks."""

from __future__ import annotations

import datetime
import os
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.parity import oracle

pl = oracle.lightning()
pytestmark = oracle.parity

import fulmen  # noqa: E402
from fulmen.callbacks import ModelCheckpoint  # noqa: E402

warnings.filterwarnings("ignore", message=".*exists and is not empty.*")


def _model_class(base: Any) -> Any:
    from torch.utils.data import DataLoader, TensorDataset

    class Model(base.LightningModule):
        def __init__(self, lr: float = 0.1) -> None:
            super().__init__()
            self.save_hyperparameters()
            torch.manual_seed(0)
            self.layer = torch.nn.Linear(4, 2)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            self.log("train_loss", loss)
            return loss

        def validation_step(self, batch, batch_idx):
            # a score that depends on the step only: both frameworks rank the same checkpoints
            self.log("score", torch.tensor(float((self.global_step * 7) % 5)))
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]))

        def on_train_epoch_end(self):
            # logged in the module's epoch-end hook, which runs before the checkpoint callback's
            self.log("epoch_score", float((self.current_epoch * 3) % 4))

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)]

        def train_dataloader(self):
            g = torch.Generator().manual_seed(1)
            return DataLoader(TensorDataset(torch.randn(24, 4, generator=g), torch.randn(24, 2, generator=g)),
                              batch_size=4)  # fmt: skip

        def val_dataloader(self):
            g = torch.Generator().manual_seed(2)
            return DataLoader(TensorDataset(torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g)),
                              batch_size=4)  # fmt: skip

    return Model


FulmenModel = _model_class(fulmen)
LightningModel = _model_class(pl)

SCENARIOS: dict[str, dict[str, Any]] = {
    "default": {},
    "monitor_min_top2_last": {"monitor": "score", "save_top_k": 2, "save_last": True},
    "monitor_max_template": {
        "monitor": "score",
        "mode": "max",
        "save_top_k": 2,
        "filename": "{epoch}-{score:.1f}",
    },
    "no_auto_insert": {
        "monitor": "score",
        "filename": "e{epoch:02d}-s{score:.2f}",
        "auto_insert_metric_name": False,
    },
    "every_2_steps_all": {"every_n_train_steps": 2, "save_top_k": -1},
    "every_2_epochs": {"every_n_epochs": 2, "save_top_k": -1, "save_last": True},
    "mid_epoch_val": {"monitor": "score", "save_top_k": 3, "_trainer": {"val_check_interval": 0.5}},
    "train_epoch_end": {"monitor": "train_loss", "save_on_train_epoch_end": True, "save_top_k": 2},
    "none_top_k_0_last": {"save_top_k": 0, "save_last": True},
    "steps_top_k_0_last": {"save_top_k": 0, "save_last": True, "every_n_train_steps": 5},
    "monitor_last_only_with_top_k": {"monitor": "score", "save_last": True, "_last_step": True},
    # a run whose triggers never fire still ends with a last.ckpt (written at the end of training)
    "top_k_0_every_5_epochs_last": {"save_top_k": 0, "every_n_epochs": 5, "save_last": True,
                                    "save_on_train_epoch_end": True, "_last_step": True},
    "no_validation_last": {"save_last": True, "save_on_train_epoch_end": False, "_last_step": True,
                           "_trainer": {"limit_val_batches": 0}},
    "max_steps_1_last": {"monitor": "score", "save_last": True, "_last_step": True, "_trainer": {"max_steps": 1}},
    # a metric the module logs in on_train_epoch_end: the checkpoint callback runs after that hook
    "monitor_module_epoch_end": {"monitor": "epoch_score", "mode": "max", "save_top_k": 2,
                                 "save_on_train_epoch_end": True},
    # the replaced top-1 file goes once last.ckpt links to the new one
    "last_link_top_1": {"save_last": "link", "save_top_k": 1},
}


def _run(
    framework: Any, model_cls: Any, callback_cls: Any, root: Path, options: dict[str, Any]
) -> dict[str, Any]:
    options = dict(options)
    trainer_kwargs = options.pop("_trainer", {})
    with_last_step = options.pop("_last_step", False)
    callback = callback_cls(dirpath=root / "ck", **options)
    trainer = framework.Trainer(
        max_epochs=4, callbacks=[callback], logger=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, default_root_dir=root, **trainer_kwargs,
    )  # fmt: skip
    trainer.fit(model_cls())

    def name(path: str) -> str:
        return os.path.basename(path) if path else ""

    return {
        "files": sorted(os.listdir(root / "ck")),
        "best": name(callback.best_model_path),
        "best_score": None if callback.best_model_score is None else float(callback.best_model_score),
        "best_k": {name(k): float(v) for k, v in callback.best_k_models.items()},
        "kth": name(callback.kth_best_model_path),
        "last": name(callback.last_model_path),
        "last_step": torch.load(callback.last_model_path, weights_only=True)["global_step"]
        if with_last_step
        else None,
    }


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_model_checkpoint_matches_lightning(tmp_path, scenario):
    options = SCENARIOS[scenario]
    ours = _run(fulmen, FulmenModel, ModelCheckpoint, tmp_path / "fulmen", options)
    theirs = _run(pl, LightningModel, pl.callbacks.ModelCheckpoint, tmp_path / "lightning", options)
    if scenario == "train_epoch_end":  # train_loss differs in the last float bits between the two: names only
        ours.pop("best_score"), theirs.pop("best_score")
        ours["best_k"], theirs["best_k"] = sorted(ours["best_k"]), sorted(theirs["best_k"])
    assert ours == theirs


def _resumed_runs(
    framework: Any, model_cls: Any, root: Path, options: dict[str, Any]
) -> list[dict[str, Any]]:
    """Epoch 1, then resumed twice with ckpt_path="last" by a new trainer and callback: what is on disk."""
    seen = []
    for epochs in (1, 2, 3):
        callback = framework.callbacks.ModelCheckpoint(dirpath=root, **options)
        _trainer(framework, root, epochs, callbacks=[callback]).fit(
            model_cls(), ckpt_path="last" if epochs > 1 else None
        )
        state = next(iter(torch.load(callback.last_model_path, weights_only=False)["callbacks"].values()))
        seen.append({
            "files": sorted(os.listdir(root)),
            "last": os.path.basename(callback.last_model_path),
            "best": os.path.basename(callback.best_model_path),
            "last in its own state": os.path.basename(state["last_model_path"]),
        })  # fmt: skip
    return seen


@pytest.mark.parametrize(
    "options",
    [{"every_n_train_steps": 4, "save_last": True}, {"monitor": "score", "save_top_k": 2, "save_last": True}],
    ids=["steps_no_monitor", "monitor_top2"],
)
def test_resumed_runs_rotate_the_same_files_as_lightning(tmp_path, options):
    """A run resumed from last.ckpt goes on writing last.ckpt (its callback state names itself) and removes
    the top-k files it replaces, as Lightning does; not last-v1.ckpt beside a stale last.ckpt."""
    ours = _resumed_runs(fulmen, FulmenModel, tmp_path / "fulmen", options)
    theirs = _resumed_runs(pl, LightningModel, tmp_path / "lightning", options)
    assert ours == theirs
    assert ours[-1]["last"] == "last.ckpt"


def _state_key_of(callback_cls: Any) -> str:
    return callback_cls(monitor="score", every_n_epochs=2).state_key


def test_state_key_matches_lightning():
    assert _state_key_of(ModelCheckpoint) == _state_key_of(pl.callbacks.ModelCheckpoint)
    timed = {"train_time_interval": datetime.timedelta(minutes=5)}
    assert ModelCheckpoint(**timed).state_key == pl.callbacks.ModelCheckpoint(**timed).state_key


def _final_weights(module: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _trainer(framework: Any, root: Path, epochs: int, **kwargs: Any) -> Any:
    return framework.Trainer(
        max_epochs=epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, default_root_dir=root, **kwargs,
    )  # fmt: skip


@pytest.mark.parametrize("direction", ["lightning_to_fulmen", "fulmen_to_lightning"])
def test_checkpoints_resume_across_frameworks(tmp_path, direction):
    """Train 2 epochs in one framework, resume to 4 in the other: the result equals 4 epochs in the writer."""
    writer, reader = (pl, fulmen) if direction == "lightning_to_fulmen" else (fulmen, pl)
    models = {pl: LightningModel, fulmen: FulmenModel}
    first = _trainer(writer, tmp_path / "a", 2, enable_checkpointing=False)
    first.fit(models[writer]())
    path = tmp_path / "two_epochs.ckpt"
    first.save_checkpoint(path)

    resumed_model = models[reader]()
    resumed = _trainer(reader, tmp_path / "b", 4, enable_checkpointing=False)
    resumed.fit(resumed_model, ckpt_path=path, weights_only=True)
    assert resumed.global_step == 24 and resumed.current_epoch == 4

    straight_model = models[writer]()
    _trainer(writer, tmp_path / "c", 4, enable_checkpointing=False).fit(straight_model)
    for key, value in _final_weights(straight_model).items():
        torch.testing.assert_close(resumed_model.state_dict()[key], value, atol=1e-6, rtol=0)

    loaded = models[reader].load_from_checkpoint(path, weights_only=True)
    assert loaded.hparams.lr == 0.1
    for key, value in torch.load(path, weights_only=True)["state_dict"].items():
        assert torch.equal(loaded.state_dict()[key], value)


def test_mid_epoch_lightning_checkpoint_resumes_in_fulmen(tmp_path):
    """A Lightning checkpoint written inside an epoch resumes at the right batch (Lightning's counters)."""
    callback = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ck", every_n_train_steps=4, save_top_k=-1)
    _trainer(pl, tmp_path, 1, callbacks=[callback]).fit(LightningModel())
    path = tmp_path / "ck" / "epoch=0-step=4.ckpt"
    trainer = _trainer(fulmen, tmp_path / "f", 2, enable_checkpointing=False)
    starts: list[tuple[int, int]] = []

    class Record(fulmen.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            starts.append((trainer.current_epoch, batch_idx))

    trainer.callbacks.append(Record())
    trainer.fit(FulmenModel(), ckpt_path=path)
    assert starts[0] == (0, 4) and trainer.global_step == 12


def test_hook_order_with_checkpointing_matches_lightning(tmp_path):
    def record(base: Any, model_cls: Any, ckpt_cls: Any, root: Path) -> list[str]:
        calls: list[str] = []

        class Model(model_cls):
            def on_save_checkpoint(self, checkpoint):
                calls.append(f"module.on_save_checkpoint:{sorted(checkpoint)}")

            def on_load_checkpoint(self, checkpoint):
                calls.append("module.on_load_checkpoint")

        class Rec(base.Callback):
            def on_save_checkpoint(self, trainer, pl_module, checkpoint):
                calls.append("cb.on_save_checkpoint")

            def on_load_checkpoint(self, trainer, pl_module, checkpoint):
                calls.append("cb.on_load_checkpoint")

            def on_train_epoch_end(self, trainer, pl_module):
                calls.append("cb.on_train_epoch_end")

            def on_validation_end(self, trainer, pl_module):
                calls.append("cb.on_validation_end")

        ckpt = ckpt_cls(dirpath=root / "ck", monitor="score", save_last=True)
        trainer = _trainer(base, root, 2, callbacks=[Rec(), ckpt])
        trainer.fit(Model())
        calls.append("--- resume")
        _trainer(base, root / "r", 3, callbacks=[Rec()]).fit(Model(), ckpt_path=ckpt.last_model_path)
        return calls

    ours = record(fulmen, FulmenModel, ModelCheckpoint, tmp_path / "f")
    theirs = record(pl, LightningModel, pl.callbacks.ModelCheckpoint, tmp_path / "l")
    assert ours == theirs


def _managed_ckpt_path(framework: Any, root: Path) -> list[Any]:
    """``trainer.ckpt_path = path``: which checkpoint later stages load, what the property reads, and the warning
    when a stage is given another path."""
    boring = __import__(f"{framework.__name__}.demos.boring_classes", fromlist=["BoringModel"]).BoringModel
    kwargs = dict(max_epochs=1, limit_train_batches=2, limit_val_batches=1, logger=False, enable_progress_bar=False,
                  enable_model_summary=False, default_root_dir=root)  # fmt: skip
    first = framework.Trainer(**kwargs)
    first.fit(boring())
    path = first.checkpoint_callback.best_model_path
    trainer = framework.Trainer(**kwargs)
    seen: list[Any] = [first.ckpt_path, trainer.ckpt_path]
    trainer.ckpt_path = path
    seen.append(os.path.relpath(trainer.ckpt_path, root))
    model = boring()
    trainer.validate(model, verbose=False)
    trainer.test(model, verbose=False)
    seen.append(os.path.relpath(trainer.ckpt_path, root))
    trainer.ckpt_path = None
    trainer.validate(model, verbose=False)
    seen.append(trainer.ckpt_path)
    trainer.ckpt_path = path
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.validate(model, ckpt_path=path, verbose=False)
    seen.append([str(w.message).replace(str(root), "ROOT") for w in caught if "was called" in str(w.message)])
    seen.append(trainer.ckpt_path == path)
    trainer.validate(model, verbose=False)  # the path passed ended the one set: nothing loaded now
    seen.append(trainer.ckpt_path)
    return seen


def test_a_ckpt_path_set_on_the_trainer_loads_as_in_lightning(tmp_path):
    ours = _managed_ckpt_path(fulmen, tmp_path / "f")
    assert ours == _managed_ckpt_path(pl, tmp_path / "l")
    assert ours[:3] == [None, None, os.path.join("checkpoints", "epoch=0-step=2.ckpt")] and len(ours[5]) == 1
