"""Module attributes where tests and libraries patch them.

Lightning's test suites (and libraries' ones, written the same way) replace module-level names to steer the code:
``mock.patch("lightning.pytorch.loggers.mlflow._MLFLOW_AVAILABLE", False)``, ``monkeypatch.setattr(
lightning.pytorch.accelerators.cuda, "num_cuda_devices", lambda: 2)``, ``mock.patch("lightning.pytorch.callbacks.
timer.time")``. Under the alias those modules are fulmen's, so each such name must exist in fulmen's module and be
the one its code looks up when it runs (not a copy taken at import, a default argument or another module's name).

``CASES`` is the table: the name (relative to the package root), what is patched in, and how the effect shows in a
small real call or run. One test patches each name on fulmen's module with ``mock.patch`` and observes the effect;
for the names Lightning has with the same effect, a parity test runs the same observation on Lightning.
"""

from __future__ import annotations

import importlib
import math
import signal
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock
from unittest.mock import MagicMock, Mock

import pytest
import torch
from torch.utils.data import DataLoader

from tests.parity import oracle


def _m(root: str, name: str) -> Any:
    """``root.name`` (``fulmen.loggers.mlflow`` or ``lightning.pytorch.loggers.mlflow``), imported."""
    return importlib.import_module(f"{root}.{name}")


def _trainer(root: str, tmp_path: Path, **kwargs: Any) -> Any:
    flags = dict(default_root_dir=tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=0, logger=False,
                 enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False)  # fmt: skip
    return _m(root, "trainer").Trainer(**{**flags, **kwargs})


def _boring(root: str) -> Any:
    return _m(root, "demos.boring_classes").BoringModel


@contextmanager
def _stub_packages(**modules: dict[str, Any]) -> Iterator[None]:
    """Stand-in packages in ``sys.modules`` (``mlflow``, ``mlflow.tracking`` ...: dotted names as ``__``): patching
    a lazily imported package's name then looks up the stand-in instead of importing the real, slow package."""
    stubs = {}
    for name, attributes in modules.items():
        module = types.ModuleType(name.replace("__", "."))
        module.__spec__ = importlib.machinery.ModuleSpec(module.__name__, None)  # found by find_spec
        module.__dict__.update(attributes)
        stubs[module.__name__] = module
    with mock.patch.dict(sys.modules, stubs):
        yield


@contextmanager
def _client_stub(root: str, module: str, flag: str, **modules: dict[str, Any]) -> Iterator[None]:
    """A logger's package as stand-ins, its availability flag true (as Lightning's suites' fixtures set it): the
    flag is not then first evaluated over the stand-ins."""
    with _stub_packages(**modules), mock.patch.object(_m(root, module), flag, True):
        yield


def _fake_mlflow(root: str) -> AbstractContextManager[None]:
    return _client_stub(
        root, "loggers.mlflow", "_MLFLOW_AVAILABLE",
        mlflow={}, mlflow__tracking={"MlflowClient": Mock(name="stand-in MlflowClient")}, mlflow__tracking__context={},
        mlflow__tracking__context__registry={"resolve_tags": lambda tags: tags},
        mlflow__entities={"Metric": Mock(), "Param": Mock()},
    )  # fmt: skip


@contextmanager
def _xla_present(root: str) -> Iterator[None]:
    """torch_xla as a stand-in, and every XLA availability flag true: the one flag a case patches false then
    decides alone."""
    xla_model = {"xla_device": lambda *_: torch.device("cpu")}
    flags = ("strategies.xla", "strategies.single_xla", "strategies.launchers.xla", "plugins.precision.xla",
             "profilers.xla")  # fmt: skip
    with ExitStack() as stack:
        stack.enter_context(_stub_packages(torch_xla={}, torch_xla__core={}, torch_xla__core__xla_model=xla_model))
        for name in flags:
            stack.enter_context(mock.patch.object(_m(root, name), "_XLA_AVAILABLE", True))
        yield


@dataclass(frozen=True)
class Case:
    target: str  # the module-level name (or an attribute of one), relative to the package root
    new: Callable[[], Any]  # what is patched in (made fresh for each run)
    observe: Callable[[str, Any, Path], None]  # (root, the patched object, tmp_path): runs code, asserts the effect
    lightning: bool = True  # Lightning has the name, with the same observable effect
    context: Callable[[str], AbstractContextManager[Any]] = field(default=lambda root: nullcontext())
    slow_in_lightning: bool = False  # the parity run takes seconds


def _raises_module_not_found(make: Callable[[str, Path], Any]) -> Callable[[str, Any, Path], None]:
    """An availability flag patched false: making the component raises ``ModuleNotFoundError``, as in Lightning."""

    def observe(root: str, patched: Any, tmp_path: Path) -> None:
        with pytest.raises(ModuleNotFoundError):
            make(root, tmp_path)

    return observe


def _flag_decides(module: str, make: Callable[[str, Path], Any]) -> Callable[[str, Any, Path], None]:
    """A flag patched false refuses; the same flag patched true (over the context's stand-ins) accepts."""

    def observe(root: str, patched: Any, tmp_path: Path) -> None:
        with pytest.raises(ModuleNotFoundError):
            make(root, tmp_path)
        with mock.patch.object(_m(root, module), "_XLA_AVAILABLE", True):
            make(root, tmp_path)

    return observe


# -- observations --------------------------------------------------------------------------------------------
def _mlflow_client(root: str, patched: Any, tmp_path: Path) -> None:
    logger = _m(root, "loggers.mlflow").MLFlowLogger(tracking_uri="sqlite:///unused.db")
    assert logger.experiment is patched.return_value
    patched.assert_called_once_with("sqlite:///unused.db")


def _mlflow_resolve_tags(root: str, patched: Any, tmp_path: Path) -> None:
    patched.return_value = lambda tags: {**tags, "resolved": "by the patch"}
    with mock.patch.object(_m(root, "loggers.mlflow"), "MlflowClient") as client:
        logger = _m(root, "loggers.mlflow").MLFlowLogger(tracking_uri="sqlite:///unused.db", tags={"a": "1"})
        assert logger.experiment is client.return_value
    patched.assert_called_once_with()
    tags = client.return_value.create_run.call_args.kwargs["tags"]
    assert tags == {"a": "1", "resolved": "by the patch"}


def _wandb_client(root: str, patched: Any, tmp_path: Path) -> None:
    logger = _m(root, "loggers.wandb").WandbLogger(project="p", save_dir=str(tmp_path))
    assert logger.experiment is patched.init.return_value
    assert patched.init.call_args.kwargs["project"] == "p"
    logger.log_table("t", columns=["a"], data=[[1]])
    patched.Table.assert_called_once_with(columns=["a"], data=[[1]], dataframe=None)


def _comet_client(root: str, patched: Any, tmp_path: Path) -> None:
    logger = _m(root, "loggers.comet").CometLogger(project="p", online=False)
    assert logger.experiment is patched.start.return_value
    assert patched.start.call_args.kwargs["project"] == "p"


def _neptune_client(root: str, patched: Any, tmp_path: Path) -> None:
    logger = _m(root, "loggers.neptune").NeptuneLogger(project="w/p", mode="offline")
    assert logger.run is patched.init_run.return_value
    assert patched.init_run.call_args.kwargs["project"] == "w/p"


def _litlogger_flag(root: str, patched: Any, tmp_path: Path) -> None:
    logger = _m(root, "loggers.litlogger").LitLogger(root_dir=str(tmp_path))
    with pytest.raises(NotImplementedError):  # the package counts as there: it is fulmen that refuses
        logger.log_metrics({"a": 1.0})


def _timer_clock(root: str, patched: Any, tmp_path: Path) -> None:
    patched.monotonic.return_value = 100.0
    timer = _m(root, "callbacks.timer").Timer(duration=timedelta(seconds=10))
    timer.on_train_start(trainer=Mock(), pl_module=Mock())
    patched.monotonic.return_value = 103.0
    assert round(timer.time_elapsed()) == 3 and round(timer.time_remaining()) == 7


def _checkpoint_clock(root: str, patched: Any, tmp_path: Path) -> None:
    patched.monotonic.return_value = 42.0
    callback = _m(root, "callbacks.model_checkpoint").ModelCheckpoint(train_time_interval=timedelta(seconds=5))
    callback.on_train_start(Mock(), Mock())
    assert callback._last_time_checked == 42.0


def _checkpoint_link_falls_back_to_a_copy(root: str, patched: Any, tmp_path: Path) -> None:
    checkpoint = _m(root, "callbacks").ModelCheckpoint(dirpath=tmp_path / "ckpts", save_last="link")
    _trainer(root, tmp_path, callbacks=[checkpoint], enable_checkpointing=True).fit(_boring(root)())
    assert patched.called  # the link was attempted with the patched function, which failed
    last = tmp_path / "ckpts" / "last.ckpt"
    assert last.is_file() and not last.is_symlink()  # a copy instead


def _early_stopping_log(root: str, patched: Any, tmp_path: Path) -> None:
    _m(root, "callbacks.early_stopping").EarlyStopping._log_info(Mock(global_rank=1, world_size=2), "bar", False)
    patched.info.assert_called_once_with("[rank: 1] bar")


def _tqdm_class(root: str, patched: Any, tmp_path: Path) -> None:
    bar = _m(root, "callbacks.progress.tqdm_progress").TQDMProgressBar().init_train_tqdm()
    assert bar is patched.return_value


def _rich_progress_update(root: str, patched: Any, tmp_path: Path) -> None:
    import io

    bar = _m(root, "callbacks").RichProgressBar(console_kwargs={"file": io.StringIO(), "force_terminal": False})
    _trainer(root, tmp_path, callbacks=[bar], enable_progress_bar=True).fit(_boring(root)())
    assert patched.called


def _device_stats_setup(root: str, patched: Any, tmp_path: Path) -> None:
    trainer = _trainer(root, tmp_path, accelerator="cpu", logger=_m(root, "loggers").CSVLogger(tmp_path))
    with pytest.raises(ModuleNotFoundError):
        _m(root, "callbacks").DeviceStatsMonitor().setup(trainer, Mock(), "fit")


def _cpu_stats(root: str, patched: Any, tmp_path: Path) -> None:
    patched.return_value = {"cpu_percent": 1.0}
    assert _m(root, "accelerators.cpu").CPUAccelerator().get_device_stats("cpu") == {"cpu_percent": 1.0}


def _cuda_count(root: str, patched: Any, tmp_path: Path) -> None:
    patched.return_value = 2
    accelerator = _m(root, "accelerators.cuda").CUDAAccelerator
    assert accelerator.is_available() and accelerator.auto_device_count() == 2


def _cuda_teardown(root: str, patched: Any, tmp_path: Path) -> None:
    _m(root, "accelerators.cuda").CUDAAccelerator().teardown()
    patched.assert_called_once_with()


def _matmul_check(root: str, patched: Any, tmp_path: Path) -> None:
    trainer = _trainer(root, tmp_path)
    with _m(root, "trainer.runner").torch_settings(trainer.config, torch.device("cpu")):
        pass
    patched.assert_called_once_with(torch.device("cpu"))


def _interactive_forks(root: str, patched: Any, tmp_path: Path) -> None:
    trainer = _trainer(root, tmp_path, accelerator="cpu", devices=2)
    assert trainer.strategy.launcher._start_method == "fork"


def _no_fork(root: str, patched: Any, tmp_path: Path) -> None:
    patched.return_value = []
    with pytest.raises(ValueError):
        _trainer(root, tmp_path, accelerator="cpu", devices=2, strategy="ddp_fork")


def _launcher_no_fork(root: str, patched: Any, tmp_path: Path) -> None:
    patched.return_value = []
    with pytest.raises(ValueError, match="fork"):
        _m(root, "strategies.launchers.multiprocessing")._MultiProcessingLauncher(Mock(), start_method="fork")


def _launcher_main_guard(root: str, patched: Any, tmp_path: Path) -> None:
    patched.return_value = Mock(_inheriting=True)  # this process: a spawned one, importing the main module
    launcher = _m(root, "strategies.launchers.multiprocessing")._MultiProcessingLauncher(Mock(), start_method="spawn")
    with pytest.raises(RuntimeError, match="guards the main"):
        launcher.launch(function=Mock())


def _worker_start_method(root: str, patched: Any, tmp_path: Path) -> None:
    patched.return_value = "spawn"
    trainer = _trainer(root, tmp_path)
    with pytest.warns(UserWarning, match="persistent_workers=True"):
        trainer.run_context.data._check_workers(DataLoader(range(4), num_workers=1), "train")


_FSUM = math.fsum


def _simple_profiler_fsum(root: str, patched: Any, tmp_path: Path) -> None:
    patched.side_effect = _FSUM  # math.fsum itself is the patch now
    profiler = _m(root, "profilers").SimpleProfiler()
    profiler.recorded_durations["action"] = [1.0, 2.0, 3.0]
    assert "action" in profiler.summary()
    assert [list(call.args[0]) for call in patched.call_args_list][:1] == [[1.0, 2.0, 3.0]]


def _datamodule_loader(root: str, patched: Any, tmp_path: Path) -> None:
    dataset = torch.utils.data.TensorDataset(torch.zeros(8, 2))
    datamodule = _m(root, "core.datamodule").LightningDataModule.from_datasets(train_dataset=dataset, batch_size=4)
    assert datamodule.train_dataloader() is patched.return_value
    assert patched.call_args.args[0] is dataset


def _cli_instantiator(root: str, patched: Any, tmp_path: Path) -> None:
    patched.side_effect = lambda cls, config: cls()
    checkpoint = {"state_dict": {}, "pytorch-lightning_version": "2.6.6",
                  "hyper_parameters": {"_instantiator": f"{root}.cli.instantiate_module"}}  # fmt: skip
    torch.save(checkpoint, tmp_path / "cli.ckpt")
    model = _boring(root).load_from_checkpoint(tmp_path / "cli.ckpt", strict=False)
    assert isinstance(model, _boring(root))
    patched.assert_called_once()


def _oom_decision(root: str, patched: Any, tmp_path: Path) -> None:
    patched.side_effect = lambda error: "too big" in str(error)  # this error counts as running out of memory

    class Model(_boring(root)):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.batch_size = 2

        def train_dataloader(self) -> DataLoader:
            return DataLoader(_m(root, "demos.boring_classes").RandomDataset(32, 64), batch_size=self.batch_size)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            if len(batch) > 4:
                raise RuntimeError("too big")
            return super().training_step(batch, batch_idx)

    model = Model()
    tuner = _m(root, "tuner").Tuner(_trainer(root, tmp_path, max_steps=1))
    found = tuner.scale_batch_size(model, mode="power", init_val=2, max_trials=4, steps_per_trial=1)
    assert found == 4 and patched.called


def _result_log(root: str, patched: Any, tmp_path: Path) -> None:
    patched.return_value = None

    class Model(_boring(root)):  # type: ignore[misc]
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            self.log("seen", 1.0)
            return super().training_step(batch, batch_idx)

    trainer = _trainer(root, tmp_path)
    trainer.fit(Model())
    assert patched.call_args.args[:2] == ("training_step", "seen")
    assert "seen" not in trainer.callback_metrics  # the patched method stored nothing


def _call_and_handle_interrupt(root: str, patched: Any, tmp_path: Path) -> None:
    trainer = _trainer(root, tmp_path)
    trainer.fit(_boring(root)())
    patched.assert_called_once()
    assert trainer.global_step == 0  # the run was the patched function's, which did nothing


def _throughput_flops(root: str, patched: Any, tmp_path: Path) -> None:
    patched.return_value = 100
    monitor = _m(root, "callbacks").ThroughputMonitor(batch_size_fn=lambda batch: len(batch))
    _trainer(root, tmp_path, callbacks=[monitor]).fit(_boring(root)())
    device, dtype = patched.call_args.args
    assert device == torch.device("cpu") and dtype is torch.float32


def _batch_size_warning(root: str, patched: Any, tmp_path: Path) -> None:
    _m(root, "utilities.data").extract_batch_size({"a": torch.zeros(3, 1), "b": torch.zeros(4, 1)})
    assert "ambiguous collection" in patched.warn.call_args.args[0]


def _summary_warning(root: str, patched: Any, tmp_path: Path) -> None:
    model = _boring(root)()
    model.layer = torch.nn.LazyLinear(2)
    _m(root, "utilities.model_summary").ModelSummary(model).total_parameters  # noqa: B018  (the read warns)
    assert "UninitializedParameter" in patched.warn.call_args.args[0]


def _summary_dtensor(root: str, patched: Any, tmp_path: Path) -> None:
    patched.return_value = False
    model = _boring(root)()
    model.layer = torch.nn.LazyLinear(2)
    _m(root, "utilities.model_summary").ModelSummary(model).total_parameters  # noqa: B018
    assert isinstance(patched.call_args.args[0], torch.nn.parameter.UninitializedParameter)


def _migration_index(root: str, patched: Any, tmp_path: Path) -> None:
    seen = []
    patched.return_value = {"0.0.2": [lambda checkpoint: seen.append("upgraded") or checkpoint]}
    _m(root, "utilities.migration.utils").migrate_checkpoint({"pytorch-lightning_version": "0.0.1"})
    assert seen == ["upgraded"]


def _upgrade_migrates(root: str, patched: Any, tmp_path: Path) -> None:
    path = tmp_path / "old.ckpt"
    torch.save({"state_dict": {}, "pytorch-lightning_version": "1.0.0"}, path)
    with mock.patch("sys.argv", ["upgrade_checkpoint.py", str(path)]):
        _m(root, "utilities.upgrade_checkpoint").main()
    patched.assert_called_once()


def _signal_handler_check(root: str, patched: Any, tmp_path: Path) -> None:
    patched.return_value = signal.SIG_DFL
    connector = _m(root, "trainer.connectors.signal_connector")._SignalConnector
    assert not connector._has_already_handler(signal.SIGUSR1)
    patched.assert_called_once_with(signal.SIGUSR1)


def _fsdp_removes(root: str, patched: Any, tmp_path: Path) -> None:
    from fulmen.checkpoint import sharded as distributed_checkpoint

    patched.side_effect = distributed_checkpoint.remove
    path = tmp_path / "model.ckpt"
    path.mkdir()  # a sharded checkpoint of the same name: removed before the file is written
    strategy = _m(root, "strategies.fsdp").FSDPStrategy(state_dict_type="full")
    strategy.save_checkpoint({"state_dict": {}}, path)
    patched.assert_called_once_with(str(path))
    assert path.is_file()


def _fsdp_sharded_check(root: str, patched: Any, tmp_path: Path) -> None:
    patched.return_value = False  # a file checkpoint: read whole
    path = tmp_path / "model.ckpt"
    torch.save({"state_dict": {}, "epoch": 3}, path)
    loaded = _m(root, "strategies.fsdp").FSDPStrategy().load_checkpoint(path)
    patched.assert_called_once_with(str(path))
    assert loaded["epoch"] == 3


def _stage_step_replaced(entry: str, *expected: Callable[[Any, Any], Any]) -> Callable[[str, Any, Path], None]:
    """``trainer.<entry>(model, loader)`` runs the patched step in its place, with Lightning's arguments (each of
    ``expected`` maps (model, loader) to the argument in that position), and returns what it returns."""

    def observe(root: str, patched: Any, tmp_path: Path) -> None:
        patched.return_value = ["from the patched step"]
        trainer, model = _trainer(root, tmp_path), _boring(root)()
        loader = model.val_dataloader()
        returned = getattr(trainer, entry)(model, loader)
        assert [make(model, loader) for make in expected] == list(patched.call_args.args)
        assert trainer.global_step == 0
        if entry != "fit":
            assert returned == ["from the patched step"]

    return observe


_MODEL, _LOADER, _NONE, _TRUE = (lambda m, d: m), (lambda m, d: d), (lambda m, d: None), (lambda m, d: True)


def _run_stage_replaced(root: str, patched: Any, tmp_path: Path) -> None:
    """The stage is set up (the configuration checked, the strategy and optimizers set up) and torn down; only its
    loop is the patched one."""
    calls = []
    model = _boring(root)()
    model.configure_optimizers = lambda: calls.append("configure_optimizers") or torch.optim.SGD(model.parameters())
    trainer = _trainer(root, tmp_path)
    trainer.fit(model)
    patched.assert_called_once_with()
    assert calls == ["configure_optimizers"] and trainer.global_step == 0


def _fit_configuration_check(root: str, patched: Any, tmp_path: Path) -> None:
    trainer, model = _trainer(root, tmp_path), _boring(root)()
    trainer.fit(model)
    patched.assert_called_once_with(trainer, model)


def _evaluation_epoch_end(root: str, patched: Any, tmp_path: Path) -> None:
    """Once per evaluation epoch: the sanity check's, each validation's, and a test's."""
    trainer, model = _trainer(root, tmp_path, max_epochs=2, limit_val_batches=2, num_sanity_val_steps=1), _boring(root)()
    trainer.fit(model)
    assert patched.call_count == 3
    trainer.test(model, verbose=False)
    assert patched.call_count == 4


def _eval_end_metrics_before_the_end_hook(root: str, patched: Any, tmp_path: Path) -> None:
    order = []
    patched.side_effect = lambda metrics: order.append("log_eval_end_metrics")

    class Model(_boring(root)):  # type: ignore[misc]
        def on_validation_end(self) -> None:
            order.append("on_validation_end")

    _trainer(root, tmp_path, limit_val_batches=1, num_sanity_val_steps=0).fit(Model())
    assert order == ["log_eval_end_metrics", "on_validation_end"]


def _slurm_requeue_command(root: str, patched: Any, tmp_path: Path) -> None:
    patched.return_value = 0
    environments = _m(root, "plugins.environments")
    with mock.patch.dict("os.environ", {"SLURM_JOB_ID": "12346", "SLURM_ARRAY_JOB_ID": "12345",
                                        "SLURM_ARRAY_TASK_ID": "2"}):  # fmt: skip
        trainer = _trainer(root, tmp_path, plugins=[environments.SLURMEnvironment()])
        connector = _m(root, "trainer.connectors.signal_connector")._SignalConnector(trainer)
        with mock.patch.object(type(trainer), "save_checkpoint") as save:
            connector._slurm_sigusr_handler_fn(None, None)
    save.assert_called_once()  # the checkpoint first, then the requeue
    patched.assert_called_once_with(["scontrol", "requeue", "12345_2"])


def _model_parallel_needs_torch_2_4(root: str, patched: Any, tmp_path: Path) -> None:
    with pytest.raises(ImportError, match="ModelParallelStrategy requires PyTorch 2.4 or higher"):
        _m(root, "strategies.model_parallel").ModelParallelStrategy()


def _model_parallel_mesh(root: str, patched: Any, tmp_path: Path) -> None:
    strategy = _m(root, "strategies.model_parallel").ModelParallelStrategy()
    strategy._lightning_module = Mock()
    strategy.parallel_devices = [torch.device("cpu")]
    strategy.cluster_environment = _m(root, "plugins.environments").LightningEnvironment()
    strategy.accelerator = Mock()
    launched = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0",
                "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "TORCHELASTIC_RUN_ID": "none"}
    with mock.patch.dict("os.environ", launched), mock.patch("torch.distributed.init_process_group"):
        strategy.setup_environment()
    patched.assert_called_once_with(1, 1, 1, torch.device("cpu"))
    assert strategy.device_mesh is patched.return_value


def _fsdp_mesh_needs_torch_2_2(root: str, patched: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="`device_mesh` argument is only supported in torch >= 2.2"):
        _m(root, "strategies.fsdp").FSDPStrategy(device_mesh=(1, 1))


def _fsdp_full_file_read_lazily(root: str, patched: Any, tmp_path: Path) -> None:
    """A full checkpoint file is read with the lazy reader (mapped, not read, on every rank)."""
    model = _boring(root)()
    patched.return_value = {"state_dict": model.state_dict(), "epoch": 3}
    path = tmp_path / "full.ckpt"
    path.touch()
    strategy = _m(root, "strategies.fsdp").FSDPStrategy()
    strategy._lightning_module = model
    strategy.model = model
    with mock.patch(f"{root}.strategies.fsdp._load_raw_module_state"):
        strategy.load_checkpoint(path)
    patched.assert_called_once()
    assert patched.call_args.args[0] in (path, str(path))


def _fsdp_lazy_load_maps_the_file(root: str, patched: Any, tmp_path: Path) -> None:
    """Unpatched, the lazy reader maps the file: the tensors it returns share the file's pages."""
    path = tmp_path / "full.ckpt"
    torch.save({"state_dict": {"w": torch.arange(4.0)}, "epoch": 3}, path)
    strategy = _m(root, "strategies.fsdp").FSDPStrategy()
    with mock.patch("torch.load", wraps=torch.load) as load:
        checkpoint = strategy.load_checkpoint(path)
    assert load.call_args.kwargs.get("mmap") is True and checkpoint["epoch"] == 3
    assert torch.equal(checkpoint["state_dict"]["w"], torch.arange(4.0))
    patched.assert_called_once_with(str(path))


def _fsdp_whole_state_into_shards(root: str, patched: Any, tmp_path: Path) -> None:
    """A full checkpoint's tensors go into a sharded module through the raw-state loader."""
    model = _boring(root)()
    strategy = _m(root, "strategies.fsdp").FSDPStrategy()
    strategy._lightning_module = model
    strategy._sharded_root = Mock()  # as after set-up (a 1-process FSDP run needs a process group)
    state = {"layer.weight": torch.zeros(2, 32), "layer.bias": torch.zeros(2)}
    strategy.load_model_state_dict({"state_dict": state}, strict=False)
    patched.assert_called_once_with(state, model, 1, False)


def _fsdp_sharded_directory_read(root: str, patched: Any, tmp_path: Path) -> None:
    """A sharded checkpoint directory fills the module's state dict through the distributed-checkpoint loader."""
    model = _boring(root)()
    strategy = _m(root, "strategies.fsdp").FSDPStrategy(state_dict_type="sharded")
    strategy._lightning_module = model
    path = tmp_path / "sharded.ckpt"
    strategy.save_checkpoint({"state_dict": model.state_dict(), "epoch": 3}, path)
    strategy._sharded_root = Mock()
    checkpoint = strategy.load_checkpoint(path)
    (state, where), _ = patched.call_args
    assert where == str(path) and checkpoint["epoch"] == 3
    assert checkpoint["state_dict"] is next(iter(state.values()))


def _make(component: str, *args: Any, **kwargs: Any) -> Callable[[str, Path], Any]:
    module, _, name = component.rpartition(".")
    return lambda root, tmp_path: getattr(_m(root, module), name)(*args, **kwargs)


CASES = [
    # loggers: availability flags, read when a logger is made; clients, read from the module when used
    Case("loggers.mlflow._MLFLOW_AVAILABLE", lambda: False, _raises_module_not_found(_make("loggers.mlflow.MLFlowLogger"))),
    Case("loggers.mlflow._MLFLOW_SYNCHRONOUS_AVAILABLE", lambda: False,
         _raises_module_not_found(_make("loggers.mlflow.MLFlowLogger", synchronous=True)),
         context=lambda root: mock.patch.object(_m(root, "loggers.mlflow"), "_MLFLOW_AVAILABLE", True)),
    Case("loggers.mlflow.MlflowClient", Mock, _mlflow_client, lightning=False, context=_fake_mlflow),
    Case("loggers.mlflow._get_resolve_tags", Mock, _mlflow_resolve_tags, lightning=False, context=_fake_mlflow),
    Case("loggers.wandb._WANDB_AVAILABLE", lambda: False, _raises_module_not_found(_make("loggers.wandb.WandbLogger"))),
    Case("loggers.wandb.wandb", lambda: Mock(run=None), _wandb_client, lightning=False,
         context=lambda root: _client_stub(root, "loggers.wandb", "_WANDB_AVAILABLE", wandb={})),
    Case("loggers.comet._COMET_AVAILABLE", lambda: False, _raises_module_not_found(_make("loggers.comet.CometLogger"))),
    Case("loggers.comet.comet_ml", Mock, _comet_client, lightning=False,
         context=lambda root: _client_stub(root, "loggers.comet", "_COMET_AVAILABLE", comet_ml={})),
    Case("loggers.neptune._NEPTUNE_AVAILABLE", lambda: False,
         _raises_module_not_found(_make("loggers.neptune.NeptuneLogger")), lightning=False),
    Case("loggers.neptune.neptune", Mock, _neptune_client, lightning=False,
         context=lambda root: _client_stub(root, "loggers.neptune", "_NEPTUNE_AVAILABLE", neptune={})),
    Case("loggers.litlogger._LITLOGGER_AVAILABLE", lambda: True, _litlogger_flag, lightning=False),
    # callbacks
    Case("callbacks.timer.time", Mock, _timer_clock),
    Case("callbacks.model_checkpoint.time", Mock, _checkpoint_clock),
    Case("callbacks.model_checkpoint.os.symlink", lambda: Mock(side_effect=OSError),
         _checkpoint_link_falls_back_to_a_copy),
    Case("callbacks.early_stopping.log", Mock, _early_stopping_log),
    Case("callbacks.progress.tqdm_progress.Tqdm", MagicMock, _tqdm_class),
    Case("callbacks.progress.rich_progress._RICH_AVAILABLE", lambda: False,
         _raises_module_not_found(_make("callbacks.progress.rich_progress.RichProgressBar"))),
    Case("callbacks.progress.rich_progress.Progress.update", Mock, _rich_progress_update),
    Case("callbacks.rich_model_summary._RICH_AVAILABLE", lambda: False,
         _raises_module_not_found(_make("callbacks.rich_model_summary.RichModelSummary"))),
    Case("callbacks.device_stats_monitor._PSUTIL_AVAILABLE", lambda: False, _device_stats_setup),
    Case("callbacks.throughput_monitor.get_available_flops", Mock, _throughput_flops),
    # accelerators
    Case("accelerators.cpu._PSUTIL_AVAILABLE", lambda: False,
         _raises_module_not_found(_make("accelerators.cpu.get_cpu_stats"))),
    Case("accelerators.cpu.get_cpu_stats", Mock, _cpu_stats),
    Case("accelerators.cuda.num_cuda_devices", Mock, _cuda_count),
    Case("accelerators.cuda._clear_cuda_memory", Mock, _cuda_teardown),
    Case("accelerators.cuda._check_cuda_matmul_precision", Mock, _matmul_check, lightning=False),  # Lightning:
    # called by CUDAAccelerator.setup_device, which a CPU run never reaches
    # trainer and connectors
    Case("trainer.call._call_and_handle_interrupt", Mock, _call_and_handle_interrupt),
    Case("trainer.connectors.accelerator_connector._IS_INTERACTIVE", lambda: True, _interactive_forks),
    Case("trainer.connectors.accelerator_connector.torch.multiprocessing.get_all_start_methods", Mock, _no_fork),
    Case("trainer.connectors.data_connector.mp.get_start_method", Mock, _worker_start_method, lightning=False),
    Case("trainer.connectors.logger_connector.result._ResultCollection.log", Mock, _result_log),
    Case("trainer.connectors.signal_connector.signal.getsignal", Mock, _signal_handler_check),
    Case("trainer.connectors.signal_connector.call", Mock, _slurm_requeue_command),
    Case("trainer.connectors.logger_connector.logger_connector._LoggerConnector.log_eval_end_metrics", Mock,
         _eval_end_metrics_before_the_end_hook),
    Case("trainer.Trainer._fit_impl", Mock, _stage_step_replaced("fit", _MODEL, _LOADER, _NONE, _NONE, _NONE, _NONE)),
    Case("trainer.Trainer._validate_impl", Mock,
         _stage_step_replaced("validate", _MODEL, _LOADER, _NONE, _TRUE, _NONE, _NONE)),
    Case("trainer.Trainer._test_impl", Mock, _stage_step_replaced("test", _MODEL, _LOADER, _NONE, _TRUE, _NONE, _NONE)),
    Case("trainer.Trainer._predict_impl", Mock,
         _stage_step_replaced("predict", _MODEL, _LOADER, _NONE, _NONE, _NONE, _NONE)),
    Case("trainer.Trainer._run_stage", Mock, _run_stage_replaced),
    Case("trainer.configuration_validator.__verify_train_val_loop_configuration", Mock, _fit_configuration_check),
    # loops
    Case("loops.evaluation_loop._EvaluationLoop._on_evaluation_epoch_end", Mock, _evaluation_epoch_end),
    # strategies and launchers
    Case("strategies.launchers.multiprocessing.mp.get_all_start_methods", Mock, _launcher_no_fork),
    Case("strategies.launchers.multiprocessing.mp.current_process", Mock, _launcher_main_guard),
    Case("strategies.xla._XLA_AVAILABLE", lambda: False, _flag_decides("strategies.xla", _make("strategies.xla.XLAStrategy")),
         lightning=False, context=_xla_present),
    Case("strategies.single_xla._XLA_AVAILABLE", lambda: False,
         _flag_decides("strategies.single_xla", _make("strategies.single_xla.SingleDeviceXLAStrategy", 0)),
         lightning=False, context=_xla_present),
    Case("strategies.launchers.xla._XLA_AVAILABLE", lambda: False,
         _flag_decides("strategies.launchers.xla", _make("strategies.launchers.xla._XLALauncher", Mock())),
         lightning=False, context=_xla_present),
    Case("plugins.precision.xla._XLA_AVAILABLE", lambda: False,
         _flag_decides("plugins.precision.xla", _make("plugins.precision.xla.XLAPrecision")),
         lightning=False, context=_xla_present),
    Case("profilers.xla._XLA_AVAILABLE", lambda: False, _raises_module_not_found(_make("profilers.xla.XLAProfiler")),
         lightning=False),
    Case("strategies.fsdp._remove_checkpoint", Mock, _fsdp_removes, lightning=False),
    Case("strategies.fsdp._is_sharded_checkpoint", Mock, _fsdp_sharded_check, lightning=False),
    Case("strategies.fsdp._TORCH_GREATER_EQUAL_2_2", lambda: False, _fsdp_mesh_needs_torch_2_2),
    Case("strategies.fsdp._lazy_load", Mock, _fsdp_full_file_read_lazily),
    Case("strategies.fsdp._is_full_checkpoint", lambda: Mock(return_value=True), _fsdp_lazy_load_maps_the_file,
         lightning=False),
    Case("strategies.fsdp._load_raw_module_state", Mock, _fsdp_whole_state_into_shards, lightning=False),
    Case("strategies.fsdp._distributed_checkpoint_load", Mock, _fsdp_sharded_directory_read, lightning=False),
    Case("strategies.model_parallel._TORCH_GREATER_EQUAL_2_4", lambda: False, _model_parallel_needs_torch_2_4),
    Case("strategies.model_parallel._setup_device_mesh", Mock, _model_parallel_mesh),
    # core, profilers, tuner, utilities
    Case("core.datamodule.DataLoader", Mock, _datamodule_loader),
    Case("cli.instantiate_module", Mock, _cli_instantiator),
    Case("profilers.simple.math.fsum", Mock, _simple_profiler_fsum),
    Case("tuner.batch_size_scaling.is_oom_error", Mock, _oom_decision, slow_in_lightning=True),
    Case("utilities.data.warning_cache", Mock, _batch_size_warning),
    Case("utilities.model_summary.model_summary.warning_cache", Mock, _summary_warning),
    Case("utilities.model_summary.model_summary._is_dtensor", Mock, _summary_dtensor),
    Case("utilities.migration.utils._migration_index", Mock, _migration_index),
    Case("utilities.upgrade_checkpoint.migrate_checkpoint", Mock, _upgrade_migrates),
]  # fmt: skip


def _run(root: str, case: Case, tmp_path: Path) -> None:
    with case.context(root), mock.patch(f"{root}.{case.target}", case.new()) as patched:
        case.observe(root, patched, tmp_path)


@pytest.mark.parametrize("case", CASES, ids=[case.target for case in CASES])
def test_patching_the_name_reaches_the_code(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # loggers that default to the working directory write there
    _run("fulmen", case, tmp_path)


@oracle.parity
@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=c.target, marks=[pytest.mark.slow] if c.slow_in_lightning else []) for c in CASES if c.lightning],
)
def test_lightning_reads_the_same_name(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    oracle.lightning()
    monkeypatch.chdir(tmp_path)
    _run("lightning.pytorch", case, tmp_path)


def test_optional_packages_stay_unimported_until_used() -> None:
    """The clients are names of their logger modules without being imported with them: reading the name imports
    the package (not kept in the module, so a stand-in put in ``sys.modules`` later is honoured too)."""
    import fulmen.loggers.wandb as module

    assert "wandb" not in module.__dict__
    with _stub_packages(wandb={"marker": 1}):
        assert module.wandb.marker == 1
    assert "wandb" not in module.__dict__
