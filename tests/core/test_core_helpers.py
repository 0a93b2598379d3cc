"""``fulmen.core``'s smaller public names, against Lightning's: ``HyperparametersMixin`` (also on a class that is
not a module), ``core.saving``'s tags-CSV helpers, ``update_hparams`` and ``convert``,
``core.optimizer.do_nothing_closure`` and ``LightningDataModule(*args, **kwargs)``."""

from __future__ import annotations

import argparse

import pytest
import torch

from fulmen import LightningDataModule
from fulmen.core.mixins import DeviceDtypeModuleMixin, HyperparametersMixin
from fulmen.core.mixins.hparams_mixin import HyperparametersMixin as FromModule
from fulmen.core.saving import convert, load_hparams_from_tags_csv, save_hparams_to_tags_csv, update_hparams
from tests.parity import oracle


def _lightning_saving():
    oracle.lightning()
    from lightning.pytorch.core import saving

    return saving


def test_the_mixins_package_keeps_every_name():
    assert FromModule is HyperparametersMixin
    assert issubclass(fulmen_module(), DeviceDtypeModuleMixin) and issubclass(fulmen_module(), HyperparametersMixin)


def fulmen_module():
    from fulmen import LightningModule

    return LightningModule


@oracle.parity
def test_hyperparameters_mixin_on_a_plain_class_as_lightnings():
    oracle.lightning()
    from lightning.pytorch.core.mixins import HyperparametersMixin as Theirs

    def build(base):
        class Config(base):
            def __init__(self, lr=0.1, layers=2, name="x"):
                super().__init__()
                self.save_hyperparameters(ignore="name", logger=False)

        return Config(lr=0.5)

    mine, theirs = build(HyperparametersMixin), build(Theirs)
    assert dict(mine.hparams) == dict(theirs.hparams) == {"lr": 0.5, "layers": 2}
    assert mine.hparams.lr == 0.5 and dict(mine.hparams_initial) == dict(theirs.hparams_initial)
    assert mine._log_hyperparams is theirs._log_hyperparams is False
    assert HyperparametersMixin()._log_hyperparams is Theirs()._log_hyperparams is False
    mine.hparams.lr = 1.0
    assert mine.hparams_initial.lr == 0.5  # a copy taken when saved
    mine.remove_ignored_hparams(["layers"])
    theirs.remove_ignored_hparams(["layers"])
    assert dict(mine.hparams) == {"lr": 1.0} and dict(theirs.hparams) == {"lr": 0.5}
    assert "layers" in mine.hparams_initial
    for value in (argparse.Namespace(a=1), {"a": 1}):
        assert dict(HyperparametersMixin._to_hparams_dict(value)) == dict(Theirs._to_hparams_dict(value)) == {"a": 1}
        assert HyperparametersMixin._to_hparams_dict(value).a == 1
    for bad in ("lr", 3, [1]):
        with pytest.raises(ValueError):
            Theirs._to_hparams_dict(bad)
        with pytest.raises(ValueError, match="not allowed|Unsupported config type"):
            HyperparametersMixin._to_hparams_dict(bad)


def test_remove_ignored_hparams_before_any_is_saved_does_nothing():
    mixin = HyperparametersMixin()
    mixin.remove_ignored_hparams(["x"])
    assert dict(mixin.hparams) == {}


@oracle.parity
def test_tags_csv_round_trips_byte_for_byte_with_lightning(tmp_path):
    saving = _lightning_saving()
    hparams = {"a": 1, "b": "x y", "c": True, "d": 1.5, "e": None, "f": [1, 2], "g": "None", "h": "true", "i": "a,b"}
    save_hparams_to_tags_csv(tmp_path / "ours.csv", hparams)
    saving.save_hparams_to_tags_csv(tmp_path / "theirs.csv", hparams)
    assert (tmp_path / "ours.csv").read_bytes() == (tmp_path / "theirs.csv").read_bytes()
    loaded = load_hparams_from_tags_csv(tmp_path / "theirs.csv")
    assert loaded == saving.load_hparams_from_tags_csv(tmp_path / "ours.csv")
    assert loaded["f"] == [1, 2] and loaded["c"] is True and loaded["g"] is None and loaded["i"] == "a,b"
    save_hparams_to_tags_csv(str(tmp_path / "ns.csv"), argparse.Namespace(batch_size=32, lr=0.001))
    assert load_hparams_from_tags_csv(str(tmp_path / "ns.csv")) == {"batch_size": 32, "lr": 0.001}


def test_tags_csv_missing_file_and_folder(tmp_path):
    with pytest.warns(RuntimeWarning, match="Missing Tags"):
        assert load_hparams_from_tags_csv(tmp_path / "none.csv") == {}
    with pytest.raises(RuntimeError, match="Missing folder"):
        save_hparams_to_tags_csv(tmp_path / "no_such_dir" / "h.csv", {"a": 1})


@oracle.parity
def test_convert_reads_literals_as_lightning():
    saving = _lightning_saving()
    for text in ("1", "1.5", "True", "true", "None", "none", "abc", "1e3", "nan", "-2", " 3", "0x10", "", "[1, 2]",
                 "(1,2)", "{'a': 1}", " abc ", "x=1", "1 2", "1_000", "'quoted'"):  # fmt: skip
        assert convert(text) == saving.convert(text) and type(convert(text)) is type(saving.convert(text)), text


@oracle.parity
def test_update_hparams_merges_nested_dicts_as_lightning():
    saving = _lightning_saving()
    steps = [{"a": {"b": 2}, "c": 1}, {"a": {"b": 4}, "c": 7}, {"a": {"d": 3}}, {"e": [1]}]
    mine, theirs = {"c": 4}, {"c": 4}
    for update in steps:
        update_hparams(mine, update)
        saving.update_hparams(theirs, update)
        assert mine == theirs
    assert mine == {"c": 7, "a": {"b": 4, "d": 3}, "e": [1]}
    flat = {"a": 1}
    update_hparams(flat, {"a": {"b": 2}})  # Lightning raises a TypeError here; a dict replaces the value
    assert flat == {"a": {"b": 2}}


def test_do_nothing_closure_is_the_default_closure():
    from fulmen.core.optimizer import LightningOptimizer, do_nothing_closure

    assert do_nothing_closure() is None
    weight = torch.nn.Parameter(torch.ones(2))
    weight.grad = torch.ones(2)
    LightningOptimizer(torch.optim.SGD([weight], lr=1.0)).step()  # no closure given: the do-nothing one runs
    assert torch.equal(weight.detach(), torch.zeros(2))


@oracle.parity
def test_datamodule_takes_and_ignores_arguments_as_lightning():
    pl = oracle.lightning()

    class Forwarding:
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)

    class Mine(Forwarding, LightningDataModule):
        pass

    class Theirs(Forwarding, pl.LightningDataModule):
        pass

    mine, theirs = Mine(1, 2, batch_size=3), Theirs(1, 2, batch_size=3)
    assert mine.trainer is theirs.trainer is None
    assert mine.prepare_data_per_node is theirs.prepare_data_per_node is True
    assert not hasattr(mine, "batch_size") and not hasattr(theirs, "batch_size")


def _with_fabric(pl):
    """A LightningModule set up with Lightning's Fabric: what its fabric, trainer, log, optimizers and
    manual_backward do there (Fabric is the oracle's: fulmen has none, but a fulmen module must work with it)."""
    from lightning.fabric import Fabric
    from lightning.fabric.loggers import Logger as FabricLogger

    logged = []

    class Capture(FabricLogger):
        name, version = "capture", 0

        def log_metrics(self, metrics, step=None):
            logged.append({k: float(v) for k, v in metrics.items()})

        def log_hyperparams(self, params, *args, **kwargs):
            pass

    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.child = type(self)._Child()
            self.layer = torch.nn.Linear(3, 1)

        def forward(self, x):
            return self.layer(x)

        class _Child(pl.LightningModule):
            pass

    fabric = Fabric(accelerator="cpu", devices=1, loggers=[Capture()])
    module = Net()
    before = (module.fabric, module.child.fabric)
    wrapped, optimizer = fabric.setup(module, torch.optim.SGD(module.parameters(), lr=0.5))
    loss = wrapped(torch.ones(2, 3)).sum()
    module.log("loss", loss)
    module.log_dict({"a": 1.0, "b": torch.tensor(2.0)})
    module.log("dropped", 3.0, logger=False)
    with pytest.raises(ValueError, match="values cannot be logged"):
        module.log("text", "abc")
    module.manual_backward(loss)
    module.optimizers().step()
    with pytest.raises(AttributeError, match=r"self.trainer.max_epochs"):
        module.trainer.max_epochs  # noqa: B018
    detached = Net()
    detached.fabric = fabric
    return {
        "before": before, "is_fabric": module.fabric is fabric, "proxy_on_children": detached.child.fabric is not None,
        "world_size": module.trainer.world_size, "logger": module.logger.name, "loggers": len(module.loggers),
        "logged": logged, "weight": module.layer.weight.detach().clone(),
        "optimizer": module.optimizers() is optimizer,
    }  # fmt: skip


@oracle.parity
def test_a_fabric_attached_module_works_as_lightnings():
    import fulmen

    ours, theirs = _with_fabric(fulmen), _with_fabric(oracle.lightning())
    torch.testing.assert_close(ours.pop("weight"), theirs.pop("weight"))
    assert ours == theirs
    assert ours["before"] == (None, None) and ours["logged"][0]["loss"] == theirs["logged"][0]["loss"]
    assert fulmen.LightningModule().fabric is None
