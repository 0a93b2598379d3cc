"""Per-step overhead of fulmen (and Lightning, if installed) over a hand-written PyTorch loop.

Trains the same 32-64-10 MLP (batch 32, synthetic tensors, one thread) with each framework, interleaved,
and prints the median per-step time and the overhead over the plain loop; then ``import`` times.
Run: ``python benchmarks/overhead.py`` (about a minute).
"""

from __future__ import annotations

import importlib
import statistics
import subprocess
import sys
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

STEPS = 600
REPEATS = 5
torch.set_num_threads(1)


def make_loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(STEPS * 32, 32, generator=g)
    y = torch.randint(0, 10, (STEPS * 32,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=32)


def make_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


def plain(loader: DataLoader) -> float:
    net = make_net()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    start = time.perf_counter()
    for x, y in loader:
        loss = nn.functional.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return (time.perf_counter() - start) / len(loader)


def framework_run(module_name: str, log: bool):
    pl = importlib.import_module(module_name)

    class MLP(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = make_net()

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = nn.functional.cross_entropy(self.net(x), y)
            if log:
                self.log("loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Clock(pl.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            self.start = time.perf_counter()

        def on_train_epoch_end(self, trainer, pl_module):
            self.elapsed = time.perf_counter() - self.start

    def run(loader: DataLoader) -> float:
        clock = Clock()
        trainer = pl.Trainer(
            max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
            enable_model_summary=False, callbacks=[clock], accelerator="cpu", devices=1,
        )  # fmt: skip
        trainer.fit(MLP(), loader)
        return clock.elapsed / len(loader)

    return run


def import_time(stmt: str) -> float:
    code = f"import time; t=time.perf_counter(); {stmt}; print(time.perf_counter()-t)"
    runs = [float(subprocess.check_output([sys.executable, "-c", code], text=True)) for _ in range(3)]
    return statistics.median(runs)


def main() -> None:
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    loader = make_loader()
    variants = {
        "plain PyTorch loop": plain,
        "fulmen": framework_run("fulmen", log=False),
        "fulmen + self.log every step": framework_run("fulmen", log=True),
    }
    try:
        importlib.import_module("lightning.pytorch")
        variants["Lightning 2.x"] = framework_run("lightning.pytorch", log=False)
        variants["Lightning 2.x + self.log every step"] = framework_run("lightning.pytorch", log=True)
    except ImportError:
        pass
    times: dict[str, list[float]] = {name: [] for name in variants}
    for fn in variants.values():  # warm-up
        fn(loader)
    for _ in range(REPEATS):  # interleaved repeats
        for name, fn in variants.items():
            times[name].append(fn(loader))
    base = statistics.median(times["plain PyTorch loop"])
    print(f"{'variant':40s} {'us/step':>10s} {'overhead':>10s}")
    for name, values in times.items():
        med = statistics.median(values)
        print(f"{name:40s} {med * 1e6:10.1f} {100 * (med / base - 1):9.1f}%")
    t_torch = import_time("import torch")
    t_fulmen = import_time("import fulmen")
    print(f"\n{'import':40s} {'seconds':>10s}")
    print(f"{'import torch':40s} {t_torch:10.3f}")
    print(f"{'import fulmen (includes torch)':40s} {t_fulmen:10.3f}  (+{t_fulmen - t_torch:.3f} s)")


if __name__ == "__main__":
    main()
