"""Precision plugins beyond the flag's: FSDPPrecision runs as the precision flag does under FSDP; DeepSpeed's,
XLA's, TransformerEngine's and bitsandbytes' take Lightning's arguments and refuse where Lightning does (or,
past that, when used); LightningDoublePrecisionModule casts inputs to float64 as Lightning's does."""

from __future__ import annotations

import os
import socket

import pytest
import torch

import fulmen
from fulmen.demos.boring_classes import BoringModel
from fulmen.plugins import (
    BitsandbytesPrecision,
    DeepSpeedPrecision,
    FSDPPrecision,
    TransformerEnginePrecision,
    XLAPrecision,
)
from fulmen.plugins.precision.double import LightningDoublePrecisionModule
from fulmen.precision import HalfPrecision, MixedPrecision, Precision
from fulmen.utilities.exceptions import MisconfigurationException
from tests import gloo
from tests.parity import oracle


@oracle.parity
@pytest.mark.parametrize(
    ("args", "kwargs"),
    [(("64-true",), {}), (("32",), {}), (("bf16-mixed",), {"scaler": "scaler"}), (("16-true",), {"scaler": "scaler"})],
)
def test_fsdp_precision_refuses_what_lightnings_refuses(args, kwargs):
    oracle.lightning()
    from lightning.pytorch.plugins import FSDPPrecision as Theirs
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    kwargs = {key: ShardedGradScaler() for key in kwargs}
    with pytest.raises(ValueError):
        Theirs(*args, **kwargs)
    with pytest.raises(ValueError, match="FSDPPrecision"):
        FSDPPrecision(*args, **kwargs)


@oracle.parity
@pytest.mark.parametrize("precision", ["32-true", "16-true", "bf16-true", "bf16-mixed"])
def test_fsdp_precision_is_the_flags_precision(precision):
    oracle.lightning()
    from lightning.pytorch.plugins import FSDPPrecision as Theirs

    ours, theirs = FSDPPrecision(precision), Theirs(precision)
    assert ours.precision == theirs.precision == precision
    assert (ours.scaler is None) == (theirs.scaler is None)
    config, their_config = ours.mixed_precision_config, theirs.mixed_precision_config
    for field in ("param_dtype", "reduce_dtype", "buffer_dtype"):
        assert getattr(config, field) == getattr(their_config, field)
    model = torch.nn.Linear(4, 4)
    ours.convert_module(model)
    assert model.weight.dtype == theirs.convert_module(torch.nn.Linear(4, 4)).weight.dtype
    with ours.tensor_init_context():
        made = torch.empty(1)
    with theirs.tensor_init_context():
        assert made.dtype == torch.empty(1).dtype
    # what it does is what the flag's precision object does on this machine
    inner = {"32-true": Precision, "16-true": HalfPrecision, "bf16-true": HalfPrecision, "bf16-mixed": MixedPrecision}
    assert type(ours._inner) is inner[precision]
    if precision == "bf16-mixed":
        with ours.forward_context():
            assert torch.get_autocast_dtype("cpu") == torch.bfloat16 and torch.is_autocast_enabled("cpu")


def test_fsdp_precision_16_mixed_falls_back_on_cpus_as_the_flag_does():
    if torch.cuda.is_available():
        pytest.skip("a CPU-only machine's fallback")
    with pytest.warns(UserWarning, match="'bf16-mixed' is used instead"):
        plugin = FSDPPrecision("16-mixed")
    assert plugin.precision == "16-mixed" and plugin.dtype == torch.bfloat16 and plugin.scaler is None


@pytest.fixture
def one_process_group(monkeypatch):
    """torchrun's variables for a world of one process: the strategy runs in this process, with gloo."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key in [k for k in os.environ if k.startswith("SLURM_")] + ["GROUP_RANK", "FULMEN_LAUNCHER"]:
        monkeypatch.delenv(key, raising=False)
    for key, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}.items():  # fmt: skip
        monkeypatch.setenv(key, value)
    yield
    gloo.destroy_process_group()


def _fsdp_fit(tmp_path, strategy, **kwargs):
    fulmen.seed_everything(7)
    model = BoringModel()
    trainer = fulmen.Trainer(accelerator="cpu", devices=1, strategy=strategy, max_steps=3, limit_val_batches=0,
                             logger=False, enable_progress_bar=False, enable_model_summary=False,
                             enable_checkpointing=False, default_root_dir=tmp_path, **kwargs)  # fmt: skip
    trainer.fit(model)
    whole = {name: getattr(t, "full_tensor", lambda t=t: t)() for name, t in model.state_dict().items()}  # DTensors
    return trainer, {name: tensor.detach().clone() for name, tensor in whole.items()}


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true"])
def test_fsdp_with_the_plugin_trains_as_with_the_flag(one_process_group, tmp_path, precision):
    """FSDPStrategy(precision_plugin=FSDPPrecision(p)) and plugins=[FSDPPrecision(p)] train exactly as
    precision=p (one process, gloo)."""
    from fulmen.strategies import FSDPStrategy

    trainer, by_flag = _fsdp_fit(tmp_path, "fsdp", precision=precision)
    assert isinstance(trainer.strategy, FSDPStrategy) and trainer.global_step == 3
    fulmen.seed_everything(7)
    initial = BoringModel().state_dict()
    assert not torch.equal(initial["layer.weight"].to(by_flag["layer.weight"].dtype), by_flag["layer.weight"])
    plugin = FSDPPrecision(precision)
    trainer, by_strategy = _fsdp_fit(tmp_path, FSDPStrategy(precision_plugin=plugin))
    assert trainer.strategy.precision_plugin is plugin and trainer.precision == precision
    _, by_plugins = _fsdp_fit(tmp_path, "fsdp", plugins=[FSDPPrecision(precision)])
    for name, value in by_flag.items():
        assert value.dtype == by_strategy[name].dtype == by_plugins[name].dtype
        torch.testing.assert_close(by_strategy[name], value, rtol=0, atol=0, msg=name)
        torch.testing.assert_close(by_plugins[name], value, rtol=0, atol=0, msg=name)


@oracle.parity
def test_deepspeed_precision_takes_lightnings_argument_and_refuses_training(tmp_path):
    oracle.lightning()
    from lightning.pytorch.plugins import DeepSpeedPrecision as Theirs

    for precision in ("32-true", "16-true", "bf16-true", "16-mixed", "bf16-mixed"):
        assert DeepSpeedPrecision(precision).precision == Theirs(precision).precision == precision
    with pytest.raises(ValueError):
        Theirs("64-true")
    with pytest.raises(ValueError, match=r"DeepSpeedPrecision\(precision='64-true'\)"):
        DeepSpeedPrecision("64-true")
    trainer = fulmen.Trainer(plugins=[DeepSpeedPrecision("bf16-mixed")], max_steps=1, logger=False,
                             enable_progress_bar=False, default_root_dir=tmp_path)  # fmt: skip
    with pytest.raises(MisconfigurationException, match="DeepSpeed's engine.*not supported by fulmen.*strategy='fsdp'"):
        trainer.fit(BoringModel())


@oracle.parity
@pytest.mark.parametrize(
    ("name", "args", "kwargs", "package"),
    [
        ("XLAPrecision", (), {}, "torch_xla"),
        ("TransformerEnginePrecision", (), {"weights_dtype": torch.bfloat16}, "transformer_engine"),
        ("BitsandbytesPrecision", ("nf4",), {}, "bitsandbytes"),
    ],
)
def test_a_missing_package_fails_at_construction_as_in_lightning(name, args, kwargs, package):
    pl = oracle.lightning()
    from fulmen.utilities.imports import package_available

    if package_available(package):
        pytest.skip(f"{package} is installed")
    with pytest.raises(ModuleNotFoundError):
        getattr(pl.plugins, name)(*args, **kwargs)
    with pytest.raises(ModuleNotFoundError, match=f"pip install -U '{package}"):
        getattr(fulmen.plugins, name)(*args, **kwargs)


def test_with_the_package_installed_they_refuse_at_use(monkeypatch, tmp_path):
    """Where the package is installed, the objects are made (their arguments checked as Lightning's are) and
    training with them refuses, naming what to use instead."""
    monkeypatch.setattr("fulmen.plugins._unavailable.package_available", lambda name: True)
    monkeypatch.setattr("fulmen.plugins.precision.xla._XLA_AVAILABLE", True)  # its module's flag decides
    with pytest.raises(ValueError, match="XLAPrecision.*'64-true'"):
        XLAPrecision("64-true")
    with pytest.raises(ValueError, match="8-bit modes compute in float16"):
        BitsandbytesPrecision("int8", dtype=torch.float32)
    with pytest.raises(KeyError, match="'nf8'"):
        BitsandbytesPrecision("nf8")
    plugins = [XLAPrecision("bf16-true"), TransformerEnginePrecision(weights_dtype=torch.float16),
               BitsandbytesPrecision("nf4-dq", ignore_modules={"head"})]  # fmt: skip
    assert BitsandbytesPrecision("int8").dtype == torch.float16
    for plugin in plugins:
        trainer = fulmen.Trainer(plugins=[plugin], max_steps=1, logger=False, enable_progress_bar=False,
                                 default_root_dir=tmp_path)  # fmt: skip
        with pytest.raises(MisconfigurationException, match="not supported by fulmen"):
            trainer.fit(BoringModel())


class _Recorder(fulmen.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(2, 2).double()
        self._ddp_params_and_buffers_to_ignore = ["layer.bias"]
        self.seen: list[tuple[str, torch.dtype, torch.dtype]] = []

    def forward(self, x, index=None):
        self.seen.append(("forward", x.dtype, index.dtype))
        return self.layer(x)

    def _step(self, name, batch):
        x, index = batch
        self.seen.append((name, x.dtype, index.dtype))
        return x

    def training_step(self, batch, batch_idx):
        return self._step("training_step", batch)

    def validation_step(self, batch, batch_idx):
        return self._step("validation_step", batch)

    def test_step(self, batch, batch_idx):
        return self._step("test_step", batch)

    def predict_step(self, batch, batch_idx):
        return self._step("predict_step", batch)


@oracle.parity
def test_lightning_double_precision_module_is_deprecated_and_casts_floats():
    oracle.lightning()
    from lightning.pytorch.plugins.precision.double import LightningDoublePrecisionModule as Theirs

    from fulmen.utilities.rank_zero import LightningDeprecationWarning

    batch = (torch.ones(1, 2), torch.tensor([3]))
    results = []
    for cls in (LightningDoublePrecisionModule, Theirs):
        module = _Recorder()
        with pytest.warns(Warning, match="deprecated") as warned:
            wrapper = cls(module)
        results.append(([type(w.message).__name__ for w in warned], wrapper._ddp_params_and_buffers_to_ignore))
        for step in ("training_step", "validation_step", "test_step", "predict_step"):
            getattr(wrapper, step)(batch, 0)
        out = wrapper(batch[0], index=batch[1])
        assert out.dtype == torch.float64 and wrapper.module is module
        results.append(module.seen)
    assert results[0] == results[2] and results[1] == results[3]
    assert results[1] == [("training_step", torch.float64, torch.int64), ("validation_step", torch.float64, torch.int64),
                          ("test_step", torch.float64, torch.int64), ("predict_step", torch.float64, torch.int64),
                          ("forward", torch.float64, torch.int64)]  # fmt: skip
    assert results[0] == (["LightningDeprecationWarning"], ["module.layer.bias"])
    assert issubclass(LightningDeprecationWarning, DeprecationWarning)
