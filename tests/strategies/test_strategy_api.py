"""Lightning's strategy constructors (argument order), the launchers, a strategy's own cluster environment, and
the strategies whose hardware or package this machine lacks: XLA (torch_xla) and DeepSpeed."""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import json
import signal
import subprocess
import sys
import types
from datetime import timedelta

import pytest
import torch
from torch import nn

import fulmen
from fulmen.accelerators import CPUAccelerator
from fulmen.plugins.io import TorchCheckpointIO
from fulmen.precision import Precision
from fulmen.strategies import (
    DDPStrategy,
    DeepSpeedStrategy,
    ParallelStrategy,
    SingleDeviceStrategy,
    SingleDeviceXLAStrategy,
    Strategy,
    XLAStrategy,
)
from fulmen.strategies.deepspeed import remove_module_hooks
from fulmen.strategies.launchers import _MultiProcessingLauncher, _SubprocessScriptLauncher, _XLALauncher
from fulmen.utilities.exceptions import MisconfigurationException
from tests.parity import oracle
from tests.strategies.ddp_model import Model, loader

_LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_PORT",
                       "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_NAME")  # fmt: skip


@pytest.fixture(autouse=True)
def _no_launcher_env(monkeypatch):
    for key in _LAUNCHER_VARIABLES:
        monkeypatch.delenv(key, raising=False)


def _trainer(**kwargs) -> fulmen.Trainer:
    options = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
               "enable_model_summary": False, **kwargs}  # fmt: skip
    return fulmen.Trainer(**options)


@oracle.parity
def test_positional_arguments_land_where_lightnings_do():
    pl = oracle.lightning()
    from lightning.fabric.plugins.environments import LightningEnvironment as TheirEnvironment
    from lightning.fabric.plugins.io import TorchCheckpointIO as TheirIO

    from fulmen.plugins.environments import LightningEnvironment

    devices = [torch.device("cpu")] * 2

    def built(framework, io, precision, environment):
        accelerator = framework.accelerators.CPUAccelerator()
        return accelerator, {
            "SingleDeviceStrategy": framework.strategies.SingleDeviceStrategy("cpu", accelerator, io, precision),
            "DDPStrategy": framework.strategies.DDPStrategy(accelerator, devices, environment, io, precision),
        }

    ours = built(fulmen, TorchCheckpointIO(), Precision(), LightningEnvironment())
    # Lightning's Strategy and ParallelStrategy are abstract; fulmen's take the same positions
    accelerator, io, precision, environment = ours[0], TorchCheckpointIO(), Precision(), LightningEnvironment()
    ours[1]["Strategy"] = Strategy(accelerator, io, precision)
    ours[1]["ParallelStrategy"] = ParallelStrategy(accelerator, devices, environment, io, precision)
    theirs = built(pl, TheirIO(), pl.plugins.precision.Precision(), TheirEnvironment())
    for name, strategy in ours[1].items():
        assert strategy.accelerator is ours[0]
        assert type(strategy.checkpoint_io).__name__ == "TorchCheckpointIO"
        assert type(strategy.precision_plugin).__name__ == "Precision"
        if name in theirs[1]:
            lightning = theirs[1][name]
            assert lightning.accelerator is theirs[0]
            assert type(lightning.checkpoint_io).__name__ == "TorchCheckpointIO"
            assert type(lightning.precision_plugin).__name__ == "Precision"
    assert ours[1]["Strategy"].checkpoint_io is io and ours[1]["Strategy"].precision_plugin is precision
    assert ours[1]["ParallelStrategy"].cluster_plugin is environment
    assert ours[1]["SingleDeviceStrategy"].root_device == theirs[1]["SingleDeviceStrategy"].root_device
    assert ours[1]["DDPStrategy"].parallel_devices == theirs[1]["DDPStrategy"].parallel_devices == devices
    assert ours[1]["DDPStrategy"].num_processes == theirs[1]["DDPStrategy"].num_processes == 2
    assert ours[1]["ParallelStrategy"].num_processes == 2


def test_ddp_arguments_in_lightnings_order():
    hook, state, wrapper = (lambda s, b: None), object(), (lambda h: h)
    strategy = DDPStrategy(None, None, None, None, None, state, hook, wrapper, 4, "gloo", timedelta(seconds=5),
                           "spawn", find_unused_parameters=True, bucket_cap_mb=1)  # fmt: skip
    assert (strategy._ddp_comm_state, strategy._ddp_comm_hook, strategy._ddp_comm_wrapper) == (state, hook, wrapper)
    assert strategy._model_averaging_period == 4 and strategy.process_group_backend == "gloo"
    assert strategy.timeout == timedelta(seconds=5) and strategy.start_method == "spawn"
    assert strategy._ddp_kwargs == {"find_unused_parameters": True, "bucket_cap_mb": 1}  # torch DDP's own


@oracle.parity
@pytest.mark.parametrize(("start_method", "launcher", "interactive"), [
    ("popen", "_SubprocessScriptLauncher", False), ("spawn", "_MultiProcessingLauncher", False),
    ("fork", "_MultiProcessingLauncher", True),
])  # fmt: skip
def test_start_method_picks_the_launcher_as_lightning(start_method, launcher, interactive):
    pl = oracle.lightning()
    ours = _trainer(accelerator="cpu", devices=2, strategy=DDPStrategy(start_method=start_method)).strategy
    theirs = pl.Trainer(accelerator="cpu", devices=2, strategy=pl.strategies.DDPStrategy(start_method=start_method),
                        logger=False).strategy  # fmt: skip
    assert type(ours.launcher).__name__ == type(theirs.launcher).__name__ == launcher
    assert ours.launcher.is_interactive_compatible is theirs.launcher.is_interactive_compatible is interactive
    assert _trainer(accelerator="cpu", devices=1).strategy.launcher is None
    assert isinstance(_trainer(accelerator="cpu", devices=2, strategy="ddp_spawn").strategy.launcher,
                      _MultiProcessingLauncher)  # fmt: skip


@oracle.parity
@pytest.mark.parametrize("start_method", ["popen", "spawn"])
def test_a_strategys_own_parallel_devices_win_as_in_lightning(start_method):
    pl = oracle.lightning()
    three = [torch.device("cpu")] * 3
    ours = _trainer(accelerator="cpu", devices=2, strategy=DDPStrategy(parallel_devices=three, start_method=start_method))
    theirs = pl.Trainer(accelerator="cpu", devices=2, logger=False,
                        strategy=pl.strategies.DDPStrategy(parallel_devices=three, start_method=start_method))  # fmt: skip
    assert ours.world_size == theirs.world_size == 3
    assert ours.strategy.parallel_devices == theirs.strategy.parallel_devices == three


def test_a_spawning_ddp_runs_only_inside_its_processes():
    strategy = _trainer(accelerator="cpu", devices=2, strategy=DDPStrategy(start_method="spawn")).strategy
    assert strategy.strategy_name == "ddp_spawn"
    with pytest.raises(MisconfigurationException, match="runs inside the processes it starts"):
        strategy.setup_environment()
    with pytest.raises(ValueError, match="not a start method this platform has"):
        _MultiProcessingLauncher(strategy, start_method="thread")


def test_the_script_launcher(monkeypatch):
    launcher = _SubprocessScriptLauncher(None, num_processes=2, num_nodes=1)
    assert not launcher.is_interactive_compatible and not launcher.processes_exist()
    with pytest.raises(MisconfigurationException, match="not started from a script"):
        launcher.launch(lambda: "ran")  # under a test runner there is no script to run again
    assert _SubprocessScriptLauncher(None, 1, 2).num_nodes == 2
    with pytest.raises(MisconfigurationException, match="one machine only"):
        _SubprocessScriptLauncher(None, 2, 2).start_children()
    for key, value in {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2"}.items():
        monkeypatch.setenv(key, value)
    assert launcher.processes_exist()  # torchrun started them: the stage runs here, nothing is started
    assert launcher.launch(lambda x, y=0: x + y, 1, y=2) == 3 and launcher.procs == []

    class External:
        creates_processes_externally = True

    assert _SubprocessScriptLauncher(External(), 2, 1).launch(lambda: "ran") == "ran"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    launcher.procs = [sleeper]
    launcher.kill(signal.SIGTERM)
    assert sleeper.wait(timeout=10) == -signal.SIGTERM


def test_a_strategys_own_cluster_environment_is_used(monkeypatch):
    from fulmen.plugins.environments import SLURMEnvironment

    slurm = {"SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NTASKS": "2", "SLURM_NODEID": "0",
             "SLURM_NTASKS_PER_NODE": "2", "SLURM_JOB_NODELIST": "node1", "SLURM_JOB_ID": "7",
             "SLURM_JOB_NAME": "train"}  # fmt: skip
    for key, value in slurm.items():
        monkeypatch.setenv(key, value)
    environment = SLURMEnvironment()
    trainer = _trainer(accelerator="cpu", devices=2, strategy=DDPStrategy(cluster_environment=environment))
    assert trainer.strategy.cluster_plugin is environment
    assert (trainer.world_size, trainer.global_rank, trainer.local_rank) == (2, 1, 1)


# -- XLA: needs torch_xla ---------------------------------------------------------------------------------
@oracle.parity
def test_xla_strategies_need_torch_xla_as_in_lightning():
    oracle.lightning()
    from lightning.pytorch.strategies import SingleDeviceXLAStrategy as TheirSingle
    from lightning.pytorch.strategies import XLAStrategy as TheirXLA
    from lightning.pytorch.strategies.launchers import _XLALauncher as TheirLauncher

    for theirs, ours in ((TheirXLA, XLAStrategy), (lambda: TheirSingle(0), lambda: SingleDeviceXLAStrategy(0)),
                         (lambda: TheirLauncher(None), lambda: _XLALauncher(None))):  # fmt: skip
        with pytest.raises(ModuleNotFoundError):
            theirs()
        with pytest.raises(ModuleNotFoundError, match="needs the `torch_xla` package"):
            ours()
    for name in ("xla", "single_xla"):
        with pytest.raises(ModuleNotFoundError, match="torch_xla"):
            _trainer(accelerator="cpu", strategy=name)


@pytest.fixture
def fake_torch_xla(monkeypatch):
    """A stand-in torch_xla whose XLA device is the CPU: enough to construct and to count mark_step calls."""
    marks: list[int] = []
    xm = types.ModuleType("torch_xla.core.xla_model")
    xm.xla_device = lambda n=None: torch.device("cpu")
    xm.mark_step = lambda: marks.append(1)
    modules = {"torch_xla": types.ModuleType("torch_xla"), "torch_xla.core": types.ModuleType("torch_xla.core"),
               "torch_xla.core.xla_model": xm}  # fmt: skip
    modules["torch_xla"].__spec__ = importlib.machinery.ModuleSpec("torch_xla", loader=None)
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    for name in ("strategies.xla", "strategies.single_xla", "strategies.launchers.xla"):  # as Lightning's suites
        monkeypatch.setattr(f"fulmen.{name}._XLA_AVAILABLE", True)
    return marks


def test_one_xla_device_trains_with_a_mark_step_per_step(fake_torch_xla):
    strategy = SingleDeviceXLAStrategy(torch.device("xla", 0), debug=True)
    assert strategy.root_device == torch.device("cpu") and strategy.debug
    _trainer(accelerator="cpu", strategy=strategy, max_steps=3).fit(Model(), loader(batch_size=4))
    assert len(fake_torch_xla) == 3


def test_several_xla_devices_are_refused_naming_what_works(fake_torch_xla):
    strategy = XLAStrategy(debug=True, sync_module_states=False, ignored=1)
    assert isinstance(strategy.launcher, _XLALauncher) and strategy.launcher.is_interactive_compatible
    with pytest.raises(MisconfigurationException, match="torch_xla's launcher, which fulmen does not drive"):
        _trainer(accelerator="cpu", devices=2, strategy=strategy)
    with pytest.raises(MisconfigurationException, match="Train on one XLA device"):
        strategy.launcher.launch(lambda: None)


# -- DeepSpeed: needs deepspeed -------------------------------------------------------------------------------
@oracle.parity
def test_deepspeed_needs_its_package_as_in_lightning():
    oracle.lightning()
    from lightning.pytorch.strategies import DeepSpeedStrategy as Theirs
    from lightning.pytorch.utilities.exceptions import MisconfigurationException as TheirMisconfiguration

    with pytest.raises(TheirMisconfiguration):
        Theirs()
    for make in (DeepSpeedStrategy, lambda: _trainer(accelerator="cpu", strategy="deepspeed")):
        with pytest.raises(MisconfigurationException, match="pip install deepspeed") as info:
            make()
        assert isinstance(info.value, ModuleNotFoundError)  # as Lightning's other missing packages


@pytest.fixture
def deepspeed_installed(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: importlib.machinery.ModuleSpec(name, None) if name == "deepspeed" else real(name, *a))  # fmt: skip


def test_deepspeed_keeps_its_configuration_and_refuses_runs(deepspeed_installed, tmp_path, monkeypatch):
    strategy = DeepSpeedStrategy(stage=3, offload_parameters=True, offload_params_device="nvme", pin_memory=True)
    zero = strategy.config["zero_optimization"]
    assert zero["stage"] == 3 and strategy.zero_stage_3
    assert zero["offload_param"]["device"] == "nvme" and zero["offload_param"]["pin_memory"]
    assert "zero_optimization" not in DeepSpeedStrategy(zero_optimization=False).config
    assert DeepSpeedStrategy(config={"train_batch_size": 8}).config == {"train_batch_size": 8}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"zero_optimization": {"stage": 1}}))
    monkeypatch.setenv(DeepSpeedStrategy.DEEPSPEED_ENV_VAR, str(path))
    assert DeepSpeedStrategy().config == {"zero_optimization": {"stage": 1}}
    with pytest.raises(MisconfigurationException, match="no such file"):
        DeepSpeedStrategy(config=str(tmp_path / "missing.json"))
    with pytest.raises(MisconfigurationException, match="FSDPStrategy\\(sharding_strategy='FULL_SHARD'\\)"):
        _trainer(accelerator="cpu", devices=2, strategy=strategy)


@oracle.parity
def test_remove_module_hooks_as_lightning():
    oracle.lightning()
    from lightning.pytorch.strategies.deepspeed import remove_module_hooks as theirs

    def hooked() -> tuple[nn.Module, list[str]]:
        fired: list[str] = []
        model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 1)))
        for module in (model, model[1][0]):
            module.register_forward_hook(lambda *a: fired.append("forward"))
            module.register_forward_pre_hook(lambda *a: fired.append("pre"))
            module.register_forward_hook(lambda *a, **k: fired.append("forward+kwargs"), with_kwargs=True)
            module.register_full_backward_hook(lambda *a: fired.append("backward"))
            module._register_state_dict_hook(lambda *a: fired.append("state_dict"))
            module._register_load_state_dict_pre_hook(lambda *a: fired.append("load"))
        return model, fired

    for remove in (remove_module_hooks, theirs):
        model, fired = hooked()
        model(torch.ones(1, 2, requires_grad=True)).sum().backward()
        model.load_state_dict(model.state_dict())
        assert set(fired) == {"forward", "pre", "forward+kwargs", "backward", "state_dict", "load"}
        fired.clear()
        remove(model)
        model(torch.ones(1, 2, requires_grad=True)).sum().backward()
        model.load_state_dict(model.state_dict())
        assert fired == []


def test_strategies_module_layout():
    for module, names in {"single_device": ["SingleDeviceStrategy"], "single_xla": ["SingleDeviceXLAStrategy"],
                          "xla": ["XLAStrategy"], "deepspeed": ["DeepSpeedStrategy", "remove_module_hooks"],
                          "launchers.launcher": ["_Launcher"],
                          "launchers.multiprocessing": ["_MultiProcessingLauncher"],
                          "launchers.subprocess_script": ["_SubprocessScriptLauncher"],
                          "launchers.xla": ["_XLALauncher"]}.items():  # fmt: skip
        loaded = importlib.import_module(f"fulmen.strategies.{module}")
        assert all(hasattr(loaded, name) for name in names)
    assert issubclass(XLAStrategy, DDPStrategy) and issubclass(DeepSpeedStrategy, DDPStrategy)
    assert issubclass(SingleDeviceXLAStrategy, SingleDeviceStrategy) and issubclass(ParallelStrategy, Strategy)
    assert SingleDeviceStrategy(0).root_device == torch.device("cuda", 0)
    assert Strategy(CPUAccelerator()).launcher is None
