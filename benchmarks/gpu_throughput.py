"""GPU throughput of fulmen against a plain PyTorch loop and Lightning: ``python benchmarks/gpu_throughput.py``.

Two workloads a user would run, in 'bf16-mixed' with AdamW: a GPT-style decoder (about 25M parameters, 6 layers of
width 512, vocabulary 8192, sequences of 256 tokens, batch 32) on random tokens, and a ResNet-18-shaped convnet
(ResNet-18's stages, with a 3x3 stem for 32x32 inputs) on random images (batch 256). Each runs with and without
``torch.compile``, with the data already on the device and from a ``DataLoader`` over pinned CPU memory, for a
hand-written loop, fulmen (``Trainer(compile=...)``) and Lightning (``torch.compile(module)`` passed to fit).
The variants of one repeat run interleaved; each row is the median of the repeats of the steps after the warm-up
(compilation happens there). Reports tokens/s or images/s, the ratio to the plain loop and the peak GPU memory.

Writes ``$OUT/gpu_throughput.json`` (when ``$OUT`` is set) and prints a markdown table. ``--smoke`` runs tiny
models on whatever device there is, to test the script.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset, TensorDataset

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# -- the workloads ---------------------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(attention)
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 8192, width: int = 512, layers: int = 6, heads: int = 8, seq: int = 256) -> None:
        super().__init__()
        self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(seq, width)
        self.blocks = nn.Sequential(*[Block(width, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tokens.weight  # tied, as in GPT-2

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tokens(idx) + self.positions(positions))))


def gpt_loss(net: nn.Module, batch: Any) -> torch.Tensor:
    tokens = batch[0] if isinstance(batch, (list, tuple)) else batch
    logits = net(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.conv2, self.bn2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.down(x))


def resnet18_32(classes: int = 10) -> nn.Module:
    """ResNet-18's shape (2 basic blocks per stage, 64-512 channels, 11.2M parameters) with a 3x3 stem and no
    max-pool, as used for 32x32 images."""
    stages, cin = [], 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        stages += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
        cin = cout
    return nn.Sequential(nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), *stages,
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes))  # fmt: skip


def image_loss(net: nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    return F.cross_entropy(net(x), y)


class Workload:
    def __init__(self, name: str, unit: str, make: Callable[[], nn.Module], loss: Callable[[nn.Module, Any], Any],
                 data: Callable[[int], tuple[torch.Tensor, ...]], batch: int, per_sample: int) -> None:  # fmt: skip
        self.name, self.unit, self.make, self.loss, self.data = name, unit, make, loss, data
        self.batch, self.per_sample = batch, per_sample  # per_sample: units per sample (tokens per sequence)


def workloads(smoke: bool) -> list[Workload]:
    seq = 32 if smoke else 256
    gpt = Workload(
        "GPT decoder", "tokens/s",
        (lambda: GPT(vocab=512, width=64, layers=2, heads=4, seq=seq)) if smoke else (lambda: GPT(seq=seq)),
        gpt_loss, lambda n: (torch.randint(0, 512 if smoke else 8192, (n, seq + 1)),), 4 if smoke else 32, seq,
    )  # fmt: skip
    images = Workload(
        "ResNet-18 (32x32)", "images/s", resnet18_32, image_loss,
        lambda n: (torch.randn(n, 3, 32, 32), torch.randint(0, 10, (n,))), 8 if smoke else 256, 1,
    )  # fmt: skip
    return [gpt, images]


# -- data ------------------------------------------------------------------------------------------------------
class DeviceBatches(Dataset[Any]):
    """Whole batches already on the device: a DataLoader(batch_size=None) hands them over as they are."""

    def __init__(self, tensors: tuple[torch.Tensor, ...], batch: int, device: torch.device) -> None:
        n = len(tensors[0]) // batch
        self.batches = [tuple(t[i * batch : (i + 1) * batch].to(device) for t in tensors) for i in range(n)]

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> Any:
        return self.batches[i]


def loader(tensors: tuple[torch.Tensor, ...], batch: int, device: torch.device, where: str) -> DataLoader[Any]:
    if where == "device":
        return DataLoader(DeviceBatches(tensors, batch, device), batch_size=None)
    return DataLoader(TensorDataset(*tensors), batch_size=batch, pin_memory=device.type == "cuda")


# -- the three ways to train -------------------------------------------------------------------------------------
def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def plain(work: Workload, data: DataLoader[Any], compile: bool, device: torch.device, warmup: int) -> float:
    torch.manual_seed(0)
    net = work.make().to(device)
    step_net = torch.compile(net) if compile else net
    optimizer = torch.optim.AdamW(net.parameters(), lr=1e-4)
    start = 0.0
    for i, batch in enumerate(data):
        if i == warmup:
            sync(device)
            start = time.perf_counter()
        batch = tuple(t.to(device, non_blocking=True) for t in batch)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = work.loss(step_net, batch)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    sync(device)
    return time.perf_counter() - start


def framework(pl: Any, work: Workload, data: DataLoader[Any], compile: bool, device: torch.device, warmup: int,
              is_fulmen: bool) -> float:  # fmt: skip
    class Module(pl.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = work.make()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return work.loss(self.net, batch)  # type: ignore[no-any-return]

        def configure_optimizers(self) -> Any:
            return torch.optim.AdamW(self.parameters(), lr=1e-4)

    times: dict[str, float] = {}

    class Clock(pl.Callback):  # type: ignore[misc,name-defined]
        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx == warmup:
                sync(device)
                times["start"] = time.perf_counter()

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            sync(device)
            times["end"] = time.perf_counter()

    options: dict[str, Any] = {"compile": compile} if is_fulmen else {}
    trainer = pl.Trainer(accelerator=device.type, devices=1, precision="bf16-mixed", max_epochs=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[Clock()], num_sanity_val_steps=0, **options)  # fmt: skip
    module = Module()
    trainer.fit(torch.compile(module) if compile and not is_fulmen else module, data)
    return times["end"] - times["start"]


# -- the run -----------------------------------------------------------------------------------------------------
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny models, any device: tests the script")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40, help="timed steps per run (after the warm-up)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    sys.path.insert(0, os.path.join(ROOT, "src"))
    import logging

    import fulmen

    for name in ("lightning.pytorch", "lightning.fabric", "fulmen"):
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        import lightning.pytorch as lightning
    except ImportError:
        lightning = None
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    warmup = 3 if args.smoke else 10
    steps = 3 if args.smoke else args.steps
    rows: list[dict[str, Any]] = []
    for work in workloads(args.smoke):
        tensors = work.data(work.batch * (warmup + steps))
        for compile in (False, True):
            for where in ("device", "pinned"):
                data = loader(tensors, work.batch, device, where)
                runners: dict[str, Callable[[], float]] = {
                    "plain loop": lambda w=work, d=data, c=compile: plain(w, d, c, device, warmup),
                    "fulmen": lambda w=work, d=data, c=compile: framework(fulmen, w, d, c, device, warmup, True),
                }
                if lightning is not None:
                    runners["Lightning"] = lambda w=work, d=data, c=compile: framework(
                        lightning, w, d, c, device, warmup, False
                    )
                samples: dict[str, list[float]] = {name: [] for name in runners}
                peaks: dict[str, float] = {}
                for _ in range(1 if args.smoke else args.repeats):
                    for name, run in runners.items():  # interleaved: a slow spell hits every variant alike
                        if device.type == "cuda":
                            torch.cuda.empty_cache()
                            torch.cuda.reset_peak_memory_stats(device)
                        seconds = run()
                        samples[name].append(steps * work.batch * work.per_sample / seconds)
                        if device.type == "cuda":
                            peaks[name] = torch.cuda.max_memory_allocated(device) / 2**20
                base = statistics.median(samples["plain loop"])
                for name, values in samples.items():
                    rate = statistics.median(values)
                    row = {"workload": work.name, "compile": compile, "data": where, "framework": name,
                           "rate": rate, "unit": work.unit, "vs_plain": rate / base, "peak_mb": peaks.get(name)}  # fmt: skip
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                _write(rows, device)  # as it goes: a run stopped by a time limit keeps what it measured
    title = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"\n{title}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}, `python benchmarks/gpu_throughput.py`")
    print("| workload | compile | data | framework | throughput | vs. plain loop | peak GPU memory |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        peak = f"{r['peak_mb']:.0f} MB" if r["peak_mb"] is not None else "-"
        print(f"| {r['workload']} | {'yes' if r['compile'] else 'no'} | {r['data']} | {r['framework']} | "
              f"{r['rate']:,.0f} {r['unit']} | {r['vs_plain']:.3f} | {peak} |")  # fmt: skip
    return 0


def _write(rows: list[dict[str, Any]], device: torch.device) -> None:
    if os.environ.get("OUT"):
        title = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
        with open(os.path.join(os.environ["OUT"], "gpu_throughput.json"), "w") as f:
            json.dump({"device": title, "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
