"""One rank of the DDP-vs-FSDP benchmark (``benchmarks/run.py --only sharding`` starts it under torchrun).

Trains a 4 x Linear(2048, 2048) MLP (16.8M parameters, 67 MB in float32) with AdamW for 20 steps of batch 32
per process, and prints one JSON line per rank: the bytes this rank holds of parameters + gradients +
optimizer state (from the tensors' local shards, at the last optimizer step), the process's peak resident
memory (VmHWM) and the median step time after 5 warm-up steps.

Usage: ``torchrun --nproc_per_node=2 benchmarks/sharding_worker.py ddp|fsdp``.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import fulmen

WIDTH, DEPTH, BATCH, STEPS, WARMUP = 2048, 4, 32, 20, 5


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


class MLP(fulmen.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.Sequential(*[Layer() for _ in range(DEPTH)])

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layers(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=1e-4)


class Measure(fulmen.Callback):
    def __init__(self) -> None:
        self.starts: list[float] = []
        self.state_bytes = 0

    def on_train_batch_start(self, *args: Any) -> None:
        self.starts.append(time.perf_counter())

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        from torch.distributed.tensor import DTensor

        def local(t: torch.Tensor) -> int:
            t = t.to_local() if isinstance(t, DTensor) else t
            return t.numel() * t.element_size()

        params = list(pl_module.parameters())
        tensors = params + [p.grad for p in params if p.grad is not None]
        tensors += [v for s in optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.dim()]
        self.state_bytes = sum(local(t) for t in tensors)


def main(kind: str) -> None:
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(BATCH * STEPS * 2, WIDTH))
    measure = Measure()
    strategy: Any = "ddp" if kind == "ddp" else fulmen.strategies.FSDPStrategy(auto_wrap_policy={Layer})
    trainer = fulmen.Trainer(accelerator="cpu", devices=2, strategy=strategy, max_steps=STEPS, logger=False,
                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                             callbacks=[measure])  # fmt: skip
    # FSDP as it is meant to be used for a large model: created on the meta device, materialised sharded
    with trainer.init_module(empty_init=kind == "fsdp"):
        model = MLP()
    trainer.fit(model, DataLoader(data, batch_size=BATCH))
    steps = [b - a for a, b in zip(measure.starts[WARMUP:], measure.starts[WARMUP + 1 :])]
    with open("/proc/self/status") as lines:  # VmHWM: this process's peak resident memory
        status = dict(line.split(":", 1) for line in lines if ":" in line)
    print(json.dumps({"kind": kind, "rank": trainer.global_rank, "state_mb": measure.state_bytes / 2**20,
                      "peak_rss_mb": int(status["VmHWM"].split()[0]) / 1024,
                      "step_ms": statistics.median(steps) * 1e3}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])
