"""The devices flag: numbers, -1, 'auto', index lists and '0,1' strings, checked against what the machine has;
TPU/HPU need their vendor packages."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types

import pytest
import torch

import fulmen
from fulmen.accelerators import CPUAccelerator, CUDAAccelerator, MPSAccelerator, select_accelerator
from fulmen.utilities.exceptions import MisconfigurationException


@pytest.mark.parametrize(("devices", "count"), [("auto", 1), (1, 1), (3, 3), ("2", 2), (" 4 ", 4)])
def test_cpu_devices_count_processes(devices, count):
    assert CPUAccelerator().resolve_devices(devices) == [torch.device("cpu")] * count


@pytest.mark.parametrize(
    ("devices", "match"),
    [(-1, "number of processes"), ("0,1", "no device indices"), ([0, 1], "no device indices"), (0, "devices=0"),
     (-3, "devices=-3"), (True, "devices=True"), (1.5, "devices=1.5"), ("two", "not understood")],
)  # fmt: skip
def test_cpu_devices_refused(devices, match):
    with pytest.raises(MisconfigurationException, match=match):
        fulmen.Trainer(accelerator="cpu", devices=devices, logger=False)


@pytest.fixture
def four_gpus(monkeypatch):
    """A machine with four CUDA devices, as torch reports it (no GPU is touched)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)


@pytest.mark.parametrize(
    ("devices", "indices"),
    [("auto", [0, 1, 2, 3]), (-1, [0, 1, 2, 3]), ("-1", [0, 1, 2, 3]), (2, [0, 1]), ("3", [0, 1, 2]),
     ([1, 3], [1, 3]), ("0,2", [0, 2]), ("3,", [3]), ((2,), [2])],
)  # fmt: skip
def test_cuda_devices(four_gpus, devices, indices):
    assert CUDAAccelerator().resolve_devices(devices) == [torch.device("cuda", i) for i in indices]


@pytest.mark.parametrize(
    ("devices", "match"),
    [(5, "asks for 5 CUDA devices, but this machine has 4"), ([0, 4], r"devices \[4\] that do not exist"),
     ("1,1", "names a device twice"), ("0,x", "not a list of device indices"), ([True], "not a list"),
     (0, "devices=0")],
)  # fmt: skip
def test_cuda_devices_refused(four_gpus, devices, match):
    with pytest.raises(MisconfigurationException, match=match):
        CUDAAccelerator().resolve_devices(devices)


def test_ddp_uses_the_listed_gpus(four_gpus, monkeypatch):
    """devices=[2, 3] under DDP: local rank 0 trains on cuda:2, local rank 1 on cuda:3."""
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK"):
        monkeypatch.delenv(key, raising=False)
    trainer = fulmen.Trainer(accelerator="cuda", devices="2,3", strategy="ddp", logger=False)
    assert trainer.strategy.parallel_devices == [torch.device("cuda", 2), torch.device("cuda", 3)]
    assert trainer.device_ids == [2, 3] and trainer.num_devices == 2


def test_mps_has_one_device(monkeypatch):
    with pytest.raises(MisconfigurationException, match="this machine has no MPS device"):
        MPSAccelerator().resolve_devices(1)
    monkeypatch.setattr(MPSAccelerator, "is_available", staticmethod(lambda: True))  # an Apple silicon Mac
    assert MPSAccelerator().resolve_devices("auto") == [torch.device("mps", 0)]
    with pytest.raises(MisconfigurationException, match="one MPS device"):
        MPSAccelerator().resolve_devices(2)


@pytest.mark.parametrize(("flag", "package"), [("tpu", "torch_xla"), ("hpu", "habana_frameworks")])
def test_tpu_and_hpu_name_the_package_to_install(flag, package, monkeypatch):
    monkeypatch.delitem(sys.modules, package, raising=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == package else real(name, *a)
    )
    with pytest.raises(MisconfigurationException, match=f"needs the `{package}` package"):
        select_accelerator(flag)


def test_tpu_runs_on_the_device_torch_xla_gives(monkeypatch):
    """With torch_xla installed, accelerator='tpu' trains on xla_device() (a stand-in module here: no TPU)."""
    xm = types.ModuleType("torch_xla.core.xla_model")
    xm.xla_device = lambda: torch.device("cpu")  # what a real torch_xla returns is torch.device('xla', 0)
    fake = {"torch_xla": types.ModuleType("torch_xla"), "torch_xla.core": types.ModuleType("torch_xla.core"),
            "torch_xla.core.xla_model": xm}  # fmt: skip
    fake["torch_xla"].__spec__ = importlib.machinery.ModuleSpec(
        "torch_xla", loader=None
    )  # found by find_spec
    for name, module in fake.items():
        monkeypatch.setitem(sys.modules, name, module)
    accelerator = select_accelerator("tpu")
    assert accelerator.name == "tpu" and accelerator.resolve_devices("auto") == [torch.device("cpu")]
    with pytest.raises(MisconfigurationException, match="one XLA device"):
        accelerator.resolve_devices(8)


@pytest.mark.parametrize(("devices", "expected"), [(1, [0]), (2, [0, 1]), ("3", [0, 1, 2])])
def test_cpu_device_ids_are_numbered_by_position(devices, expected):
    trainer = fulmen.Trainer(accelerator="cpu", devices=devices, logger=False)
    assert trainer.device_ids == expected and trainer.num_devices == len(expected)
