"""Members of the built-in callbacks that libraries and subclasses use, as in Lightning: the hooks called by
keyword with Lightning's argument names, EarlyStopping's mode tables, the finders' modes, ModelCheckpoint's
naming helpers, ModelPruning's parameter selection, the summaries' ``summarize`` and the tqdm bar format."""

from __future__ import annotations

import csv
import importlib
import inspect

import pytest
import torch
from torch import nn

import fulmen
from fulmen.callbacks import (
    BatchSizeFinder,
    EarlyStopping,
    GradientAccumulationScheduler,
    LearningRateFinder,
    ModelCheckpoint,
    ModelPruning,
    ModelSummary,
    TQDMProgressBar,
)
from fulmen.utilities.exceptions import MisconfigurationException
from tests.parity import oracle


def _boring(pl):
    return importlib.import_module(f"{pl.__name__}.demos.boring_classes").BoringModel()


# -- hooks called with Lightning's names, by keyword ----------------------------------------------------------
def _by_keyword(base, hooks, calls):
    """A subclass of ``base`` whose ``hooks`` hand their arguments on to ``base``'s by keyword, with the names of
    Lightning's ``Callback`` hooks (what a subclass calling ``super().hook(trainer=..., ...)`` does)."""
    from lightning.pytorch.callbacks import Callback as LightningCallback

    def forwarding(hook):
        names = list(inspect.signature(getattr(LightningCallback, hook)).parameters)[1:]

        def method(self, *args, **kwargs):
            calls.append(hook)
            getattr(base, hook)(self, **dict(zip(names, args)), **kwargs)

        return method

    return type(f"Keyword{base.__name__}", (base,), {hook: forwarding(hook) for hook in hooks})


def _monitored_run(pl, root):
    calls: list[str] = []
    cbs = pl.callbacks
    device = _by_keyword(cbs.DeviceStatsMonitor, [f"on_{s}_batch_{w}" for s in ("validation", "test")
                                                  for w in ("start", "end")], calls)(cpu_stats=False)  # fmt: skip
    throughput = _by_keyword(cbs.ThroughputMonitor, [f"on_{s}_batch_end" for s in ("validation", "test", "predict")],
                             calls)(batch_size_fn=lambda batch: batch.size(0))  # fmt: skip
    lr = _by_keyword(cbs.LearningRateMonitor, ["on_train_batch_start"], calls)()
    timer = _by_keyword(cbs.Timer, ["on_train_batch_end"], calls)(duration="00:01:00:00", interval="step")
    trainer = pl.Trainer(max_epochs=1, limit_train_batches=3, limit_val_batches=2, limit_test_batches=2,
                         limit_predict_batches=2, log_every_n_steps=1, num_sanity_val_steps=0,
                         callbacks=[device, throughput, lr, timer], logger=pl.loggers.CSVLogger(root),
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=root)  # fmt: skip
    model = _boring(pl)
    trainer.fit(model)
    trainer.test(model, verbose=False)
    trainer.predict(model)
    with open(root / "lightning_logs" / "version_0" / "metrics.csv") as f:
        columns = set(next(csv.DictReader(f)))
    return sorted(set(calls)), columns, timer.time_elapsed("train") > 0


@oracle.parity
def test_hooks_called_by_keyword_work_as_in_lightning(tmp_path):
    ours = _monitored_run(fulmen, tmp_path / "f")
    theirs = _monitored_run(oracle.lightning(), tmp_path / "l")
    assert ours[0] == theirs[0] and len(ours[0]) == 7
    assert {"lr-SGD", "validate/batches", "test/batches", "predict/batches"} <= ours[1]
    assert ours[1] == theirs[1], ours[1] ^ theirs[1]
    assert ours[2] and theirs[2]


def test_gradient_accumulation_scheduler_by_keyword():
    scheduler = GradientAccumulationScheduler({0: 1, 1: 3})
    assert [scheduler.get_accumulate_grad_batches(epoch=e) for e in range(3)] == [1, 3, 3]

    class Keyword(GradientAccumulationScheduler):
        def on_train_epoch_start(self, trainer, pl_module):
            super().on_train_epoch_start(trainer=trainer, pl_module=pl_module)

    trainer = fulmen.Trainer(max_epochs=2, limit_train_batches=3, limit_val_batches=0, logger=False,
                             enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
                             callbacks=[Keyword({0: 1, 1: 3})])  # fmt: skip
    trainer.fit(_boring(fulmen))
    assert trainer.accumulate_grad_batches == 3 and trainer.global_step == 3 + 1


# -- EarlyStopping, the finders, TQDMProgressBar --------------------------------------------------------------
@oracle.parity
def test_early_stopping_mode_tables_are_lightnings():
    theirs = oracle.lightning().callbacks.EarlyStopping
    assert EarlyStopping.mode_dict == theirs.mode_dict == {"min": torch.lt, "max": torch.gt}
    assert EarlyStopping.order_dict == theirs.order_dict == {"min": "<", "max": ">"}
    for mode in ("min", "max"):
        assert EarlyStopping("loss", mode=mode).monitor_op is theirs("loss", mode=mode).monitor_op


def test_early_stopping_reads_its_mode_tables():
    """A subclass with its own mode: the improvement test, min_delta's sign and the first best follow it."""

    class AtLeast(EarlyStopping):
        mode_dict = {**EarlyStopping.mode_dict, "max_or_equal": torch.ge}
        order_dict = {**EarlyStopping.order_dict, "max_or_equal": ">="}

    stopper = AtLeast("acc", mode="max_or_equal", min_delta=0.5, stopping_threshold=0.9)
    assert stopper.monitor_op is torch.ge and stopper.min_delta == -0.5 and stopper.best_score == torch.inf
    should_stop, message = stopper._evaluate_stopping_criteria(torch.tensor(0.9))
    assert should_stop and ">= stopping_threshold=0.9" in message
    assert stopper.stopping_reason.name == "STOPPING_THRESHOLD"
    with pytest.raises(MisconfigurationException, match="min, max, got avg"):
        EarlyStopping("loss", mode="avg")


def _phases_run(pl, tmp_path):
    """A subclass overriding EarlyStopping's decision step (as finetuning-scheduler's does): when patience runs out
    it counts a phase and goes on instead of stopping, until the third phase."""

    class Phases(pl.callbacks.EarlyStopping):
        phases = 0

        def _evaluate_stopping_criteria(self, current):
            should_stop, reason = super()._evaluate_stopping_criteria(current)
            if should_stop and self.phases < 2:
                self.phases += 1
                self.wait_count = 0
                return False, reason
            return should_stop, reason

    class Model(importlib.import_module(f"{pl.__name__}.demos.boring_classes").BoringModel):
        def validation_step(self, batch, batch_idx):
            self.log("score", float(self.current_epoch % 2))  # no improvement after the first epoch

    stopper = Phases(monitor="score", patience=1)
    trainer = pl.Trainer(default_root_dir=tmp_path, callbacks=[stopper], max_epochs=20, limit_train_batches=2,
                         limit_val_batches=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)  # fmt: skip
    trainer.fit(Model())
    return stopper.phases, stopper.stopped_epoch, trainer.current_epoch, stopper.stopping_reason.name


@oracle.parity
def test_a_subclass_overriding_the_stopping_decision_steers_the_run_as_in_lightning(tmp_path):
    assert _phases_run(fulmen, tmp_path / "f") == _phases_run(oracle.lightning(), tmp_path / "l")


@oracle.parity
def test_finder_modes_and_bar_format_are_lightnings():
    pl = oracle.lightning()
    assert LearningRateFinder.SUPPORTED_MODES == pl.callbacks.LearningRateFinder.SUPPORTED_MODES
    assert LearningRateFinder(mode="Linear")._mode == "linear"  # lower-cased, as in Lightning
    for cls in (LearningRateFinder, pl.callbacks.LearningRateFinder):
        with pytest.raises(ValueError, match=r"`mode` should be either of \('linear', 'exponential'\)"):
            cls(mode="cosine")
    assert TQDMProgressBar.BAR_FORMAT == pl.callbacks.TQDMProgressBar.BAR_FORMAT


def test_the_tqdm_bar_uses_its_bar_format(monkeypatch):
    class Plain(TQDMProgressBar):
        BAR_FORMAT = "{n_fmt}/{total_fmt}"

    bar = Plain()
    assert bar._make("Epoch 0", position=0, leave=False).bar_format == "{n_fmt}/{total_fmt}"


def test_batch_size_finder_setup_takes_no_stage():
    assert inspect.signature(BatchSizeFinder.setup).parameters["stage"].default is None
    trainer = fulmen.Trainer(logger=False)
    BatchSizeFinder().setup(trainer, _boring(fulmen))  # nothing to refuse


# -- ModelCheckpoint --------------------------------------------------------------------------------------------
@oracle.parity
@pytest.mark.parametrize("prefix", [None, "", "run"])
def test_format_checkpoint_name_prefix_as_lightning(prefix):
    pl = oracle.lightning()
    metrics = {"epoch": torch.tensor(3), "val_loss": torch.tensor(0.25)}
    kwargs = {"dirpath": "/ckpts", "filename": "{epoch}-{val_loss:.2f}"}
    ours = ModelCheckpoint(**kwargs).format_checkpoint_name(metrics, prefix=prefix, ver=2)
    assert ours == pl.callbacks.ModelCheckpoint(**kwargs).format_checkpoint_name(metrics, prefix=prefix, ver=2)


def test_file_exists_decides_the_version_suffix(tmp_path):
    trainer = fulmen.Trainer(logger=False)
    checkpoint = ModelCheckpoint(dirpath=tmp_path)
    (tmp_path / "here.ckpt").touch()
    assert checkpoint.file_exists(tmp_path / "here.ckpt", trainer)
    assert not checkpoint.file_exists(str(tmp_path / "gone.ckpt"), trainer=trainer)
    seen = []

    class NeverThere(ModelCheckpoint):
        def file_exists(self, filepath, trainer):
            seen.append(str(filepath))
            return False

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "epoch=0-step=2.ckpt").write_text("an unrelated file")
    never = NeverThere(dirpath=tmp_path / "run")
    fit = fulmen.Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=0, logger=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[never])  # fmt: skip
    fit.fit(_boring(fulmen))
    assert seen and never.best_model_path.endswith("epoch=0-step=2.ckpt")  # overwritten: no -v1 suffix


# -- ModelPruning -------------------------------------------------------------------------------------------
def _net(pl):
    class Net(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2, bias=False))
            self.head = nn.Conv1d(1, 1, 2)

    return Net()


def _pruning(pl):
    sanitize = pl.callbacks.ModelPruning.sanitize_parameters_to_prune
    net = _net(pl)
    names = {m: n for n, m in net.named_modules()}

    def named(pairs):
        return [(names[m], p) for m, p in pairs]

    outcome = {
        "all": named(sanitize(net)),
        "weights": named(sanitize(net, parameter_names=["weight"])),
        "given": named(sanitize(net, [(net.head, "bias")])),
    }
    for bad in ([(nn.Linear(1, 1), "weight")], [(net.head, "gamma")], [(net.head,)], "head"):
        with pytest.raises(Exception) as err:  # each framework's MisconfigurationException
            sanitize(net, bad)
        outcome[repr(bad)] = (type(err.value).__name__, str(err.value).split(":")[0])
    return outcome


@oracle.parity
def test_sanitize_parameters_to_prune_as_lightning():
    ours = _pruning(fulmen)
    assert ours == _pruning(oracle.lightning())
    assert ours["all"] == [("body.0", "weight"), ("body.2", "weight"), ("head", "weight"),
                           ("body.0", "bias"), ("head", "bias")]  # fmt: skip


def test_pruning_setup_goes_through_sanitize():
    class OnlyHead(ModelPruning):
        @staticmethod
        def sanitize_parameters_to_prune(pl_module, parameters_to_prune=(), parameter_names=()):
            return [(pl_module.head, "weight")]

    pruning = OnlyHead("l1_unstructured", amount=0.5, verbose=0)
    net = _net(fulmen)
    pruning.setup(fulmen.Trainer(logger=False), net, "fit")
    assert pruning._parameters_to_prune == [(net.head, "weight")]


# -- ModelSummary / RichModelSummary ---------------------------------------------------------------------------
_DATA = [(" ", ["0"]), ("Name", ["layer"]), ("Type", ["Linear"]), ("Params", ["66"]), ("Mode", ["train"]),
         ("FLOPs", ["0"])]  # fmt: skip


def test_summarize_prints_the_table(capsys):
    ModelSummary.summarize(_DATA, 66, 66, 0.000264, {"train": 1, "eval": 0}, total_flops=0)
    out = capsys.readouterr().out
    assert "Name  | Type   | Params" in out and "66        Total params" in out and "1         Modules in train" in out


def test_the_summaries_go_through_summarize(capsys):
    pytest.importorskip("rich", reason="the test extras install rich")
    from fulmen.callbacks import RichModelSummary

    RichModelSummary.summarize(_DATA, 66, 66, 0.000264, {"train": 1, "eval": 0}, 0, header_style="bold")
    assert "Total params: 66" in capsys.readouterr().out
    seen = []

    class Quiet(ModelSummary):
        @staticmethod
        def summarize(summary_data, total_parameters, trainable_parameters, model_size, total_training_modes,
                      total_flops, **summarize_kwargs):  # fmt: skip
            seen.append((dict(summary_data)["Name"], total_parameters, total_flops, summarize_kwargs))

    trainer = fulmen.Trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0, logger=False,
                             enable_progress_bar=False, enable_checkpointing=False,
                             callbacks=[Quiet(max_depth=1, extra=1)])  # fmt: skip
    trainer.fit(_boring(fulmen))
    assert seen == [(["layer"], 66, 0, {"extra": 1})] and "Total params" not in capsys.readouterr().out


# -- __init__ chaining, as Lightning's ------------------------------------------------------------------------
_INIT_ARGS = {
    "StochasticWeightAveraging": {"swa_lrs": 0.1}, "GradientAccumulationScheduler": {"scheduling": {0: 1}},
    "ModelPruning": {"pruning_fn": "l1_unstructured"}, "EarlyStopping": {"monitor": "x"},
    "ThroughputMonitor": {"batch_size_fn": len}, "OnExceptionCheckpoint": {"dirpath": "."},
}  # fmt: skip


def _reaches_mixin(cls):
    """Whether ``cls.__init__`` hands on to the next class of the MRO (a mixin inherited after it)."""

    class Mixin:
        def __init__(self, *args, **kwargs):
            self.mixin_initialised = True

    subclass = type("WithMixin", (cls, Mixin), {})
    return getattr(subclass(**_INIT_ARGS.get(cls.__name__, {})), "mixin_initialised", False)


_CALLBACK_CLASSES = [
    n for n in fulmen.callbacks.__all__
    if inspect.isclass(getattr(fulmen.callbacks, n)) and issubclass(getattr(fulmen.callbacks, n), fulmen.Callback)
]  # fmt: skip


@pytest.mark.parametrize("name", _CALLBACK_CLASSES)
def test_init_reaches_a_mixin_exactly_when_lightnings_does(name):
    """A library's ``class FTSCheckpoint(ModelCheckpoint, CallbackResolverMixin)`` sets its mixin's attributes
    through ModelCheckpoint's ``super().__init__()``; a class whose Lightning ``__init__`` does not chain must not
    chain here either (the subclass calls the mixin's ``__init__`` itself, and it must run once)."""
    lightning_callbacks = importlib.import_module("lightning.pytorch.callbacks")
    if not hasattr(lightning_callbacks, name):
        pytest.skip(f"{name} is fulmen's own")
    assert _reaches_mixin(getattr(fulmen.callbacks, name)) == _reaches_mixin(getattr(lightning_callbacks, name))


# -- the finders' arguments under Lightning's names, and their early exit ------------------------------------
def _early_exit_run(pl, finder_name):
    from torch.utils.data import DataLoader

    boring = importlib.import_module(f"{pl.__name__}.demos.boring_classes")

    class Model(boring.BoringModel):
        def __init__(self, batch_size=2, lr=0.1):
            super().__init__()
            self.batch_size, self.lr = batch_size, lr

        def train_dataloader(self):
            return DataLoader(boring.RandomDataset(32, 64), batch_size=self.batch_size)

    calls = []

    class Recorder(pl.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            calls.append("on_train_epoch_start")

        def teardown(self, trainer, pl_module, stage):
            calls.append(f"teardown:{stage}")

    finder = getattr(pl.callbacks, finder_name)()
    finder._early_exit = True
    trainer = pl.Trainer(callbacks=[finder, Recorder()], max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    returned = trainer.fit(Model())
    return returned, trainer.state.status.value, trainer.state.stage, calls, trainer.global_step


@pytest.mark.parametrize("finder", ["BatchSizeFinder", "LearningRateFinder"])
def test_a_finder_with_early_exit_ends_the_fit_after_its_search_as_lightnings(finder):
    """``_early_exit = True`` (what the Tuner sets): the search runs, then the fit ends finished, torn down, without
    training (a library driving the finders itself relies on it)."""
    assert _early_exit_run(fulmen, finder) == _early_exit_run(oracle.lightning(), finder)


def test_the_finders_keep_their_arguments_under_lightnings_attribute_names():
    for name in ("LearningRateFinder", "BatchSizeFinder"):
        ours, theirs = getattr(fulmen.callbacks, name)(), getattr(oracle.lightning().callbacks, name)()
        assert {k: v for k, v in vars(ours).items() if k in vars(theirs)} == vars(theirs)
