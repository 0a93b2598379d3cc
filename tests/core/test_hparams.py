"""``save_hyperparameters``: what ends up in ``hparams`` through subclasses, and what a checkpoint keeps."""

from __future__ import annotations

import warnings

import pytest
import torch

import fulmen
from fulmen import Trainer
from fulmen.demos.boring_classes import BoringModel
from tests.parity import oracle
from tests.parity.oracle import parity


def _classes(base):
    class Custom(base):
        def __init__(self, batch_size=64):
            super().__init__()
            self.save_hyperparameters()

    class Forwarding(Custom):
        def __init__(self, *args, subclass_arg=1200, **kwargs):
            super().__init__(*args, **kwargs)
            self.save_hyperparameters()

    class NotSaving(Custom):
        def __init__(self, *args, subclass_arg=1200, **kwargs):
            super().__init__(*args, **kwargs)

    class Plain(base):
        def __init__(self, a=1, b=2):
            super().__init__()
            self.save_hyperparameters()

    class Overriding(Plain):
        def __init__(self, c=3, a=5):
            super().__init__(a=a * 2)
            self.save_hyperparameters("c")

    class Ignoring(Plain):
        def __init__(self, c=3):
            super().__init__()
            self.save_hyperparameters(ignore="c")

    class Unconventional(Custom):
        def __init__(obj, *more, other_arg=300, **more_kwargs):
            super().__init__(*more, **more_kwargs)
            obj.save_hyperparameters()

    return [(Forwarding, {}), (Forwarding, {"batch_size": 5}), (Forwarding, {"subclass_arg": 1}), (NotSaving, {}),
            (Overriding, {}), (Ignoring, {}), (Unconventional, {"batch_size": 7})]  # fmt: skip


@parity
def test_hparams_through_subclasses_match_lightning():
    """A parent's own defaults are kept, the subclass's value wins, and `ignore` removes from the whole."""
    lightning = oracle.lightning("lightning.pytorch.demos.boring_classes")
    ours = [dict(cls(**kw).hparams) for cls, kw in _classes(BoringModel)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = [dict(cls(**kw).hparams) for cls, kw in _classes(lightning.BoringModel)]
    assert ours == theirs
    assert ours[0] == {"batch_size": 64, "subclass_arg": 1200} and ours[4] == {"a": 5, "b": 2, "c": 3}


class WithObjects(BoringModel):
    def __init__(self, loss_fn, act=torch.nn.ReLU(), lr=0.1):
        super().__init__()
        self.save_hyperparameters()
        self.loss_fn = loss_fn


def test_objects_in_hparams_are_not_stored_and_are_asked_for_on_load(tmp_path):
    with pytest.warns(UserWarning, match="'loss_fn' is an instance of `nn.Module`"):
        model = WithObjects(torch.nn.MSELoss(), lr=0.5)
    trainer = Trainer(max_steps=1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(model)
    path = trainer.checkpoint_callback.best_model_path
    checkpoint = torch.load(path, weights_only=True)  # plain data only
    assert checkpoint["hyper_parameters"] == {"lr": 0.5}
    with pytest.raises(TypeError, match=r"`loss_fn` .* Pass it: WithObjects.load_from_checkpoint\(path, loss_fn=...\)"):
        WithObjects.load_from_checkpoint(path)
    with pytest.warns(UserWarning, match="`act` was an object"):
        loaded = WithObjects.load_from_checkpoint(path, loss_fn=torch.nn.L1Loss())
    assert isinstance(loaded.loss_fn, torch.nn.L1Loss) and loaded.hparams.lr == 0.5
    with pytest.warns(UserWarning, match=r"got typo=.*does not take: ignored"):
        WithObjects.load_from_checkpoint(path, loss_fn=torch.nn.L1Loss(), act=torch.nn.Tanh(), typo=1)


def test_module_and_datamodule_hparams_with_one_name_and_two_values_are_an_error(tmp_path):
    from fulmen.demos.boring_classes import BoringDataModule, BoringModel
    from fulmen.loggers import CSVLogger

    class Model(BoringModel):
        def __init__(self, data_dir="abc"):
            super().__init__()
            self.save_hyperparameters()

    class Data(BoringDataModule):
        def __init__(self, data_dir="foo"):
            super().__init__()
            self.save_hyperparameters()

    trainer = fulmen.Trainer(default_root_dir=tmp_path, max_steps=1, logger=CSVLogger(tmp_path),
                             enable_progress_bar=False)  # fmt: skip
    with pytest.raises(RuntimeError, match=r"Error while merging hparams: \['data_dir'\]"):
        trainer.fit(Model(), datamodule=Data())
    trainer = fulmen.Trainer(default_root_dir=tmp_path, max_steps=1, logger=CSVLogger(tmp_path),
                             enable_progress_bar=False)  # fmt: skip
    trainer.fit(Model(data_dir="same"), datamodule=Data(data_dir="same"))  # equal values merge


def test_a_mock_logger_receives_the_merged_hparams(tmp_path):
    from unittest import mock

    from fulmen.demos.boring_classes import BoringDataModule, BoringModel

    class Model(BoringModel):
        def __init__(self, lr=0.1):
            super().__init__()
            self.save_hyperparameters()

    class Data(BoringDataModule):
        def __init__(self, batch_size=4):
            super().__init__()
            self.save_hyperparameters()

    logger = mock.MagicMock(name="logger")
    logger.name, logger.save_dir, logger.version = "mock", str(tmp_path), "0"
    del logger.__iter__
    trainer = fulmen.Trainer(default_root_dir=tmp_path, max_steps=1, logger=logger, enable_progress_bar=False)
    trainer.fit(Model(), datamodule=Data())
    logger.log_hyperparams.assert_called_with({"lr": 0.1, "batch_size": 4})
    with pytest.raises(fulmen.utilities.MisconfigurationException, match="logger='tb'"):
        fulmen.Trainer(logger="tb")


@pytest.mark.parametrize("args", [(42,), (3.14, "abc")])
def test_numbers_are_not_hyperparameter_objects(args):
    class Model(fulmen.LightningModule):
        def __init__(self):
            super().__init__()
            self.save_hyperparameters(*args)

    with pytest.raises(ValueError, match=r"Primitives \(<class 'bool'>"):
        Model()


def test_checkpoints_of_early_versions_keep_hparams_under_module_arguments(tmp_path):
    from fulmen.demos.boring_classes import BoringModel

    class Model(BoringModel):
        def __init__(self, batch_size=64):
            super().__init__()
            self.save_hyperparameters()

    model = Model()
    checkpoint = {"state_dict": model.state_dict(), "module_arguments": {"batch_size": -17}}
    torch.save(checkpoint, tmp_path / "old.ckpt")
    assert Model.load_from_checkpoint(tmp_path / "old.ckpt").hparams.batch_size == -17
