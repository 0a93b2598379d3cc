"""``trainer._data_connector`` and the distributed sampler a run injects, against Lightning's.

Under several processes each loader gets its share of the data: the differential test below gives both
trainers the same loaders (plain, shuffled, an uneven data set with ``drop_last``, a custom sampler, DataLoader
subclasses) for each stage, on rank 0 and rank 1, and compares the batches each rank would load. It is the code
path of a real run (``DataSource.distributed``), with the rank patched instead of started."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, Sampler, SequentialSampler

import fulmen
from fulmen.core.datamodule import LightningDataModule
from fulmen.demos import BoringModel
from fulmen.overrides.distributed import UnrepeatedDistributedSamplerWrapper
from fulmen.runtime.state import RunningStage
from fulmen.utilities.exceptions import MisconfigurationException
from tests.parity import oracle


class Reverse(Sampler):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return iter(range(self.n - 1, -1, -1))


class Keeping(DataLoader):
    """A subclass that keeps its own argument as an attribute of the same name (Lightning's test loader)."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, dummy_kwarg=None, **kwargs):
        super().__init__(dataset, batch_size=batch_size, shuffle=shuffle, sampler=sampler, **kwargs)
        self.dummy_kwarg = dummy_kwarg


class Forgetting(DataLoader):
    """A subclass whose required argument is not kept: it cannot be made again with another sampler."""

    def __init__(self, dataset, scale):
        super().__init__(dataset, batch_size=2)


class Chunked(BatchSampler):
    """A batch sampler of the user's own, with BatchSampler's arguments: its batches come in reverse order."""

    def __iter__(self):
        return iter(list(super().__iter__())[::-1])


class Pairs:
    """A batch sampler that is no BatchSampler (no ``batch_size`` / ``drop_last``): pairs of indices."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n // 2

    def __iter__(self):
        return iter([[i, i + 1] for i in range(0, self.n - 1, 2)])


_LOADERS = {
    "plain": lambda: DataLoader(list(range(10)), batch_size=2),
    "shuffled": lambda: DataLoader(list(range(10)), batch_size=2, shuffle=True),
    "uneven, drop_last": lambda: DataLoader(list(range(11)), batch_size=2, drop_last=True),
    "uneven": lambda: DataLoader(list(range(11)), batch_size=2),
    "custom sampler": lambda: DataLoader(list(range(10)), batch_size=2, sampler=Reverse(10)),
    "subclass": lambda: Keeping(list(range(10)), batch_size=2, dummy_kwarg=3),
    "shuffled subclass": lambda: Keeping(list(range(10)), batch_size=2, shuffle=True),
    "unbatched": lambda: DataLoader(list(range(5)), batch_size=None),
    "custom batch sampler": lambda: DataLoader(list(range(11)), batch_sampler=Chunked(SequentialSampler(range(11)), 2, False)),
}


def _loaded(loader) -> tuple[str, list, object]:
    torch.manual_seed(0)  # a shuffled share draws from its seed, a plain RandomSampler from the global RNG
    batches = [b.tolist() if isinstance(b, torch.Tensor) else b for b in loader]
    return type(loader).__name__, batches, getattr(loader, "dummy_kwarg", None)


@oracle.parity
@pytest.mark.parametrize("name", sorted(_LOADERS))
def test_each_rank_gets_the_share_lightning_gives_it(name, monkeypatch):
    lightning = oracle.lightning()
    # the samplers' seed as no seed_everything left it: a shuffled prediction share is drawn from it in fulmen
    # and from the epoch alone in Lightning (a deliberate difference), which agree only for seed 0
    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
    from lightning.pytorch.trainer.states import RunningStage as TheirStage
    from lightning.pytorch.utilities.data import _is_dataloader_shuffled

    make = _LOADERS[name]
    trainers = [(lib.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", logger=False), stages)
                for lib, stages in ((fulmen, RunningStage), (lightning, TheirStage))]  # fmt: skip
    for mode in ("TRAINING", "VALIDATING", "PREDICTING"):
        for shuffle in (None, True, False):
            for rank in (0, 1):
                seen = []
                for trainer, stages in trainers:
                    loader = make()
                    # Lightning's caller always says whether to shuffle; fulmen reads it from the loader
                    told = _is_dataloader_shuffled(loader) if shuffle is None and stages is TheirStage else shuffle
                    kwargs = {} if told is None else {"shuffle": told}
                    prop = mock.PropertyMock(return_value=rank)
                    with mock.patch.object(type(trainer.strategy), "global_rank", new_callable=lambda p=prop: p):
                        prepared = trainer._data_connector._prepare_dataloader(loader, mode=getattr(stages, mode), **kwargs)
                    seen.append(_loaded(prepared))
                assert seen[0] == seen[1], (mode, shuffle, rank)


def _prepared(loader, mode, rank, shuffle=None):
    trainer = fulmen.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", logger=False)
    prop = mock.PropertyMock(return_value=rank)
    kwargs = {} if shuffle is None else {"shuffle": shuffle}
    with mock.patch.object(type(trainer.strategy), "global_rank", new_callable=lambda: prop):
        return trainer._data_connector._prepare_dataloader(loader, mode=mode, **kwargs)


@pytest.mark.parametrize(("inner", "size", "drop_last"), [(SequentialSampler, 2, False), (RandomSampler, 3, True)])
@pytest.mark.parametrize("mode", [RunningStage.TRAINING, RunningStage.VALIDATING, RunningStage.PREDICTING])
def test_a_plain_batch_sampler_batches_each_ranks_share(inner, size, drop_last, mode, monkeypatch):
    """A loader built with ``batch_sampler=BatchSampler(...)`` loads the batches of its rank's share: its batch size
    and ``drop_last`` (off for prediction), its shuffling kept. (Lightning's loader then yields single samples
    that its collate function cannot take: see docs/compatibility.md.)"""
    monkeypatch.setenv("PL_GLOBAL_SEED", "3")
    data = list(range(11))
    predicting = mode == RunningStage.PREDICTING
    for rank in (0, 1):
        prepared = _prepared(DataLoader(data, batch_sampler=BatchSampler(inner(data), size, drop_last)), mode, rank)
        shares = {"num_replicas": 2, "rank": rank, "shuffle": inner is RandomSampler, "seed": 3}
        if predicting:  # each sample once
            share = list(UnrepeatedDistributedSamplerWrapper(SequentialSampler(data), **shares))
        else:
            share = list(torch.utils.data.DistributedSampler(data, **shares))
        batches = [share[i:i + size] for i in range(0, len(share), size)]
        if drop_last and not predicting:
            batches = [b for b in batches if len(b) == size]
        assert [b.tolist() for b in prepared] == batches


@oracle.parity
@pytest.mark.parametrize("mode", ["TRAINING", "PREDICTING"])
def test_a_batch_sampler_that_is_no_batch_sampler_as_in_lightning(mode):
    """One without ``batch_size`` / ``drop_last`` cannot be shared out: refused for training (a ``TypeError``), kept
    with a warning for prediction."""
    lightning = oracle.lightning()
    from lightning.pytorch.trainer.states import RunningStage as TheirStage

    for lib, stages in ((fulmen, RunningStage), (lightning, TheirStage)):
        trainer = lib.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", logger=False)
        loader = DataLoader(list(range(11)), batch_sampler=Pairs(11))
        prepare = trainer._data_connector._prepare_dataloader
        if mode == "TRAINING":
            with pytest.raises(TypeError, match="batch sampler"):
                prepare(loader, shuffle=False, mode=getattr(stages, mode))
        else:
            with pytest.warns(UserWarning, match="Pairs"):
                prepared = prepare(loader, shuffle=False, mode=getattr(stages, mode))
            assert [b.tolist() for b in prepared] == [[i, i + 1] for i in range(0, 10, 2)]


@oracle.parity
def test_a_subclass_that_cannot_be_made_again_is_refused_as_by_lightning():
    lightning = oracle.lightning()
    for lib in (fulmen, lightning):
        trainer = lib.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", logger=False)
        with pytest.raises(Exception, match="scale") as raised:
            trainer._data_connector._prepare_dataloader(Forgetting(list(range(4)), 2.0), shuffle=False,
                                                        mode=RunningStage.TRAINING)  # fmt: skip
        assert type(raised.value).__name__ == MisconfigurationException.__name__


@oracle.parity
def test_prepare_data_runs_on_local_rank_zero_or_on_the_first_machine_as_lightnings():
    """What a multi-machine job does, with the ranks patched on the Trainer (as Lightning's tests patch them)."""
    lightning = oracle.lightning()
    from lightning.pytorch.demos.boring_classes import BoringModel as TheirBoringModel

    for lib, owner in ((fulmen, "fulmen.trainer.trainer.Trainer"), (lightning, "lightning.pytorch.trainer.trainer.Trainer")):
        base = lib.LightningDataModule

        class Data(base):
            def prepare_data(self):
                pass

        datamodule = Data()
        datamodule.prepare_data = mock.Mock(wraps=datamodule.prepare_data)
        trainer = lib.Trainer(logger=False)
        trainer._data_connector.attach_datamodule(BoringModel() if lib is fulmen else TheirBoringModel(),
                                                  datamodule=datamodule)  # fmt: skip
        calls = []
        for per_node, local_rank, node_rank in [(True, 0, 0), (True, 1, 0), (True, 0, 1), (False, 0, 0),
                                                (False, 0, 1), (False, 1, 0)]:  # fmt: skip
            datamodule.prepare_data_per_node = per_node
            datamodule.prepare_data.reset_mock()
            with mock.patch(f"{owner}.local_rank", new_callable=mock.PropertyMock, return_value=local_rank), \
                 mock.patch(f"{owner}.node_rank", new_callable=mock.PropertyMock, return_value=node_rank):  # fmt: skip
                trainer._data_connector.prepare_data()
            calls.append(datamodule.prepare_data.call_count)
        assert calls == [1, 0, 1, 1, 0, 0], lib.__name__


@oracle.parity
def test_attached_data_sources_and_hook_owners_as_lightnings():
    lightning = oracle.lightning()

    def check(lib, module_cls):
        class Data(lib.LightningDataModule):
            def val_dataloader(self):
                return DataLoader(list(range(4)))

            def transfer_batch_to_device(self, batch, device, dataloader_idx):
                return batch

        def described(source, model, datamodule):
            owner = "model" if source.instance is model else "datamodule" if source.instance is datamodule else "given"
            return owner, source.name, source.is_module(), source.is_defined()

        found = []
        model, datamodule, loader = module_cls(), Data(), DataLoader(list(range(3)))
        for attached in ({"train_dataloaders": loader}, {"datamodule": datamodule}):
            trainer = lib.Trainer(logger=False)
            trainer._data_connector.attach_data(model, **attached)
            for loop in (trainer.fit_loop, trainer.validate_loop, trainer.test_loop, trainer.predict_loop):
                found.append(described(loop._data_source, model, datamodule))
            found.append(len(trainer.validate_loop._data_source.dataloader()))
            selector = trainer._data_connector._datahook_selector
            found.append([selector.get_instance(hook) is datamodule for hook in
                          ("transfer_batch_to_device", "on_before_batch_transfer")])  # fmt: skip
        return found

    from lightning.pytorch.demos.boring_classes import BoringModel as TheirBoringModel

    ours = check(fulmen, BoringModel)
    theirs = check(lightning, TheirBoringModel)
    assert ours == theirs
    # Lightning 1.x read them from the data connector
    connector = fulmen.Trainer(logger=False)._data_connector
    loader = DataLoader(list(range(3)))
    connector.attach_data(BoringModel(), predict_dataloaders=loader)
    assert connector._predict_dataloader_source.dataloader() is loader
    assert connector._train_dataloader_source.name == "train_dataloader"


def test_a_subclass_keeps_its_class_and_arguments_under_ddp():
    trainer = fulmen.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", logger=False)
    prepared = trainer._data_connector._prepare_dataloader(Keeping(list(range(6)), batch_size=3, dummy_kwarg="x"),
                                                          shuffle=False, mode=RunningStage.TRAINING)  # fmt: skip
    assert type(prepared) is Keeping and prepared.dummy_kwarg == "x" and prepared.batch_size == 3
    assert [b.tolist() for b in prepared] == [[0, 2, 4]]


def test_teardown_after_a_run_is_safe():
    trainer = fulmen.Trainer(max_steps=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
                             enable_checkpointing=False, limit_val_batches=0)  # fmt: skip
    trainer.fit(BoringModel())
    trainer._teardown()
    trainer._teardown()
    assert trainer.state.finished


def test_the_datamodule_is_attached_with_its_trainer():
    trainer = fulmen.Trainer(logger=False)
    datamodule = LightningDataModule()
    trainer._data_connector.attach_datamodule(BoringModel(), datamodule=datamodule)
    assert trainer.datamodule is datamodule and datamodule.trainer is trainer


class Scaling(DataLoader):
    """Keeps none of its arguments: only the arguments recorded when a ``*_dataloader`` hook made it can make it
    again."""

    def __init__(self, data, scale, **kwargs):
        super().__init__([value * scale for value in data], **kwargs)


@oracle.parity
def test_a_subclass_made_in_a_hook_is_made_again_from_its_arguments_as_by_lightning():
    lightning = oracle.lightning()
    from lightning.pytorch.demos.boring_classes import BoringModel as TheirBoringModel
    from lightning.pytorch.trainer.connectors.data_connector import _request_dataloader
    from lightning.pytorch.trainer.states import RunningStage as TheirStage

    seen = {}
    for lib, base in ((fulmen, BoringModel), (lightning, TheirBoringModel)):

        class Model(base):
            def train_dataloader(self):
                return Scaling(list(range(8)), 10, batch_size=2)

        trainer = lib.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", logger=False)
        model = Model()
        with mock.patch.object(type(trainer.strategy), "global_rank", new_callable=mock.PropertyMock, return_value=1):
            if lib is fulmen:
                trainer._data_connector.attach_data(model)
                loader = trainer._context.data.request_train_dataloader()
            else:
                trainer.strategy.connect(model)
                trainer._data_connector.attach_data(model)
                made = _request_dataloader(trainer.fit_loop._data_source)
                loader = trainer._data_connector._prepare_dataloader(made, shuffle=False, mode=TheirStage.TRAINING)
        seen[lib.__name__] = (type(loader).__name__, [b.tolist() for b in loader])
    assert seen["fulmen"] == seen["lightning.pytorch"] == ("Scaling", [[10, 30], [50, 70]])
    # made outside a hook, nothing was recorded: refused, naming the argument
    trainer = fulmen.Trainer(accelerator="cpu", devices=2, strategy="ddp_spawn", logger=False)
    with pytest.raises(MisconfigurationException, match="'scale'.*`\\*_dataloader` hook"):
        trainer._data_connector._prepare_dataloader(Scaling(list(range(4)), 2, batch_size=2), shuffle=False,
                                                    mode=RunningStage.TRAINING)  # fmt: skip


@oracle.parity
def test_a_datamodule_assigned_to_the_trainer_is_prepared_as_in_lightning():
    lightning = oracle.lightning()
    for lib in (fulmen, lightning):

        class Data(lib.LightningDataModule):
            calls: list[str] = []

            def prepare_data(self):
                self.calls.append("prepare_data")

        trainer = lib.Trainer(logger=False)
        trainer.datamodule = Data()
        trainer._data_connector.prepare_data()
        assert Data.calls == ["prepare_data"] and isinstance(trainer.datamodule, Data)
