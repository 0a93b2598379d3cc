"""Lightning's members of the strategies, precision plugins, checkpoint I/O, cluster environments, accelerators and
launchers, as a subclass or a callback written for Lightning uses them: called at Lightning's moments (compared
with Lightning itself, the test-only oracle), and doing what Lightning's do."""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

import fulmen
import fulmen.demos.boring_classes as fulmen_boring
from fulmen.accelerators import CPUAccelerator, CUDAAccelerator, MPSAccelerator, XLAAccelerator
from fulmen.plugins import TorchCheckpointIO
from fulmen.plugins.environments import SLURMEnvironment
from fulmen.plugins.precision import MixedPrecision, Precision
from fulmen.strategies import DDPStrategy, DeepSpeedStrategy, FSDPStrategy, SingleDeviceStrategy, Strategy
from fulmen.strategies.launchers import _MultiProcessingLauncher
from tests.parity import oracle

_FLAGS = dict(
    accelerator="cpu", max_epochs=1, limit_train_batches=2, limit_val_batches=1, limit_test_batches=1,
    limit_predict_batches=1, num_sanity_val_steps=1, logger=False, enable_checkpointing=False,
    enable_progress_bar=False, enable_model_summary=False,
)  # fmt: skip

# the strategy hooks a subclass overrides, recorded with the module's hooks around them
_STRATEGY_HOOKS = (
    "on_train_start", "on_train_end", "on_validation_start", "on_validation_end", "on_test_start", "on_test_end",
    "on_predict_start", "on_predict_end", "post_training_step",
)  # fmt: skip


def _recording_strategy(pl: Any, events: list[str]) -> Any:
    def hook(name: str) -> Any:
        def record(self: Any) -> None:
            events.append(f"strategy.{name}")

        return record

    class Recorder(pl.strategies.SingleDeviceStrategy):  # type: ignore[name-defined,misc]
        def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
            events.append(f"strategy.on_train_batch_start({batch_idx})")

        def pre_backward(self, closure_loss: torch.Tensor) -> None:
            events.append(f"strategy.pre_backward(grad={closure_loss.requires_grad})")

        def post_backward(self, closure_loss: torch.Tensor) -> None:
            events.append(f"strategy.post_backward(grad={closure_loss.requires_grad})")

        def process_dataloader(self, dataloader: object) -> object:
            events.append("strategy.process_dataloader")
            return dataloader

        @contextlib.contextmanager
        def model_sharded_context(self) -> Iterator[None]:
            events.append("strategy.model_sharded_context")
            yield

    for name in _STRATEGY_HOOKS:
        setattr(Recorder, name, hook(name))
    return Recorder(device="cpu")


def _recording_module(boring: Any, events: list[str]) -> Any:
    class Model(boring.BoringModel):  # type: ignore[name-defined,misc]
        def configure_model(self) -> None:
            events.append("module.configure_model")

        def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
            events.append(f"module.on_train_batch_start({batch_idx})")

        def on_before_backward(self, loss: torch.Tensor) -> None:
            events.append("module.on_before_backward")

        def on_after_backward(self) -> None:
            events.append("module.on_after_backward")

        def on_before_optimizer_step(self, optimizer: Any) -> None:
            events.append("module.on_before_optimizer_step")

    for name in ("on_train_start", "on_train_end", "on_validation_start", "on_validation_end", "on_test_start",
                 "on_test_end", "on_predict_start", "on_predict_end"):  # fmt: skip

        def record(self: Any, name: str = name) -> None:
            events.append(f"module.{name}")

        setattr(Model, name, record)
    return Model()


def _every_stage(trainer: Any, model: Any, events: list[str]) -> list[str]:
    """fit, validate, test and predict in turn, each marked in ``events``."""
    for stage in ("fit", "validate", "test", "predict"):
        events.append(f"-- {stage}")
        getattr(trainer, stage)(model)
    return events


def _strategy_events(pl: Any, boring: Any) -> list[str]:
    events: list[str] = []
    trainer = pl.Trainer(strategy=_recording_strategy(pl, events), **_FLAGS)
    return _every_stage(trainer, _recording_module(boring, events), events)


@oracle.parity
def test_a_strategy_subclass_hears_its_hooks_when_lightnings_does():
    oracle.lightning()
    import lightning.pytorch as lightning_pl
    import lightning.pytorch.demos.boring_classes as lightning_boring

    ours = _strategy_events(fulmen, fulmen_boring)
    assert ours == _strategy_events(lightning_pl, lightning_boring)
    # the per-batch hooks run (they are skipped only where nothing overrides them)
    assert "strategy.on_train_batch_start(1)" in ours and ours.count("strategy.post_training_step") == 2


def _precision_events(pl: Any, boring: Any) -> list[str]:
    events: list[str] = []
    base = pl.plugins.precision.Precision

    class Recorder(base):  # type: ignore[misc,valid-type]
        def connect(self, model: Any, optimizers: Any, lr_schedulers: Any) -> Any:
            events.append(f"connect({len(optimizers)} optimizers)")
            return super().connect(model, optimizers, lr_schedulers)

        def pre_backward(self, tensor: torch.Tensor, module: Any) -> Any:
            events.append("precision.pre_backward")
            return super().pre_backward(tensor, module)

        def backward(self, tensor: torch.Tensor, model: Any, optimizer: Any, *args: Any, **kwargs: Any) -> None:
            events.append(f"precision.backward(optimizer={optimizer is not None})")
            super().backward(tensor, model, optimizer, *args, **kwargs)

        def post_backward(self, tensor: torch.Tensor, module: Any) -> Any:
            events.append("precision.post_backward")
            return super().post_backward(tensor, module)

        def optimizer_step(self, optimizer: Any, model: Any, closure: Any, **kwargs: Any) -> Any:
            events.append(f"precision.optimizer_step(model={type(model).__name__})")
            return super().optimizer_step(optimizer, model=model, closure=closure, **kwargs)

        def clip_gradients(self, optimizer: Any, clip_val: Any = 0.0, gradient_clip_algorithm: Any = "norm") -> None:
            events.append(f"precision.clip_gradients({clip_val}, norm={gradient_clip_algorithm == 'norm'})")
            super().clip_gradients(optimizer, clip_val, gradient_clip_algorithm)

        def teardown(self) -> None:
            events.append("precision.teardown")

    for name in ("train_step_context", "val_step_context", "test_step_context", "predict_step_context"):

        def context(self: Any, name: str = name) -> Any:
            events.append(f"precision.{name}")
            return getattr(base, name)(self)

        setattr(Recorder, name, context)
    trainer = pl.Trainer(plugins=[Recorder()], gradient_clip_val=0.5, **_FLAGS)
    return _every_stage(trainer, _recording_module(boring, events), events)


@oracle.parity
def test_a_precision_subclass_hears_its_hooks_when_lightnings_does():
    oracle.lightning()
    import lightning.pytorch as lightning_pl
    import lightning.pytorch.demos.boring_classes as lightning_boring

    ours = _precision_events(fulmen, fulmen_boring)
    assert ours == _precision_events(lightning_pl, lightning_boring)
    assert "precision.clip_gradients(0.5, norm=True)" in ours and "connect(1 optimizers)" in ours


class _Counting(nn.Module):
    """A wrapper a strategy puts around the module: its forward runs the steps (Lightning's redirection)."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.calls = 0

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.module(*args, **kwargs)


def _wrapped_steps(pl: Any, boring: Any) -> tuple[int, bool]:
    class Wrapping(pl.strategies.SingleDeviceStrategy):  # type: ignore[misc,name-defined]
        def setup(self, trainer: Any) -> None:
            super().setup(trainer)
            self.model = _Counting(self.lightning_module)

    strategy = Wrapping(device="cpu")
    trainer = pl.Trainer(strategy=strategy, **_FLAGS)
    model = boring.BoringModel()
    trainer.fit(model)
    # the steps ran through the wrapper: 1 sanity + 2 training + 1 validation batches
    return strategy.model.calls, trainer.model is strategy.model


@oracle.parity
def test_a_model_set_on_the_strategy_runs_the_steps_through_its_forward():
    oracle.lightning()
    import lightning.pytorch as lightning_pl
    import lightning.pytorch.demos.boring_classes as lightning_boring

    ours = _wrapped_steps(fulmen, fulmen_boring)
    assert ours == _wrapped_steps(lightning_pl, lightning_boring) == (4, True)


def test_optimizers_set_on_the_strategy_are_the_ones_stepped(tmp_path):
    stepped: list[str] = []

    class Recording(torch.optim.SGD):
        def step(self, closure: Any = None) -> Any:
            stepped.append("replacement")
            return super().step(closure)

    class Replace(fulmen.Callback):
        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            strategy = trainer.strategy
            strategy.optimizers = [Recording(pl_module.parameters(), lr=0.1)]
            assert strategy.lightning_optimizers[0].optimizer is strategy.optimizers[0]

    trainer = fulmen.Trainer(callbacks=[Replace()], default_root_dir=tmp_path, **_FLAGS)
    trainer.fit(fulmen_boring.BoringModel())
    assert stepped == ["replacement"] * 2 and isinstance(trainer.optimizers[0], Recording)


def test_clip_grad_by_norm_and_by_value_clip_as_torch_does():
    def grads() -> tuple[list[nn.Parameter], torch.optim.Optimizer]:
        torch.manual_seed(0)
        layer = nn.Linear(4, 3)
        (layer(torch.randn(8, 4)) * 10).sum().backward()
        return list(layer.parameters()), torch.optim.SGD(layer.parameters(), lr=0.1)

    precision = Precision()
    params, optimizer = grads()
    expected, _ = grads()
    precision.clip_grad_by_norm(optimizer, 0.5)
    torch.nn.utils.clip_grad_norm_(expected, 0.5)
    assert all(torch.equal(p.grad, e.grad) for p, e in zip(params, expected))
    params, optimizer = grads()
    expected, _ = grads()
    precision.clip_gradients(optimizer, clip_val=0.01, gradient_clip_algorithm="value")
    torch.nn.utils.clip_grad_value_(expected, 0.01)
    assert all(torch.equal(p.grad, e.grad) for p, e in zip(params, expected))
    assert max(p.grad.abs().max().item() for p in params) <= 0.01
    before = [p.grad.clone() for p in params]
    precision.clip_gradients(optimizer)  # clip_val 0: nothing
    assert all(torch.equal(p.grad, b) for p, b in zip(params, before))
    assert list(precision.main_params(optimizer)) == params
    model = nn.Linear(1, 1)
    assert precision.connect(model, [optimizer], []) == (model, [optimizer], [])


def test_mixed_precision_steps_run_in_its_autocast_context():
    precision = MixedPrecision("bf16-mixed", "cpu")
    context = precision.autocast_context_manager()
    assert isinstance(context, torch.autocast) and context.fast_dtype == torch.bfloat16
    with precision.train_step_context():
        assert torch.is_autocast_enabled("cpu")
        assert nn.Linear(2, 2)(torch.ones(1, 2)).dtype == torch.bfloat16


@oracle.parity
def test_torch_checkpoint_io_loads_tensors_onto_the_cpu(tmp_path, monkeypatch):
    """A checkpoint written on a GPU opens on a machine without one, as Lightning's does."""
    oracle.lightning()
    path = str(tmp_path / "gpu.ckpt")
    with monkeypatch.context() as patch:  # the file records its tensors as cuda:0's, as a GPU run writes them
        patch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        torch.save({"state_dict": {"w": torch.ones(2)}}, path)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(path, weights_only=True)  # what a load without a map_location does here
    checkpoint = TorchCheckpointIO().load_checkpoint(path)
    assert checkpoint["state_dict"]["w"].device.type == "cpu"
    from lightning.pytorch.plugins import TorchCheckpointIO as LightningCheckpointIO

    assert torch.equal(LightningCheckpointIO().load_checkpoint(path)["state_dict"]["w"], checkpoint["state_dict"]["w"])


def test_a_strategys_state_dict_hooks_write_and_read_the_checkpoint(tmp_path):
    seen: dict[str, Any] = {}

    class Renaming(SingleDeviceStrategy):
        def lightning_module_state_dict(self) -> dict[str, Any]:
            return {f"renamed.{k}": v for k, v in super().lightning_module_state_dict().items()}

        def load_model_state_dict(self, checkpoint: Any, strict: bool = True) -> None:
            seen["keys"] = sorted(checkpoint)
            state = {k.removeprefix("renamed."): v for k, v in checkpoint["state_dict"].items()}
            super().load_model_state_dict({"state_dict": state}, strict=strict)

        def load_optimizer_state_dict(self, checkpoint: Any) -> None:
            seen["optimizer_states"] = len(checkpoint["optimizer_states"])
            super().load_optimizer_state_dict(checkpoint)

    trainer = fulmen.Trainer(strategy=Renaming(), default_root_dir=tmp_path, **_FLAGS)
    trainer.fit(fulmen_boring.BoringModel())
    path = str(tmp_path / "renamed.ckpt")
    trainer.save_checkpoint(path)
    assert all(k.startswith("renamed.") for k in torch.load(path, weights_only=True)["state_dict"])
    resumed = fulmen.Trainer(strategy=Renaming(), default_root_dir=tmp_path, **{**_FLAGS, "max_epochs": 2})
    resumed.fit(fulmen_boring.BoringModel(), ckpt_path=path)
    assert "state_dict" in seen["keys"] and "optimizer_states" in seen["keys"] and seen["optimizer_states"] == 1


def test_a_strategy_that_restores_optimizers_itself_resumes_a_checkpoint_without_them(tmp_path):
    class Restores(SingleDeviceStrategy):
        @property
        def lightning_restore_optimizer(self) -> bool:
            return False

        def load_optimizer_state_dict(self, checkpoint: Any) -> None:
            raise AssertionError("not called: the strategy restores the optimizers itself")

    trainer = fulmen.Trainer(default_root_dir=tmp_path, **_FLAGS)
    trainer.fit(fulmen_boring.BoringModel())
    path = str(tmp_path / "no_optimizers.ckpt")
    trainer.save_checkpoint(path)
    checkpoint = torch.load(path, weights_only=True)
    del checkpoint["optimizer_states"]
    torch.save(checkpoint, path)
    resumed = fulmen.Trainer(strategy=Restores(), default_root_dir=tmp_path, **{**_FLAGS, "max_epochs": 2})
    resumed.fit(fulmen_boring.BoringModel(), ckpt_path=path)
    assert resumed.current_epoch == 2


@oracle.parity
def test_register_strategies_adds_lightnings_names():
    oracle.lightning()
    from lightning.pytorch import strategies as lightning_strategies

    def entries(cls: Any) -> dict[str, Any]:
        registry = fulmen.strategies.StrategyRegistry.__class__()
        cls.register_strategies(registry)
        return {name: (entry["init_params"], entry["description"]) for name, entry in registry.items()}

    for ours, theirs in ((DDPStrategy, lightning_strategies.DDPStrategy),
                         (SingleDeviceStrategy, lightning_strategies.SingleDeviceStrategy),
                         (DeepSpeedStrategy, lightning_strategies.DeepSpeedStrategy)):  # fmt: skip
        registry = lightning_strategies.StrategyRegistry.__class__()
        theirs.register_strategies(registry)
        expected = {name: (entry["init_params"], entry["description"]) for name, entry in registry.items()}
        assert entries(ours) == expected
        assert list(entries(ours)) == list(expected)  # in Lightning's order
    assert entries(Strategy) == {}
    assert set(entries(FSDPStrategy)) == {"fsdp", "fsdp_cpu_offload"}
    assert {"fsdp", "fsdp_cpu_offload"} <= set(FSDPStrategy.get_registered_strategies())


def test_a_parallel_strategys_devices_nodes_and_backend():
    strategy = DDPStrategy(parallel_devices=[torch.device("cpu")] * 2, process_group_backend="gloo")
    assert strategy.parallel_devices == [torch.device("cpu")] * 2 and strategy.process_group_backend == "gloo"
    strategy.num_nodes = 3
    strategy.parallel_devices = [torch.device("cpu")]
    assert (strategy.num_nodes, strategy.num_processes) == (3, 1)
    with pytest.raises(AttributeError):
        strategy.process_group_backend = "nccl"  # read-only, as Lightning's


def test_a_strategys_accelerator_precision_and_model_are_settable():
    strategy = SingleDeviceStrategy()
    assert type(strategy.precision_plugin) is Precision and strategy.accelerator is None
    strategy.accelerator = CPUAccelerator()
    precision = MixedPrecision("bf16-mixed", "cpu")
    strategy.precision_plugin = precision
    assert strategy.precision_plugin is precision and isinstance(strategy.accelerator, CPUAccelerator)
    strategy.precision_plugin = None
    assert type(strategy.precision_plugin) is Precision
    model = nn.Linear(1, 1)
    strategy.model = model
    assert strategy.model is model and strategy.process_dataloader("loader") == "loader"
    with strategy.model_sharded_context():
        pass


def test_slurm_job_id_and_name_are_static_methods(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "1234")
    monkeypatch.setenv("SLURM_JOB_NAME", "train")
    assert SLURMEnvironment.job_id() == 1234 and SLURMEnvironment.job_name() == "train"
    monkeypatch.setenv("SLURM_JOB_NAME", "bash")  # salloc's interactive shell: not a job's id
    assert SLURMEnvironment.job_id() is None
    monkeypatch.delenv("SLURM_JOB_ID")
    monkeypatch.setenv("SLURM_JOB_NAME", "train")
    assert SLURMEnvironment.job_id() is None
    assert SLURMEnvironment.resolve_root_node_address("gpu[03-05,9],cpu1") == "gpu03"


def test_the_multiprocessing_launcher_carries_the_callback_metrics_back():
    class FakeTrainer:
        def __init__(self, metrics: dict[str, Any]) -> None:
            self.callback_metrics = metrics

    launcher = _MultiProcessingLauncher(DDPStrategy(), start_method="spawn")
    extra = launcher.get_extra_results(FakeTrainer({"loss": torch.tensor(0.25), "acc": torch.tensor(1.0)}))
    assert isinstance(extra["callback_metrics_bytes"], bytes)
    main = FakeTrainer({"earlier": torch.tensor(2.0)})
    launcher.update_main_process_results(main, extra)
    assert {k: v.item() for k, v in main.callback_metrics.items()} == {"earlier": 2.0, "loss": 0.25, "acc": 1.0}


def test_accelerator_names_are_static_methods_and_strings(monkeypatch):
    for cls, name in ((CPUAccelerator, "cpu"), (CUDAAccelerator, "cuda"), (MPSAccelerator, "mps"), (XLAAccelerator, "tpu")):
        assert cls.name() == name == cls.name and str(inspect.signature(cls.name)) == "() -> str"
    assert CPUAccelerator().name() == "cpu"
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    CUDAAccelerator.set_nvidia_flags(0)
    assert os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def _scaled_run(pl: Any, boring: Any, mixed: Any) -> tuple[list[float], list[torch.Tensor]]:
    seen: list[float] = []

    class Model(boring.BoringModel):  # type: ignore[name-defined,misc]
        def on_before_backward(self, loss: torch.Tensor) -> None:
            seen.append(round(loss.item(), 3))  # the loss backward runs on: scaled

        def on_before_optimizer_step(self, optimizer: Any) -> None:
            seen.append(round(self.layer.weight.grad.abs().sum().item(), 3))  # unscaled again

    torch.manual_seed(0)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    flags = {**_FLAGS, "limit_train_batches": 3, "limit_val_batches": 0, "gradient_clip_val": 0.5}
    trainer = pl.Trainer(plugins=[mixed("16-mixed", "cpu", scaler=scaler)], **flags)
    model = Model()
    trainer.fit(model)
    return seen, [p.detach().clone() for p in model.parameters()]


@oracle.parity
def test_a_gradient_scaler_scales_the_loss_the_hooks_see_as_lightnings_does():
    """'16-mixed' with a GradScaler (on the CPU here, as on GPUs): on_before_backward gets the scaled loss,
    clipping and on_before_optimizer_step the unscaled gradients, and the weights end up equal."""
    oracle.lightning()
    import lightning.pytorch as lightning_pl
    import lightning.pytorch.demos.boring_classes as lightning_boring
    from lightning.pytorch.plugins.precision import MixedPrecision as LightningMixedPrecision

    seen, weights = _scaled_run(fulmen, fulmen_boring, MixedPrecision)
    their_seen, their_weights = _scaled_run(lightning_pl, lightning_boring, LightningMixedPrecision)
    assert seen == their_seen and all(torch.equal(a, b) for a, b in zip(weights, their_weights))
    assert seen[0] > 100  # scaled by 1024
