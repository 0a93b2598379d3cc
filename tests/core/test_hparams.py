"""``save_hyperparameters``: what ends up in ``hparams`` through subclasses, and what a checkpoint keeps."""

from __future__ import annotations

import pickle
import warnings

import pytest
import torch

import fulmen
from fulmen.demos import boring_classes
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


class Normalizer:
    """An object a module takes that is neither a module nor a primitive (a data normaliser, a loss ...)."""

    def __init__(self, scale: float = 1.0) -> None:
        self.scale = scale


def double(x):
    return 2 * x


_OBJECT_CLASSES = [torch.nn.Linear, Normalizer, double, torch.nn.Tanh]  # what a checkpoint of `_with_objects` holds
_OBJECT_NAMES = ["torch.nn.modules.linear.Linear", f"{__name__}.Normalizer", f"{__name__}.double",
                 "torch.nn.modules.activation.Tanh"]  # fmt: skip


def _with_objects(boring):
    """A module and a data module (of fulmen's or Lightning's ``boring_classes``) whose ``__init__`` take objects:
    a module instance, a plain object, a function, a class."""

    class WithObjects(boring.BoringModel):
        def __init__(self, encoder, norm=Normalizer(), fn=double, act=torch.nn.Tanh, lr=0.1, note=None):
            super().__init__()
            self.save_hyperparameters(ignore=["note"])
            self.encoder = encoder

    class DataWithObjects(boring.BoringDataModule):
        def __init__(self, norm=Normalizer(), batch_size=4):
            super().__init__()
            self.save_hyperparameters()

    return WithObjects, DataWithObjects


def _trainer(pl, root, max_steps=1):
    return pl.Trainer(max_steps=max_steps, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      enable_checkpointing=False, default_root_dir=root)  # fmt: skip


def _new(Model, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "'encoder' is an instance of `nn.Module`": the point here
        return Model(torch.nn.Linear(32, 2), **kwargs)


def _save(pl, boring, path):
    """Fit ``WithObjects`` one step with ``pl`` (fulmen or Lightning) and save it: (path, model class, data class)."""
    Model, Data = _with_objects(boring)
    model = _new(Model, norm=Normalizer(3.0), lr=0.5, note="left out by ignore=")
    trainer = _trainer(pl, path.parent)
    trainer.fit(model, datamodule=Data(norm=Normalizer(5.0)))
    trainer.save_checkpoint(path)
    return path, Model, Data


def _lightning():
    return oracle.lightning(), oracle.lightning("lightning.pytorch.demos.boring_classes")


def _layout(checkpoint):
    """The hyperparameter entries of a checkpoint: names as they are, each dict as its keys and value types."""
    return {k: {kk: type(vv) for kk, vv in v.items()} if isinstance(v, dict) else v
            for k, v in checkpoint.items() if "hparams" in k or "hyper_parameters" in k}  # fmt: skip


@parity
def test_objects_among_the_hyperparameters_are_saved_as_lightning_saves_them(tmp_path):
    ours_path, Model, _ = _save(fulmen, boring_classes, tmp_path / "ours.ckpt")
    theirs_path = _save(*_lightning(), tmp_path / "theirs.ckpt")[0]
    ours, theirs = torch.load(ours_path, weights_only=False), torch.load(theirs_path, weights_only=False)
    assert _layout(ours) == _layout(theirs)
    assert set(ours) == set(theirs)  # no hyper_parameters_left_out
    hparams = ours["hyper_parameters"]
    assert list(hparams) == ["encoder", "norm", "fn", "act", "lr"]  # `note` went with ignore=
    assert isinstance(hparams["encoder"], torch.nn.Linear) and hparams["encoder"].in_features == 32
    assert hparams["norm"].scale == 3.0 and hparams["fn"] is double and hparams["act"] is torch.nn.Tanh
    assert hparams["lr"] == 0.5 and ours["hparams_name"] == "kwargs"
    assert ours["datamodule_hyper_parameters"]["norm"].scale == 5.0
    # Lightning's file, trusted, rebuilds the same model in fulmen
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = Model.load_from_checkpoint(theirs_path, weights_only=False)
    assert model.hparams.norm.scale == 3.0 and isinstance(model.encoder, torch.nn.Linear) and model.hparams.fn is double


def _load_outcomes(pl, boring, tmp_path, how, monkeypatch):
    """Each way of loading the checkpoint (load_from_checkpoint of the module and of the data module, then
    fit from it), told ``how`` to trust it: what each gave."""
    path, Model, Data = _save(pl, boring, tmp_path / "m.ckpt")
    kwargs = {"weights_only": {"weights_only=True": True, "weights_only=False": False}[how]} if "=" in how else {}
    allowed = torch.serialization.safe_globals(_OBJECT_CLASSES if how == "safe_globals" else [])
    if how == "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD":  # torch's own switch for a default that trusts every file
        monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")

    def fit():
        model = _new(Model)
        _trainer(pl, tmp_path, max_steps=2).fit(model, datamodule=Data(), ckpt_path=path, **kwargs)
        return model

    outcomes = []
    with allowed, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, load in enumerate((lambda: Model.load_from_checkpoint(path, **kwargs),
                                  lambda: Data.load_from_checkpoint(path, **kwargs), fit)):  # fmt: skip
            try:
                loaded = load()
            except pickle.UnpicklingError as err:
                outcomes.append(("refused", str(err)))
                continue
            hparams = loaded.hparams
            outcomes.append(("loaded", type(hparams.norm).__name__, hparams.norm.scale))
            if i == 0:  # the module's load_from_checkpoint: the saved model, objects and all
                assert isinstance(hparams.encoder, torch.nn.Linear) and loaded.encoder is hparams.encoder
                assert hparams.fn is double and hparams.act is torch.nn.Tanh and hparams.lr == 0.5
    monkeypatch.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", raising=False)
    return outcomes


@parity
@pytest.mark.parametrize(
    "how", ["default", "weights_only=True", "weights_only=False", "safe_globals", "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"]
)
def test_objects_load_only_when_the_caller_trusts_the_file_as_in_lightning(tmp_path, monkeypatch, how):
    ours = _load_outcomes(fulmen, boring_classes, tmp_path / "ours", how, monkeypatch)
    theirs = _load_outcomes(*_lightning(), tmp_path / "theirs", how, monkeypatch)
    assert [o[0] for o in ours] == [o[0] for o in theirs]  # refused (pickle.UnpicklingError) or loaded, alike
    if how in ("default", "weights_only=True"):
        assert [o[0] for o in ours] == ["refused"] * 3
    else:  # the saved objects come back (a fit keeps the model it was given, with its own Normalizer())
        assert ours == theirs == [("loaded", "Normalizer", 3.0), ("loaded", "Normalizer", 5.0),
                                  ("loaded", "Normalizer", 1.0)]  # fmt: skip


@pytest.mark.filterwarnings("ignore:Attribute 'encoder' is an instance")  # the loads build WithObjects
def test_a_checkpoint_holding_objects_is_refused_by_default_naming_the_classes_and_both_ways(tmp_path):
    path, Model, Data = _save(fulmen, boring_classes, tmp_path / "m.ckpt")

    def fit(**kwargs):
        _trainer(fulmen, tmp_path, max_steps=2).fit(_new(Model), ckpt_path=path, **kwargs)

    for load in (lambda: Model.load_from_checkpoint(path), lambda: Model.load_from_checkpoint(path, weights_only=True),
                 lambda: Data.load_from_checkpoint(path), fit, lambda: fit(weights_only=True)):  # fmt: skip
        with pytest.raises(pickle.UnpicklingError) as info:  # the class torch (and so Lightning) raises
            load()
        message = str(info.value)
        assert str(path) in message
        for name in _OBJECT_NAMES:  # every one, not only the first the unpickler met
            assert name in message
        assert "weights_only=False" in message
        assert "torch.serialization.add_safe_globals([Normalizer, double, Tanh, Linear])" in message
        assert "torch.serialization.safe_globals(" in message


@pytest.mark.filterwarnings("ignore:Attribute 'encoder' is an instance")  # the loads build WithObjects
def test_objects_load_when_their_classes_are_registered_with_add_safe_globals(tmp_path):
    path, Model, Data = _save(fulmen, boring_classes, tmp_path / "m.ckpt")
    registered = torch.serialization.get_safe_globals()
    try:
        torch.serialization.add_safe_globals([torch.nn.Linear, Normalizer])
        with pytest.raises(pickle.UnpicklingError) as info:
            Model.load_from_checkpoint(path)
        message = str(info.value)  # only those still missing
        assert f"{__name__}.double" in message and "torch.nn.modules.activation.Tanh" in message
        assert "Linear" not in message and "Normalizer" not in message
        torch.serialization.add_safe_globals([double, torch.nn.Tanh])
        model = Model.load_from_checkpoint(path)
        assert model.hparams.norm.scale == 3.0 and isinstance(model.encoder, torch.nn.Linear)
        assert Data.load_from_checkpoint(path).hparams.norm.scale == 5.0
        trainer = _trainer(fulmen, tmp_path, max_steps=2)
        trainer.fit(_new(Model), datamodule=Data(), ckpt_path=path)
        assert trainer.global_step == 2
    finally:
        torch.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals(registered)


class WithLeftOut(BoringModel):
    def __init__(self, loss_fn, act=torch.nn.ReLU(), lr=0.1):
        super().__init__()
        self.save_hyperparameters(ignore=["loss_fn", "act"])
        self.loss_fn = loss_fn
        self.act = act


def test_checkpoints_of_older_fulmen_with_objects_left_out_still_load(tmp_path):
    """Before objects were stored, fulmen wrote plain values only and named the objects under
    ``hyper_parameters_left_out``: such a file still loads by default, asking for the objects."""
    path = tmp_path / "old.ckpt"
    torch.save({"state_dict": WithLeftOut(torch.nn.MSELoss()).state_dict(), "pytorch-lightning_version": "2.6.6",
                "hparams_name": "kwargs", "hyper_parameters": {"lr": 0.5}, "hyper_parameters_left_out": ["act", "loss_fn"],
                "datamodule_hparams_name": "kwargs", "datamodule_hyper_parameters": {"batch_size": 4},
                "datamodule_hyper_parameters_left_out": ["norm"]}, path)  # fmt: skip
    with pytest.raises(TypeError, match=r"`loss_fn` .* Pass it: WithLeftOut.load_from_checkpoint\(path, loss_fn=...\)"):
        WithLeftOut.load_from_checkpoint(path)
    with pytest.warns(UserWarning, match="`act` was an object"):
        loaded = WithLeftOut.load_from_checkpoint(path, loss_fn=torch.nn.L1Loss())
    assert isinstance(loaded.loss_fn, torch.nn.L1Loss) and isinstance(loaded.act, torch.nn.ReLU)
    assert loaded.hparams.lr == 0.5
    with pytest.warns(UserWarning, match=r"got typo=.*does not take: ignored"):
        WithLeftOut.load_from_checkpoint(path, loss_fn=torch.nn.L1Loss(), act=torch.nn.Tanh(), typo=1)
    _, Data = _with_objects(boring_classes)
    with pytest.warns(UserWarning, match="`norm` was an object"):
        assert Data.load_from_checkpoint(path).hparams.batch_size == 4


@pytest.mark.filterwarnings("ignore:Attribute 'encoder' is an instance")  # the loads build WithObjects
def test_a_safetensors_export_names_the_objects_it_cannot_hold(tmp_path):
    pytest.importorskip("safetensors")
    path, Model, _ = _save(fulmen, boring_classes, tmp_path / "m.safetensors")
    with pytest.raises(TypeError, match=r"`encoder` .* WithObjects.load_from_checkpoint\(path, encoder=...\)"):
        Model.load_from_checkpoint(path)
    with pytest.warns(UserWarning, match="`act`, `fn`, `norm` was an object"):
        model = Model.load_from_checkpoint(path, encoder=torch.nn.Linear(32, 2))
    assert model.hparams.lr == 0.5 and model.hparams.norm.scale == 1.0  # __init__'s default, as warned


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
