"""Lightning's accelerator interface: the static device methods, names, statistics, nvidia-smi's GPU statistics,
finding free GPUs, and what happens without the hardware (XLA: ModuleNotFoundError at construction)."""

from __future__ import annotations

import importlib
import os
import re
import stat
import sys

import pytest
import torch

import fulmen
from fulmen.accelerators import (
    Accelerator,
    CPUAccelerator,
    CUDAAccelerator,
    MPSAccelerator,
    XLAAccelerator,
    find_usable_cuda_devices,
)
from fulmen.accelerators.cpu import get_cpu_stats
from fulmen.accelerators.cuda import get_nvidia_gpu_stats
from fulmen.accelerators.mps import get_device_stats as mps_device_stats
from fulmen.utilities.exceptions import MisconfigurationException
from tests.parity import oracle


def _lightning_accelerators():
    oracle.lightning()
    return importlib.import_module("lightning.pytorch.accelerators")


def _their_misconfiguration() -> type[Exception]:
    return oracle.lightning("lightning.pytorch.utilities.exceptions").MisconfigurationException


def test_modules_and_names():
    for module, names in {"accelerator": ["Accelerator"], "cpu": ["CPUAccelerator", "get_cpu_stats"],
                          "cuda": ["CUDAAccelerator", "get_nvidia_gpu_stats"],
                          "mps": ["MPSAccelerator", "get_device_stats"], "xla": ["XLAAccelerator"]}.items():  # fmt: skip
        loaded = importlib.import_module(f"fulmen.accelerators.{module}")
        assert all(callable(getattr(loaded, name)) for name in names)
    # the name reads as Lightning's static method and as a string
    assert (CPUAccelerator.name(), CUDAAccelerator.name(), MPSAccelerator.name(), XLAAccelerator.name()) == (
        "cpu", "cuda", "mps", "tpu")  # fmt: skip
    assert CPUAccelerator().name == "cpu"
    with pytest.raises(TypeError, match="abstract"):
        Accelerator()


@oracle.parity
@pytest.mark.parametrize("devices", [1, 3, "2", " 4 "])
def test_cpu_static_methods_as_lightning(devices):
    lightning = _lightning_accelerators()
    assert CPUAccelerator.parse_devices(devices) == lightning.CPUAccelerator.parse_devices(devices)
    assert CPUAccelerator.get_parallel_devices(devices) == lightning.CPUAccelerator.get_parallel_devices(devices)
    assert CPUAccelerator.auto_device_count() == lightning.CPUAccelerator.auto_device_count() == 1


@oracle.parity
@pytest.mark.parametrize("devices", [[0, 1], -1, 0, "0,1", 1.5, "two"])
def test_cpu_refuses_what_lightning_refuses_with_a_type_error(devices):
    lightning = _lightning_accelerators()
    with pytest.raises(TypeError):
        lightning.CPUAccelerator.parse_devices(devices)
    with pytest.raises(TypeError, match=re.escape(f"devices={devices!r}")):
        CPUAccelerator.parse_devices(devices)


@oracle.parity
@pytest.mark.parametrize("devices", [-1, "-1", 2, "3", [1, 3], "0,2", "3,", (2,), 0, "0", []])
def test_cuda_static_methods_as_lightning(devices, monkeypatch):
    lightning = _lightning_accelerators()
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)  # four GPUs, as torch reports them
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    parsed = CUDAAccelerator.parse_devices(devices)
    assert parsed == lightning.CUDAAccelerator.parse_devices(devices)
    if parsed is not None:
        assert CUDAAccelerator.get_parallel_devices(parsed) == lightning.CUDAAccelerator.get_parallel_devices(parsed)
    assert CUDAAccelerator.auto_device_count() == lightning.CUDAAccelerator.auto_device_count() == 4
    assert CUDAAccelerator.is_available() and lightning.CUDAAccelerator.is_available()


@oracle.parity
@pytest.mark.parametrize(("devices", "error"), [(5, MisconfigurationException), ([0, 4], MisconfigurationException),
                                                ("1,1", MisconfigurationException), ([True], TypeError),
                                                (1.5, TypeError)])  # fmt: skip
def test_cuda_refuses_what_lightning_refuses(devices, error, monkeypatch):
    lightning = _lightning_accelerators()
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    with pytest.raises(_their_misconfiguration() if error is MisconfigurationException else error):
        lightning.CUDAAccelerator.parse_devices(devices)
    with pytest.raises(error, match="devices="):
        CUDAAccelerator.parse_devices(devices)


@oracle.parity
def test_without_the_hardware_as_lightning():
    lightning = _lightning_accelerators()
    for ours, theirs in ((CUDAAccelerator, lightning.CUDAAccelerator), (MPSAccelerator, lightning.MPSAccelerator),
                         (XLAAccelerator, lightning.XLAAccelerator)):  # fmt: skip
        assert ours.is_available() is theirs.is_available() is False
        assert ours.auto_device_count() == theirs.auto_device_count()
    # no MPS here: parsing refuses, as Lightning's does
    with pytest.raises(_their_misconfiguration()):
        lightning.MPSAccelerator.parse_devices(1)
    with pytest.raises(MisconfigurationException, match="no MPS device"):
        MPSAccelerator.parse_devices(1)
    # XLA devices are parsed without torch_xla (1 device, or all of them: 0 here)
    assert XLAAccelerator.parse_devices(1) == lightning.XLAAccelerator.parse_devices(1) == 1
    assert XLAAccelerator.get_parallel_devices(1) == lightning.XLAAccelerator.get_parallel_devices(1)
    for bad in (3, [5]):
        with pytest.raises(ValueError):
            lightning.XLAAccelerator.parse_devices(bad)
        with pytest.raises(ValueError, match="for XLA devices"):
            XLAAccelerator.parse_devices(bad)
    # constructing the XLA accelerator needs torch_xla: the same exception class as Lightning's
    with pytest.raises(ModuleNotFoundError):
        lightning.XLAAccelerator()
    with pytest.raises(ModuleNotFoundError, match="needs the `torch_xla` package.*accelerator='cpu'"):
        XLAAccelerator()
    with pytest.raises(ModuleNotFoundError, match="torch_xla"):
        fulmen.Trainer(accelerator="tpu", logger=False)


@oracle.parity
def test_setup_device_checks_the_device_type():
    lightning = _lightning_accelerators()
    for ours, theirs, wrong in ((CPUAccelerator(), lightning.CPUAccelerator(), "cuda"),
                                (CUDAAccelerator(), lightning.CUDAAccelerator(), "cpu"),
                                (MPSAccelerator(), lightning.MPSAccelerator(), "cpu")):  # fmt: skip
        with pytest.raises(_their_misconfiguration()):
            theirs.setup_device(torch.device(wrong))
        with pytest.raises(MisconfigurationException, match=f"was given device {wrong}"):
            ours.setup_device(torch.device(wrong))
    CPUAccelerator().setup_device(torch.device("cpu"))
    MPSAccelerator().setup_device(torch.device("mps"))  # checks the type only


@oracle.parity
def test_cpu_and_mps_statistics_have_lightnings_keys():
    lightning = _lightning_accelerators()
    from lightning.pytorch.accelerators.cpu import get_cpu_stats as lightning_cpu_stats
    from lightning.pytorch.accelerators.mps import get_device_stats as lightning_mps_stats

    pairs = [(CPUAccelerator().get_device_stats("cpu"), lightning.CPUAccelerator().get_device_stats("cpu")),
             (get_cpu_stats(), lightning_cpu_stats()), (mps_device_stats(), lightning_mps_stats()),
             (MPSAccelerator().get_device_stats("mps"), lightning.MPSAccelerator().get_device_stats("mps"))]  # fmt: skip
    for ours, theirs in pairs:
        assert sorted(ours) == sorted(theirs)
        assert all(0.0 <= value <= 100.0 for value in ours.values())
    assert sorted(get_cpu_stats()) == ["cpu_percent", "cpu_swap_percent", "cpu_vm_percent"]


def test_statistics_name_psutil_when_it_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)
    # each module's availability flag decides (what Lightning's suites patch to simulate a missing package)
    monkeypatch.setattr("fulmen.accelerators.cpu._PSUTIL_AVAILABLE", False)
    monkeypatch.setattr("fulmen.accelerators.mps._PSUTIL_AVAILABLE", False)
    for stats in (get_cpu_stats, mps_device_stats):
        with pytest.raises(ModuleNotFoundError, match="psutil"):
            stats()


@pytest.fixture
def fake_nvidia_smi(tmp_path, monkeypatch):
    """An nvidia-smi on the PATH that answers the query with fixed numbers and notes its arguments."""
    script = tmp_path / "nvidia-smi"
    script.write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/args\necho "31, 1024, 80000, 5, [N/A], 40, [Not Supported]"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    return tmp_path


@oracle.parity
@pytest.mark.parametrize(("device", "visible", "gpu_id"), [(1, None, "1"), ("cuda:1", "3,5", "5"),
                                                          (torch.device("cuda", 0), "3,5", "3")])  # fmt: skip
def test_nvidia_gpu_stats_as_lightning(fake_nvidia_smi, monkeypatch, device, visible, gpu_id):
    oracle.lightning()
    from lightning.pytorch.accelerators.cuda import get_nvidia_gpu_stats as lightning_stats

    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    ours = get_nvidia_gpu_stats(device)
    assert (fake_nvidia_smi / "args").read_text().split()[-1] == f"--id={gpu_id}"
    assert ours == lightning_stats(device)
    assert ours["utilization.gpu (%)"] == 31.0 and ours["fan.speed (%)"] == 0.0


def test_nvidia_gpu_stats_without_nvidia_smi(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="nvidia-smi: command not found"):
        get_nvidia_gpu_stats(0)


@pytest.fixture
def gpus_with_busy(monkeypatch):
    """Four GPUs; moving a tensor to those in ``busy`` fails as on a GPU another job holds in exclusive mode."""
    busy: set[int] = set()
    real_tensor = torch.tensor

    def tensor(data, *args, device=None, **kwargs):
        if device is not None and torch.device(device).type == "cuda":
            if torch.device(device).index in busy:
                raise RuntimeError("CUDA error: all CUDA-capable devices are busy or unavailable")
            device = "cpu"
        return real_tensor(data, *args, device=device, **kwargs)

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch, "tensor", tensor)
    return busy


@oracle.parity
@pytest.mark.parametrize(("busy", "wanted"), [(set(), -1), (set(), 2), ({0, 2}, -1), ({0, 2}, 2), ({1}, 0),
                                              ({0, 1, 2, 3}, -1)])  # fmt: skip
def test_find_usable_cuda_devices_as_lightning(gpus_with_busy, busy, wanted):
    lightning = _lightning_accelerators()
    gpus_with_busy.update(busy)
    assert find_usable_cuda_devices(wanted) == lightning.find_usable_cuda_devices(wanted)


@oracle.parity
@pytest.mark.parametrize(("busy", "wanted", "error"), [({0, 2}, 3, RuntimeError), (set(), 5, ValueError)])
def test_find_usable_cuda_devices_refuses_as_lightning(gpus_with_busy, busy, wanted, error):
    lightning = _lightning_accelerators()
    gpus_with_busy.update(busy)
    with pytest.raises(error):
        lightning.find_usable_cuda_devices(wanted)
    with pytest.raises(error, match=f"find_usable_cuda_devices\\({wanted}\\)"):
        find_usable_cuda_devices(wanted)


def test_find_usable_cuda_devices_without_gpus():
    assert find_usable_cuda_devices(0) == []
    with pytest.raises(ValueError, match="no visible CUDA device"):
        find_usable_cuda_devices()


class CountingCPU(Accelerator):
    """A user's accelerator written against Lightning's interface only (no resolve_devices of its own)."""

    name = staticmethod(lambda: "counting")  # type: ignore[assignment]
    parse_devices = staticmethod(lambda devices: int(devices))  # type: ignore[assignment]
    get_parallel_devices = staticmethod(lambda devices: [torch.device("cpu")] * devices)  # type: ignore[assignment]
    auto_device_count = staticmethod(lambda: 1)  # type: ignore[assignment]
    is_available = staticmethod(lambda: True)  # type: ignore[assignment]

    def __init__(self) -> None:
        self.calls: list[str] = []

    def setup_device(self, device: torch.device) -> None:
        self.calls.append(f"setup_device {device}")

    def setup(self, trainer) -> None:
        self.calls.append("setup")

    def teardown(self) -> None:
        self.calls.append("teardown")


def test_a_custom_accelerator_drives_a_run():
    from tests.strategies.ddp_model import Model, loader

    accelerator = CountingCPU()
    trainer = fulmen.Trainer(accelerator=accelerator, devices="auto", max_steps=2, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    assert trainer.accelerator is accelerator and trainer.num_devices == 1
    trainer.fit(Model(), loader(batch_size=4))
    assert accelerator.calls == ["setup_device cpu", "setup", "teardown"]
