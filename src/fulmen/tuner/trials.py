"""What the batch-size and learning-rate finders share: trial trainers and putting the module back."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fulmen.runtime.rng import capture_rng, restore_rng
from fulmen.utilities.parsing import attribute_holders, set_attribute

if TYPE_CHECKING:
    from fulmen.core.datamodule import LightningDataModule
    from fulmen.core.module import LightningModule
    from fulmen.trainer.trainer import Trainer


def trial_trainer(trainer: Trainer, steps: int, **overrides: Any) -> Trainer:
    """A Trainer with the user's configuration for a trial of ``steps`` training steps (and as many batches
    of evaluation): nothing written or shown, no callbacks, on this process's device alone. It is of the
    user's Trainer class (a subclass stays itself)."""
    kwargs = dict(trainer.config.arguments)
    kwargs["plugins"] = copy.deepcopy(kwargs.get("plugins"))  # a GradScaler's state must not move
    device = trainer.strategy.root_device
    kwargs.update(
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[], num_sanity_val_steps=0, fast_dev_run=False, max_time=None, min_epochs=None, min_steps=None,
        max_epochs=None, max_steps=steps, limit_train_batches=1.0, limit_val_batches=steps, limit_test_batches=steps,
        limit_predict_batches=steps, val_check_interval=steps, check_val_every_n_epoch=None,
        auto_scale_batch_size=None, auto_lr_find=False, stochastic_weight_avg=False, sync_batchnorm=False, num_nodes=1,
        strategy="single_device", devices=[device.index or 0] if device.type == "cuda" else 1,
    )  # fmt: skip
    kwargs.update(overrides)
    return type(trainer)(**kwargs)


@contextlib.contextmanager
def preserved(model: LightningModule, datamodule: LightningDataModule | None) -> Iterator[dict[str, Any]]:
    """The module's weights (bitwise, kept on the CPU), the random generators and the trainers the module
    and data module point to are put back when the block ends. Yields the saved weights."""
    weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    rng = capture_rng()
    model_trainer = model._trainer
    datamodule_trainer = datamodule.trainer if datamodule is not None else None
    try:
        yield weights
    finally:
        model.load_state_dict(weights)
        restore_rng(rng)
        model.trainer = model_trainer
        if datamodule is not None:
            datamodule.trainer = datamodule_trainer


def run_stage(
    trial: Trainer, method: str, model: LightningModule, datamodule: Any, loaders: dict[str, Any]
) -> Any:
    """``trial.fit/validate/test/predict`` with the loaders meant for that method (fit takes train and val
    loaders, the others ``dataloaders``)."""
    wanted = ("train_dataloaders", "val_dataloaders") if method == "fit" else ("dataloaders",)
    return getattr(trial, method)(
        model, datamodule=datamodule, **{k: v for k, v in loaders.items() if k in wanted}
    )


def field_owners(model: Any, datamodule: Any, name: str) -> list[tuple[Any, str]]:
    """Every place a tuned field ``name`` is found, as (holder, name): the module and data module, each
    directly and in its ``hparams`` (see ``attribute_holders``). A search writes its result to all of them."""
    return [(holder, name) for holder in attribute_holders(model, name, datamodule)]


def set_field(owner: Any, name: str, value: Any) -> None:
    """Write a tuned value where it was found: an attribute, or a key of ``hparams`` (a dict)."""
    set_attribute(owner, name, value)
