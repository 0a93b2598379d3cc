"""Every precision trains like a hand-written PyTorch loop with the same dtype, autocast and gradient scaler.

On this CPU, '16-mixed' with a scaler runs as an explicit plugin (float16 autocast on the CPU with a CPU
GradScaler): the same code path CUDA takes, where the flag alone picks it. The GPU script
(benchmarks/gpu_checks.py) runs the flag on a real CUDA device.
"""

from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
from torch import nn

import fulmen
from fulmen.plugins import MixedPrecision
from fulmen.utilities.exceptions import MisconfigurationException
from tests.parity import oracle

N_BATCHES = 8
DTYPES = {"64-true": torch.float64, "16-true": torch.float16, "bf16-true": torch.bfloat16}


def make_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))


def batches() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [
        (torch.randn(4, 6, generator=g), torch.randint(0, 3, (4,), generator=g)) for _ in range(N_BATCHES)
    ]


class Loader:
    def __iter__(self):
        return iter(batches())

    def __len__(self):
        return N_BATCHES


class Model(fulmen.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = make_net()
        self.seen: list[tuple[torch.dtype, torch.dtype, torch.dtype]] = []  # input, weight, default dtypes
        self.grad_norms: list[float] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.seen.append((x.dtype, self.net[0].weight.dtype, torch.get_default_dtype()))
        return nn.functional.cross_entropy(self.net(x), y)

    def on_before_optimizer_step(self, optimizer):
        grads = [p.grad.float() for p in self.parameters() if p.grad is not None]
        self.grad_norms.append(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item())

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def hand_loop(precision: str, scaler: torch.amp.GradScaler | None = None, steps: int = N_BATCHES):
    """The plain PyTorch loop for ``precision``: what the trainer must reproduce."""
    net = make_net()
    dtype = DTYPES.get(precision)
    if dtype is not None:
        net = net.to(dtype)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    autocast_dtype = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}.get(precision)
    grad_norms, skipped = [], []
    for x, y in batches()[:steps]:
        if dtype is not None:
            x = x.to(dtype)
        ctx = torch.autocast("cpu", dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext()
        with ctx:
            loss = nn.functional.cross_entropy(net(x), y)
        opt.zero_grad()
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.unscale_(opt)
        grads = [p.grad.float() for p in net.parameters()]
        grad_norms.append(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item())
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        if scaler:
            scale = scaler.get_scale()
            scaler.step(opt)
            scaler.update()
            skipped.append(scaler.get_scale() < scale)  # the scale backs off exactly when inf/NaN was found
        else:
            opt.step()
            skipped.append(False)
        if not skipped[-1]:
            scheduler.step()
    return net, scheduler, grad_norms, skipped


def fit(precision=None, plugins=None, enable_checkpointing=False, **kwargs):
    model = Model()
    trainer = fulmen.Trainer(
        max_epochs=1, precision=precision, plugins=plugins, gradient_clip_val=1.0, logger=False,
        enable_checkpointing=enable_checkpointing, enable_progress_bar=False, enable_model_summary=False, **kwargs,
    )  # fmt: skip
    trainer.fit(model, Loader())
    return model, trainer


TOLERANCE = {"16-true": 1e-3, "bf16-true": 1e-2}


@pytest.mark.parametrize("precision", ["32-true", "64-true", "bf16-mixed", "16-true", "bf16-true"])
def test_each_precision_matches_a_hand_written_loop(precision):
    model, trainer = fit(precision)
    ref, ref_scheduler, ref_norms, _ = hand_loop(precision)
    dtype = DTYPES.get(precision, torch.float32)
    for (name, p), q in zip(model.net.named_parameters(), ref.parameters()):
        assert p.dtype == dtype, name
        tol = TOLERANCE.get(precision, 0.0)
        torch.testing.assert_close(p, q, rtol=tol, atol=tol, msg=name)
    # '-true': inputs and tensors created in forward take the weights' dtype; the batch's integers stay
    assert set(model.seen) == {(dtype, dtype, dtype if precision in DTYPES else torch.float32)}
    assert torch.get_default_dtype() == torch.float32  # restored after each step
    assert trainer.lr_scheduler_configs[0].scheduler.get_last_lr() == ref_scheduler.get_last_lr()
    assert model.grad_norms == pytest.approx(ref_norms, rel=TOLERANCE.get(precision, 1e-6))


def test_16_mixed_on_the_cpu_falls_back_to_bf16_with_a_warning():
    with pytest.warns(UserWarning, match="bf16-mixed"):
        model, trainer = fit("16-mixed")
    assert trainer.precision == "bf16-mixed"
    ref, *_ = hand_loop("bf16-mixed")
    for p, q in zip(model.net.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def test_a_gradient_scaler_skips_inf_steps_and_their_schedulers_and_unscales_before_clipping():
    """float16 autocast with a scale so large that the first three steps overflow: those steps are skipped,
    the scheduler does not step for them, and clipping and on_before_optimizer_step see unscaled grads."""
    plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=2.0**20))
    model, trainer = fit(plugins=[plugin])
    ref, ref_scheduler, ref_norms, skipped = hand_loop(
        "16-mixed", torch.amp.GradScaler("cpu", init_scale=2.0**20)
    )
    assert skipped == [True, True, True, False, False, False, False, False]  # the setting does what we mean
    for p, q in zip(model.net.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    assert scheduler.last_epoch == ref_scheduler.last_epoch == 5  # stepped after the 5 real steps only
    assert scheduler.get_last_lr() == ref_scheduler.get_last_lr()
    finite = [n for n, s in zip(ref_norms, skipped) if not s]
    assert model.grad_norms[3:] == pytest.approx(finite, rel=1e-6)  # unscaled: the scale is 2**17 here
    assert trainer.global_step == N_BATCHES  # Lightning counts optimizer_step calls, skipped or not


def test_the_scalers_state_is_checkpointed_and_a_resumed_run_is_exact(tmp_path):
    def plugin(init_scale=2.0**20):
        return MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=init_scale))

    full, full_trainer = fit(plugins=[plugin()])
    every_4 = fulmen.callbacks.ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=4, save_top_k=-1)
    fit(plugins=[plugin()], callbacks=[every_4], enable_checkpointing=None)
    path = tmp_path / "epoch=0-step=4.ckpt"
    checkpoint = torch.load(path, weights_only=False)
    assert checkpoint["MixedPrecision"]["scale"] == 2.0**17  # Lightning's key: the plugin's class name

    resumed_plugin = plugin(init_scale=8.0)  # replaced by the checkpoint's scale
    model = Model()
    trainer = fulmen.Trainer(
        max_epochs=1, plugins=[resumed_plugin], gradient_clip_val=1.0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(model, Loader(), ckpt_path=path)
    assert trainer.global_step == N_BATCHES
    for p, q in zip(model.net.parameters(), full.net.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    assert resumed_plugin.scaler.get_scale() == full_trainer.precision_plugin.scaler.get_scale()
    scheduler = trainer.lr_scheduler_configs[0].scheduler
    assert scheduler.last_epoch == full_trainer.lr_scheduler_configs[0].scheduler.last_epoch == 5

    # a Lightning 1.x checkpoint kept the scaler under another key
    checkpoint["native_amp_scaling_state"] = checkpoint.pop("MixedPrecision")
    torch.save(checkpoint, tmp_path / "v1.ckpt")
    legacy_plugin = plugin(init_scale=8.0)
    trainer = fulmen.Trainer(max_epochs=1, plugins=[legacy_plugin], gradient_clip_val=1.0, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(Model(), Loader(), ckpt_path=tmp_path / "v1.ckpt")
    assert legacy_plugin.scaler.get_scale() == full_trainer.precision_plugin.scaler.get_scale()


LEGACY = [(16, "bf16-mixed"), ("16", "bf16-mixed"), ("bf16", "bf16-mixed"), (32, "32-true"), ("32", "32-true"),
          (64, "64-true"), ("64", "64-true")]  # fmt: skip


@oracle.parity
@pytest.mark.parametrize(("flag", "expected"), LEGACY)
def test_legacy_values_map_as_lightning_maps_them(flag, expected):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = fulmen.Trainer(precision=flag, logger=False)
    assert trainer.precision == expected
    historical = [w for w in caught if "1.x spelling" in str(w.message)]
    assert len(historical) == (1 if str(flag) in ("16", "bf16") else 0)
    pl = oracle.lightning()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = pl.Trainer(precision=flag, logger=False, accelerator="cpu")
    assert theirs.precision_plugin.precision == expected


def test_precision_plugins_are_checked():
    with pytest.raises(MisconfigurationException, match="both set the precision"):
        fulmen.Trainer(precision="bf16-mixed", plugins=[MixedPrecision("bf16-mixed", "cpu")])
    with pytest.raises(MisconfigurationException, match="needs no gradient scaler"):
        MixedPrecision("bf16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu"))
    with pytest.raises(MisconfigurationException, match="is not a plugin fulmen knows"):
        fulmen.Trainer(plugins=["16-mixed"])
    trainer = fulmen.Trainer(plugins=MixedPrecision(16, "cpu"), logger=False)  # the 1.x spelling of the flag
    assert trainer.precision == "16-mixed"


def test_double_precision_keeps_complex_buffers_and_builds_configure_model_in_float64():
    from fulmen import Trainer
    from fulmen.demos.boring_classes import BoringModel

    seen = {}

    class Complex(BoringModel):
        def __init__(self):
            super().__init__()
            self.register_buffer("made_early", torch.complex(torch.ones(3), torch.ones(3)), persistent=False)

        def configure_model(self):
            self.extra = torch.nn.Linear(2, 2)  # made under the precision: float64 already
            self.register_buffer("made_late", torch.complex(torch.rand(3), torch.rand(3)), persistent=False)

        def on_fit_start(self):
            seen["early"], seen["late"] = self.made_early, self.made_late
            seen["extra"] = self.extra.weight.dtype

    Trainer(precision="64-true", max_steps=1, logger=False, enable_progress_bar=False,
            enable_checkpointing=False, enable_model_summary=False).fit(Complex())  # fmt: skip
    assert seen["early"].dtype == torch.complex64 and torch.equal(seen["early"].imag, torch.ones(3))
    assert seen["late"].dtype == torch.complex128 and seen["extra"] == torch.float64


def test_mixed_precision_pickles_after_a_step():
    """ddp_spawn sends the trainer (and its precision object) to its workers."""
    import pickle

    precision = MixedPrecision("bf16-mixed", "cpu")
    layer = nn.Linear(2, 1)
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    precision.optimizer_step(optimizer, layer, lambda: layer(torch.ones(1, 2)).sum().backward())
    copy = pickle.loads(pickle.dumps(precision))
    assert copy.precision == "bf16-mixed" and not copy.step_was_skipped(optimizer)
