"""fulmen's own versions of the Lightning Fabric helpers Lightning's modules hold (``get_filesystem``, ``pl_load``,
``convert_to_tensors``, ``DistributedSamplerWrapper``, ``AcceleratorRegistry``, ``get_available_flops`` ...), each
compared with Fabric's on the same inputs."""

from __future__ import annotations

import dataclasses
import io
import warnings
from collections import OrderedDict, defaultdict, namedtuple

import numpy as np
import pytest
import torch

from fulmen.checkpoint import files as checkpoint_io
from fulmen.utilities import apply_func, cloud_io, throughput
from tests.parity import oracle


def _fabric(module: str):
    return oracle.lightning(f"lightning.fabric.{module}")


@oracle.parity
def test_get_filesystem_is_fabrics(tmp_path):
    theirs = _fabric("utilities.cloud_io").get_filesystem
    for path in (tmp_path, str(tmp_path / "x.ckpt"), f"file://{tmp_path}", "memory://bucket/x"):
        assert type(cloud_io.get_filesystem(path)) is type(theirs(path)), path
    for get in (cloud_io.get_filesystem, theirs):  # a protocol fsspec does not know
        with pytest.raises(ValueError, match="s3x"):
            get("s3x://bucket/x")


@oracle.parity
def test_pl_load_reads_what_fabrics_reads(tmp_path):
    theirs = _fabric("utilities.cloud_io")._load
    checkpoint = {"state_dict": {"w": torch.arange(3.0)}, "epoch": 2, "hparams": {"lr": 0.1}}
    torch.save(checkpoint, tmp_path / "a.ckpt")
    buffer = io.BytesIO()
    torch.save(checkpoint, buffer)
    import fsspec

    with fsspec.open("memory://fulmen/a.ckpt", "wb") as f:
        f.write(buffer.getvalue())
    for source in (tmp_path / "a.ckpt", str(tmp_path / "a.ckpt"), "memory://fulmen/a.ckpt"):
        ours, their = checkpoint_io._load(source, map_location="cpu"), theirs(source, map_location="cpu")
        assert ours.keys() == their.keys() and torch.equal(ours["state_dict"]["w"], their["state_dict"]["w"])
    for weights_only in (None, True, False):
        buffer.seek(0)
        ours = checkpoint_io._load(buffer, weights_only=weights_only)
        buffer.seek(0)
        assert ours["epoch"] == theirs(buffer, weights_only=weights_only)["epoch"] == 2
    with pytest.raises(FileNotFoundError):
        checkpoint_io._load(tmp_path / "missing.ckpt")


@dataclasses.dataclass
class _Batch:
    x: torch.Tensor
    n: int = 3


_Pair = namedtuple("_Pair", "first second")


def _nested():
    counts = defaultdict(list)
    counts["k"] = [1.5]
    return {"int": 3, "flag": True, "float": 0.5, "array": np.arange(4, dtype=np.int16), "text": "s",
            "list": [1, 2.0, torch.ones(2)], "pair": _Pair(4, torch.zeros(1)), "ordered": OrderedDict(a=1),
            "counts": counts, "batch": _Batch(torch.ones(1)), "none": None}  # fmt: skip


def _same(ours, theirs):
    assert type(ours) is type(theirs)
    if isinstance(theirs, torch.Tensor):
        assert ours.dtype == theirs.dtype and ours.device == theirs.device and torch.equal(ours, theirs)
    elif isinstance(theirs, dict):
        assert ours.keys() == theirs.keys()
        for key in theirs:
            _same(ours[key], theirs[key])
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            _same(a, b)
    elif dataclasses.is_dataclass(theirs):
        _same(dataclasses.asdict(ours), dataclasses.asdict(theirs))
    elif isinstance(theirs, np.ndarray):
        assert np.array_equal(ours, theirs)
    else:
        assert ours == theirs


@oracle.parity
def test_convert_to_tensors_and_back_to_scalars_as_fabric():
    theirs = _fabric("utilities.apply_func")
    tensors = apply_func.convert_to_tensors(_nested(), "cpu")
    _same(tensors, theirs.convert_to_tensors(_nested(), "cpu"))
    assert tensors["flag"].dtype == torch.uint8 and tensors["int"].dtype == torch.int32  # Fabric's dtypes
    scalars = {"loss": torch.tensor(0.25), "steps": [torch.tensor(3)], "name": "x", "flag": torch.tensor(True)}
    _same(apply_func.convert_tensors_to_scalars(scalars), theirs.convert_tensors_to_scalars(scalars))
    with pytest.raises(ValueError, match="does not contain a single element"):
        apply_func.convert_tensors_to_scalars({"v": torch.ones(2)})
    with pytest.raises(ValueError, match="does not contain a single element"):
        theirs.convert_tensors_to_scalars({"v": torch.ones(2)})


@oracle.parity
@pytest.mark.parametrize("options", [{}, {"include_none": False}, {"wrong_dtype": torch.BoolTensor}])
def test_apply_to_collection_takes_lightnings_arguments(options):
    theirs = oracle.lightning("lightning_utilities.core.apply_func")
    data = {"t": torch.ones(2), "b": torch.tensor([True]), "l": [torch.zeros(1), 4, None], "d": _Batch(torch.ones(1))}

    def scale(t, factor, offset=0):
        return t * factor + offset

    _same(apply_func.apply_to_collection(data, torch.Tensor, scale, 2, offset=1, **options),
          theirs.apply_to_collection(data, torch.Tensor, scale, 2, offset=1, **options))  # fmt: skip
    _same(apply_func.apply_to_collection(data, torch.Tensor, lambda t: None, **options),
          theirs.apply_to_collection(data, torch.Tensor, lambda t: None, **options))  # fmt: skip
    assert apply_func.is_dataclass_instance(data["d"]) and not apply_func.is_dataclass_instance(_Batch)


@oracle.parity
def test_optimizer_protocols_recognise_what_fabrics_do():
    theirs = _fabric("utilities.types")
    from fulmen.utilities.types import Optimizable, Steppable

    class StepOnly:
        def step(self, closure=None):
            return None

    parameter = torch.nn.Parameter(torch.zeros(1))
    for candidate in (torch.optim.SGD([parameter], lr=0.1), torch.optim.Adam([parameter]), StepOnly(), object()):
        assert isinstance(candidate, Steppable) == isinstance(candidate, theirs.Steppable)
        assert isinstance(candidate, Optimizable) == isinstance(candidate, theirs.Optimizable)


@oracle.parity
def test_is_cuda_available_agrees():
    from fulmen.accelerators.cuda import is_cuda_available

    assert is_cuda_available() == _fabric("accelerators.cuda").is_cuda_available()


class _Drawn(torch.utils.data.Sampler):
    """A sampler with an order of its own that changes with the epoch."""

    def __init__(self, n: int) -> None:
        self.n, self.epoch = n, 0

    def __iter__(self):
        return iter(torch.randperm(self.n, generator=torch.Generator().manual_seed(self.epoch)).tolist())

    def __len__(self) -> int:
        return self.n

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch


@oracle.parity
@pytest.mark.parametrize("options", [{"shuffle": False}, {"shuffle": True, "seed": 3}, {"drop_last": True}])
def test_distributed_sampler_wrapper_shares_out_as_fabrics(options):
    from fulmen.overrides.distributed import DistributedSamplerWrapper

    theirs = _fabric("utilities.distributed").DistributedSamplerWrapper
    for rank in (0, 1, 2):
        ours_sampler = DistributedSamplerWrapper(_Drawn(10), num_replicas=3, rank=rank, **options)
        their_sampler = theirs(_Drawn(10), num_replicas=3, rank=rank, **options)
        for epoch in (0, 1):
            ours_sampler.set_epoch(epoch)
            their_sampler.set_epoch(epoch)
            assert list(ours_sampler) == list(their_sampler) and len(ours_sampler) == len(their_sampler)


@oracle.parity
def test_accelerator_registry_as_lightnings_and_the_trainer_builds_a_registered_name():
    import fulmen
    from fulmen.accelerators import AcceleratorRegistry, CPUAccelerator

    theirs = oracle.lightning("lightning.pytorch.accelerators").AcceleratorRegistry
    assert {"cpu", "cuda", "mps", "tpu"} <= AcceleratorRegistry.available_accelerators()
    assert {"cpu", "cuda", "mps", "tpu"} <= theirs.available_accelerators()
    assert set(AcceleratorRegistry["cpu"]) == set(theirs["cpu"])  # the entry's keys
    with pytest.raises(Exception, match="already present in the registry") as ours_error:
        AcceleratorRegistry.register("cpu", CPUAccelerator)
    assert type(ours_error.value).__name__ == "MisconfigurationException"

    class Counted(CPUAccelerator):
        def __init__(self, label: str = "") -> None:
            self.label = label

    AcceleratorRegistry.register("counted", Counted, description="a test", label="x")
    try:
        assert AcceleratorRegistry.get("counted").label == "x" and AcceleratorRegistry.get("nope", 3) == 3
        with pytest.raises(KeyError, match="nope"):
            AcceleratorRegistry.get("nope")
        trainer = fulmen.Trainer(accelerator="counted", devices=1, logger=False, enable_checkpointing=False,
                                 enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
        assert isinstance(trainer.accelerator, Counted)
    finally:
        AcceleratorRegistry.remove("counted")
    assert "counted" not in AcceleratorRegistry.available_accelerators()


CHIPS = ["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA A100-SXM4-80GB",
         "NVIDIA A100-PCIE-40GB", "NVIDIA A10G", "NVIDIA L4", "Tesla T4", "Tesla V100-SXM2-16GB",
         "Tesla V100-PCIE-32GB", "Tesla V100S-PCIE-32GB", "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3080 Ti",
         "NVIDIA GeForce RTX 4080 SUPER", "NVIDIA GeForce RTX 2080 Ti", "NVIDIA RTX A6000", "NVIDIA A40",
         "Quadro RTX 5000", "NVIDIA TITAN RTX", "Some Future GPU"]  # fmt: skip


@oracle.parity
@pytest.mark.parametrize("chip", CHIPS)
def test_available_flops_are_fabrics(chip, monkeypatch):
    theirs = _fabric("utilities.throughput").get_available_flops
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: chip)
    device = torch.device("cuda", 0)
    for capability in ((7, 0), (9, 0)):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None, c=capability: c)
        for matmul in ("highest", "high"):
            monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda m=matmul: m)
            for dtype in (torch.float64, torch.float32, torch.bfloat16, torch.float16, torch.int8, "int4"):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    assert throughput.get_available_flops(device, dtype) == theirs(device, dtype), (capability, matmul, dtype)
    assert throughput.get_available_flops(torch.device("cpu"), torch.float32) is None


@oracle.parity
def test_a_precision_plugins_compute_dtype_is_fabrics():
    fabric = _fabric("plugins")
    theirs = _fabric("utilities.throughput")._plugin_to_compute_dtype
    import fulmen.plugins as ours

    pairs = [(ours.Precision(), fabric.Precision()), (ours.DoublePrecision(), fabric.DoublePrecision())]
    for precision in ("16-mixed", "bf16-mixed"):
        pairs.append((ours.MixedPrecision(precision, "cpu"), fabric.MixedPrecision(precision, "cpu")))
    for precision in ("16-true", "bf16-true"):
        pairs.append((ours.HalfPrecision(precision), fabric.HalfPrecision(precision)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for precision in ("32-true", "16-mixed", "bf16-mixed", "bf16-true"):
            pairs.append((ours.FSDPPrecision(precision), fabric.FSDPPrecision(precision)))
    for mine, their in pairs:
        assert throughput._plugin_to_compute_dtype(mine) == theirs(their), mine
    with pytest.raises(RuntimeError, match="Expected a precision plugin"):
        throughput._plugin_to_compute_dtype(object())


def test_throughput_takes_fabrics_positional_arguments():
    from fulmen.callbacks.throughput_monitor import Throughput

    counter = Throughput(1e12, 2, 3)  # available_flops, world_size, window_size: Fabric's order
    assert (counter.available_flops, counter.world_size, counter._points.maxlen) == (1e12, 2, 3)


@oracle.parity
def test_fabric_style_loggers_take_root_dir_as_fabrics(tmp_path):
    pytest.importorskip("tensorboard")
    from fulmen.loggers.csv_logs import CSVLogger, FabricCSVLogger
    from fulmen.loggers.tensorboard import FabricTensorBoardLogger, TensorBoardLogger

    fabric = _fabric("loggers")
    for ours, theirs, base in ((FabricCSVLogger, fabric.CSVLogger, CSVLogger),
                               (FabricTensorBoardLogger, fabric.TensorBoardLogger, TensorBoardLogger)):  # fmt: skip
        mine, their = ours(tmp_path, name="run", version=1), theirs(tmp_path, name="run", version=1)
        assert isinstance(mine, base)
        assert (mine.log_dir, mine.name, mine.version) == (their.log_dir, their.name, their.version)
        assert mine.root_dir == str(tmp_path / "run")  # as Lightning's loggers read it (Fabric's: tmp_path)
