"""utilities.parsing's helpers as Lightning's: constructor arguments read from frames, unpicklable
hyperparameters removed, and a field found on the model, its hparams or the data module."""

from __future__ import annotations

import inspect
import threading

import pytest

from fulmen.utilities import parsing
from fulmen.utilities.parsing import (
    AttributeDict,
    clean_namespace,
    collect_init_args,
    get_init_args,
    lightning_getattr,
    lightning_hasattr,
    lightning_setattr,
    parse_class_init_keys,
)
from tests.parity import oracle


def _lightning_parsing():
    return oracle.lightning("lightning.pytorch.utilities.parsing")


# -- constructor arguments from the stack ----------------------------------------------------------------------
class _Recorder:
    """Records what get_init_args / collect_init_args return while the constructors run."""

    def __init__(self, module):
        self.module = module

    def __call__(self, classes=()):
        outer = self

        class Base:
            def __init__(self, a, b=2, *args, frame=None, **kwargs):
                super().__init__()
                here = inspect.currentframe()
                outer.own = outer.module.get_init_args(here)
                outer.chain = outer.module.collect_init_args(here, [], classes=classes)

        class Child(Base):
            def __init__(self, x, *more, flag=True, **options):
                super().__init__(x, 5, *more, **options)

        Child(1, "extra", flag=False, c=3, d=4)
        return outer.own, outer.chain


@oracle.parity
@pytest.mark.parametrize("classes", [(), (object,), (int,)])
def test_constructor_arguments_are_read_as_lightning_reads_them(classes):
    ours = _Recorder(parsing)(classes)
    theirs = _Recorder(_lightning_parsing())(classes)
    assert ours == theirs
    own, chain = ours
    assert own == {"a": 1, "b": 5, "c": 3, "d": 4}  # `frame` is left out, **kwargs flattened
    if classes != (int,):
        assert chain == [own, {"x": 1, "flag": False, "c": 3, "d": 4}]  # the base's first, the child's last
    else:
        assert chain == []


def test_a_frame_that_is_no_constructor_has_no_init_args():
    def __init__(self, a):  # named like one, but no class body: not a constructor
        return inspect.currentframe()

    assert get_init_args(__init__(None, 1)) == {}
    assert get_init_args(inspect.currentframe()) == {}
    assert collect_init_args(inspect.currentframe(), []) == []


@oracle.parity
def test_parse_class_init_keys_is_lightnings():
    class Model:
        def __init__(me, hparams, *my_args, anykw=42, **my_kwargs):
            pass

    class Plain:
        def __init__(self, a):
            pass

    for cls in (Model, Plain):
        assert parse_class_init_keys(cls) == _lightning_parsing().parse_class_init_keys(cls)
    assert parse_class_init_keys(Model) == ("me", "my_args", "my_kwargs")


@oracle.parity
def test_clean_namespace_removes_what_cannot_be_pickled_with_lightnings_warning():
    def make():
        return {"lr": 0.1, "fn": lambda x: x, "lock": threading.Lock(), "name": "x"}

    ours, theirs = make(), make()
    with pytest.warns(UserWarning, match="cannot be pickled") as ours_record:
        clean_namespace(ours)
    with pytest.warns(UserWarning) as theirs_record:
        _lightning_parsing().clean_namespace(theirs)
    assert ours == theirs == {"lr": 0.1, "name": "x"}
    assert [str(w.message) for w in ours_record] == [str(w.message) for w in theirs_record]


# -- a field wherever the user keeps it -------------------------------------------------------------------------
class _Holder:
    """A model or data module reduced to what the lookup reads: attributes, ``hparams``, the trainer."""

    def __init__(self, hparams=None, trainer=None, **attributes):
        self.hparams = AttributeDict(hparams or {})
        self._trainer = trainer  # what Lightning's lookup reads
        self.__dict__.update(attributes)

    @property
    def trainer(self):
        if self._trainer is None:
            raise RuntimeError("not attached to a Trainer")
        return self._trainer


class _Trainer:
    def __init__(self, datamodule):
        self.datamodule = datamodule


def _models():
    """(description, factory) pairs: a fresh model each call, so both libraries see the same start."""
    return [
        ("attribute", lambda: _Holder(batch_size=8)),
        ("hparams", lambda: _Holder(hparams={"batch_size": 8})),
        ("both", lambda: _Holder(hparams={"batch_size": 4}, batch_size=8)),
        ("datamodule", lambda: _Holder(trainer=_Trainer(_Holder(batch_size=16)))),
        ("datamodule hparams", lambda: _Holder(batch_size=8, trainer=_Trainer(_Holder(hparams={"batch_size": 32})))),
        ("nowhere", lambda: _Holder(trainer=_Trainer(None))),
    ]


def _snapshot(model):
    datamodule = model._trainer.datamodule if model._trainer is not None else None
    return [(vars(h).get("batch_size"), dict(h.hparams)) for h in (model, datamodule) if h is not None]


@oracle.parity
@pytest.mark.parametrize("make", [m for _, m in _models()], ids=[d for d, _ in _models()])
def test_the_field_is_found_read_and_written_where_lightning_finds_it(make):
    theirs = _lightning_parsing()
    assert lightning_hasattr(make(), "batch_size") == theirs.lightning_hasattr(make(), "batch_size")
    results = []
    for module in (parsing, theirs):
        model = make()
        try:
            value = module.lightning_getattr(model, "batch_size")
            module.lightning_setattr(model, "batch_size", 64)
            results.append((value, _snapshot(model)))
        except AttributeError as err:
            results.append(("AttributeError", str(err).split(".")[0]))
    assert results[0] == results[1]


def test_a_missing_field_names_where_it_was_looked_for():
    model = _Holder()
    assert not lightning_hasattr(model, "lr")
    with pytest.raises(AttributeError, match="lr is neither stored in the model namespace.*self.lr = "):
        lightning_getattr(model, "lr")
    with pytest.raises(AttributeError, match="lr is neither stored"):
        lightning_setattr(model, "lr", 0.1)
    assert "lr" not in model.hparams and not hasattr(model, "lr")


def test_the_tuner_writes_its_result_to_every_holder():
    from fulmen.tuner.trials import field_owners, set_field

    datamodule = _Holder(batch_size=2, hparams={"batch_size": 2})
    model = _Holder(batch_size=2, hparams={"batch_size": 2})
    owners = field_owners(model, datamodule, "batch_size")
    assert [holder for holder, _ in owners] == [model, model.hparams, datamodule, datamodule.hparams]
    for holder, name in owners:
        set_field(holder, name, 128)
    assert (model.batch_size, model.hparams.batch_size, datamodule.batch_size, datamodule.hparams.batch_size) \
        == (128, 128, 128, 128)  # fmt: skip


@oracle.parity
def test_is_picklable_is_lightnings():
    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("no")

    theirs = _lightning_parsing().is_picklable
    for value in (1, "a", [1, {"b": 2}], lambda: 0, threading.Lock(), Unpicklable()):
        assert parsing.is_picklable(value) == theirs(value)
