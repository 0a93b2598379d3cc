"""A differential fuzzer: random small runs under fulmen and under Lightning 2.6.6, compared.

    python tests/compat/fuzz.py                    # 200 cases from seed 0, a line per divergence, then counts
    python tests/compat/fuzz.py --cases 3000 --seed 7 --case-limit 60   # a case over 60 s per framework stops
    python tests/compat/fuzz.py --case 41          # one case: its spec and both outcomes in full
    python tests/compat/fuzz.py --all              # also the divergences allowlisted in KNOWN

Test files compare what their authors thought of; this generates what nobody wrote down. Each case is drawn
from a seeded generator (``generate(seed)``): Trainer flags (limits as integers and fractions,
``val_check_interval``, ``check_val_every_n_epoch``, accumulation, ``max_steps`` / ``max_epochs`` / ``min_*``,
precision, gradient clipping, ``overfit_batches``, ``num_sanity_val_steps``,
``reload_dataloaders_every_n_epochs``, ``inference_mode``), data (sized or iterable datasets, several
validation loaders as a list or a dict, a ``CombinedLoader`` in each mode, samplers with ``set_epoch``), the
module (a batch hook returning -1, steps with and without ``dataloader_idx``, manual optimization, several
optimizers, schedulers with each interval and frequency, ``self.log`` with its options), callbacks (early
stopping, checkpointing) and, now and then, an invalid value of one flag.

The same case runs once per framework in a fresh working directory (``run_case``), from the same seed, and the
outcome records: every hook call with its arguments' shapes, the warnings (category and text), the exception
(class and text), the progress counters, ``callback_metrics``, learning rates, weights, and the files written
(checkpoint names and keys, metrics.csv). ``compare`` lists what differs. ``KNOWN`` holds the deliberate
differences, each a row in docs/compatibility.md; everything else is a bug to fix.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib
import io
import json
import logging
import math
import os
import random
import re
import signal
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler

FRAMEWORKS = ("lightning.pytorch", "fulmen")

# (aspect, pattern) -> why: a divergence whose "aspect: text" line matches is deliberate (docs/compatibility.md)
KNOWN: dict[tuple[str, str], str] = {
    ("error text", ""): "fulmen's own messages for refused input (the argument, the value, what is allowed, how to "
    "fix it); the exception's class is Lightning's or a subclass of it, so `except` clauses catch it",
}

# Deliberate too, for the cases a predicate picks: (aspect, pattern, predicate on the case) -> why.
KNOWN_WHEN: list[tuple[str, str, Any, str]] = [
    ("", "", lambda c: tuple(c["invalid"] or ()) in (("accumulate_grad_batches", 1.5), ("check_val_every_n_epoch", 0)),
     "a flag value that cannot work is refused when the Trainer is made (Lightning takes it, and fails in fit "
     "when it is first used, or not at all when that code never runs): the run differs in everything after"),
    ("", r"^(lrs|weights|hooks|callback_metrics)", lambda c: _iterable_ends_before_its_limit(c),
     "an iterable training loader that ends before an int limit_train_batches: its last batch is the epoch's last "
     "(Lightning keeps is_last_batch False there, so the epoch's scheduler step and an unfinished accumulation "
     "window's step are skipped)"),
]


def _iterable_ends_before_its_limit(case: dict[str, Any]) -> bool:
    data, limit = case["data"], case["flags"]["limit_train_batches"]
    if data["train"] != "iterable" or not isinstance(limit, int):
        return False
    return limit > math.ceil(data["n_train"] / data["batch_size"])

# Divergences found and not fixed yet: not deliberate, each to be fixed (the CI slice tolerates them so that it
# guards everything else). (aspect, pattern, predicate on the case) -> what differs.
PENDING: list[tuple[str, str, Any, str]] = []

# Warnings both frameworks may or may not give whose text is about the machine, not the run.
_NOISE = re.compile(
    r"GPU available|TPU available|HPU available|does not have many workers|num_workers|LitLogger|litlogger|"
    r"tensorboardX|`isinstance\(treespec|The `srun` command|Checkpoint directory .* exists and is not empty|"
    r"torch.cuda.amp|Consider setting `persistent_workers|You are using a CUDA device|weights_only"
)


# ---- cases -----------------------------------------------------------------------------------------------------


def _pick(rng: random.Random, *options: Any, weights: list[float] | None = None) -> Any:
    return rng.choices(options, weights=weights)[0]


def generate(seed: int) -> dict[str, Any]:
    """The case of ``seed``: plain data (JSON), so a divergence can be replayed with ``--case``."""
    rng = random.Random(seed)
    n_train = _pick(rng, 4, 6, 8, 10)
    data = {
        "train": _pick(rng, "sized", "iterable", "iterable_len", "combined", weights=[6, 1, 1, 2]),
        "combined_mode": _pick(rng, "max_size_cycle", "min_size", "max_size", "sequential"),
        "n_train": n_train,
        "n_val": _pick(rng, 2, 3, 5),
        "val": _pick(rng, "none", "one", "list", "dict", "combined", weights=[1, 6, 2, 1, 1]),
        "val_combined_mode": _pick(rng, "max_size_cycle", "min_size", "max_size", "sequential"),
        "batch_size": _pick(rng, 2, 3, 4),
        "shuffle": rng.random() < 0.3,
        "epoch_sampler": rng.random() < 0.2,
    }
    flags: dict[str, Any] = {
        "max_epochs": _pick(rng, 1, 2, 3, None, weights=[3, 4, 2, 1]),
        "max_steps": _pick(rng, -1, 3, 7, weights=[6, 1, 1]),
        "limit_train_batches": _pick(rng, None, 1.0, 0.5, 3, 2, weights=[5, 1, 1, 1, 1]),
        "limit_val_batches": _pick(rng, None, 1.0, 0.5, 2, 0, weights=[5, 1, 1, 1, 1]),
        "val_check_interval": _pick(rng, None, 1.0, 0.5, 2, 3, weights=[6, 1, 1, 1, 1]),
        "check_val_every_n_epoch": _pick(rng, 1, 2, None, weights=[6, 2, 1]),
        "accumulate_grad_batches": _pick(rng, 1, 2, 3, weights=[5, 2, 1]),
        "num_sanity_val_steps": _pick(rng, None, 0, 1, -1, weights=[5, 1, 1, 1]),
        "precision": _pick(rng, None, "32-true", "bf16-mixed", "64-true", weights=[6, 1, 1, 1]),
        "gradient_clip_val": _pick(rng, None, 0.5, weights=[3, 1]),
        "gradient_clip_algorithm": _pick(rng, None, "norm", "value"),
        "overfit_batches": _pick(rng, 0.0, 1, 0.5, weights=[8, 1, 1]),
        "reload_dataloaders_every_n_epochs": _pick(rng, 0, 1, weights=[4, 1]),
        "inference_mode": _pick(rng, True, False),
        "min_epochs": _pick(rng, None, 2, weights=[6, 1]),
        "min_steps": _pick(rng, None, 5, weights=[8, 1]),
    }
    if flags["max_epochs"] is None and flags["max_steps"] == -1:
        flags["max_steps"] = 6  # the default max_epochs of 1000 would run for minutes
    if flags["val_check_interval"] is not None and flags["check_val_every_n_epoch"] is None:
        pass  # an integer interval counted over epochs: a valid combination worth running
    manual = rng.random() < 0.15
    module = {
        "manual": manual,
        "optimizers": _pick(rng, 1, 2, weights=[4, 1]),
        "scheduler": _pick(rng, None, "epoch", "step", "plateau", weights=[3, 2, 2, 1]),
        "scheduler_frequency": _pick(rng, 1, 2),
        "skip_at": _pick(rng, None, 1, 2, weights=[6, 1, 1]),  # on_train_batch_start returns -1 there
        "return_none_at": _pick(rng, None, 1, weights=[6, 1]),
        "val_takes_idx": _pick(rng, "auto", "yes", "no", weights=[4, 1, 1]),
        "log_on_step": _pick(rng, None, True, False),
        "log_on_epoch": _pick(rng, None, True, False),
        "log_prog_bar": rng.random() < 0.3,
        "log_reduce": _pick(rng, "mean", "max", "sum", weights=[4, 1, 1]),
        "log_epoch_end": rng.random() < 0.3,  # also logs from on_train_epoch_end
        "val_log_on_step": rng.random() < 0.2,
    }
    callbacks = {
        "early_stopping": _pick(rng, None, "val_loss", "train_loss", weights=[4, 1, 1]),
        "patience": _pick(rng, 0, 1, 2),
        "checkpoint": _pick(rng, None, "default", "val_loss", "every_step", weights=[2, 3, 2, 1]),
        "save_top_k": _pick(rng, 1, 2, -1),
        "save_last": _pick(rng, None, True, weights=[2, 1]),
    }
    invalid = None
    if rng.random() < 0.12:
        invalid = _pick(
            rng,
            ("max_epochs", -2), ("limit_train_batches", -1), ("limit_val_batches", 1.5), ("val_check_interval", -1),
            ("val_check_interval", 1.5), ("accumulate_grad_batches", 0), ("check_val_every_n_epoch", 0),
            ("num_sanity_val_steps", -2), ("precision", "17"), ("gradient_clip_algorithm", "sideways"),
            ("overfit_batches", -0.5), ("max_steps", -3), ("min_epochs", -1), ("reload_dataloaders_every_n_epochs", -1),
            ("limit_train_batches", "all"), ("val_check_interval", 0), ("accumulate_grad_batches", 1.5),
        )
    return {"seed": seed, "data": data, "flags": flags, "module": module, "callbacks": callbacks, "invalid": invalid}


# ---- one run ---------------------------------------------------------------------------------------------------


class _Numbers(Dataset):
    def __init__(self, n: int, offset: int) -> None:
        g = torch.Generator().manual_seed(1000 + offset)
        self.x = torch.randn(n, 4, generator=g)
        self.y = (self.x.sum(1, keepdim=True) > 0).float()

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


class _Stream(IterableDataset):
    def __init__(self, n: int, offset: int, with_len: bool) -> None:
        self.inner = _Numbers(n, offset)
        self.with_len = with_len

    def __iter__(self):  # type: ignore[no-untyped-def]
        return (self.inner[i] for i in range(len(self.inner)))

    def __len__(self) -> int:
        if not self.with_len:
            raise TypeError("no length")
        return len(self.inner)


class _EpochSampler(Sampler[int]):
    """A sampler with ``set_epoch``: both frameworks are expected to call it at every epoch start."""

    def __init__(self, n: int, calls: list[Any]) -> None:
        self.n, self.calls, self.epoch = n, calls, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.calls.append(("set_epoch", epoch))

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(torch.randperm(self.n, generator=torch.Generator().manual_seed(self.epoch)).tolist())

    def __len__(self) -> int:
        return self.n


def _describe(value: Any, depth: int = 0) -> Any:
    """An argument's shape: tensors by shape and dtype, containers by structure, numbers by value."""
    if isinstance(value, torch.Tensor):
        return f"T{tuple(value.shape)}:{str(value.dtype).replace('torch.', '')}"
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if isinstance(value, float):
        return round(value, 6)
    if depth > 2:
        return type(value).__name__
    if isinstance(value, dict):
        return {str(k): _describe(v, depth + 1) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [_describe(v, depth + 1) for v in value]
    name = type(value).__name__
    if "Trainer" in name:
        return "<trainer>"
    if isinstance(value, torch.nn.Module):
        return "<module>"
    if isinstance(value, torch.optim.Optimizer) or "Optimizer" in name:
        return "<optimizer>"
    if isinstance(value, BaseException):
        return f"<{name}>"
    return f"<{name}>"


def _hook_names(pl: Any) -> list[str]:
    return sorted(n for n in vars(pl.Callback) if n.startswith(("on_", "setup", "teardown")) and n != "on_exception")


def _build(pl: Any, case: dict[str, Any], calls: list[Any]) -> tuple[Any, dict[str, Any], list[Any]]:
    """The module, the fit arguments and the callbacks of ``case`` in framework ``pl``."""
    spec, data, cbs = case["module"], case["data"], case["callbacks"]
    bs = data["batch_size"]

    def loader(n: int, offset: int, kind: str = "sized") -> DataLoader:
        if kind == "iterable":
            return DataLoader(_Stream(n, offset, with_len=False), batch_size=bs)
        if kind == "iterable_len":
            return DataLoader(_Stream(n, offset, with_len=True), batch_size=bs)
        dataset = _Numbers(n, offset)
        if data["epoch_sampler"] and offset == 0:
            return DataLoader(dataset, batch_size=bs, sampler=_EpochSampler(n, calls))
        return DataLoader(dataset, batch_size=bs, shuffle=data["shuffle"] and offset == 0)

    def train_data() -> Any:
        if data["train"] == "combined":
            from_pl = importlib.import_module(pl.__name__ + ".utilities")
            mode = data["combined_mode"] if data["combined_mode"] != "sequential" else "max_size_cycle"
            return from_pl.CombinedLoader(
                {"a": loader(data["n_train"], 0), "b": loader(max(2, data["n_train"] // 2), 7)}, mode
            )
        return loader(data["n_train"], 0, data["train"])

    def val_data() -> Any:
        kind, n = data["val"], data["n_val"]
        if kind == "none":
            return None
        if kind == "one":
            return loader(n, 100)
        if kind == "list":
            return [loader(n, 100), loader(n + 1, 200)]
        if kind == "dict":
            return {"first": loader(n, 100), "second": loader(n + 1, 200)}
        from_pl = importlib.import_module(pl.__name__ + ".utilities")
        return from_pl.CombinedLoader([loader(n, 100), loader(n + 1, 200)], data["val_combined_mode"])

    several_val = data["val"] in ("list", "dict") or (
        data["val"] == "combined" and data["val_combined_mode"] == "sequential"
    )
    takes_idx = spec["val_takes_idx"] == "yes" or (spec["val_takes_idx"] == "auto" and several_val)

    def unpack(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(batch, dict):
            batch = batch["a"]
        if isinstance(batch, list) and len(batch) == 2 and isinstance(batch[0], list):
            batch = batch[0]  # a combined evaluation batch: one batch per loader
        return batch[0], batch[1]

    log_kwargs = {"prog_bar": spec["log_prog_bar"], "reduce_fx": spec["log_reduce"]}
    if spec["log_on_step"] is not None:
        log_kwargs["on_step"] = spec["log_on_step"]
    if spec["log_on_epoch"] is not None:
        log_kwargs["on_epoch"] = spec["log_on_epoch"]

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(case["seed"])
            self.net = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1))
            self.head = torch.nn.Linear(4, 1)
            self.automatic_optimization = not spec["manual"]

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x) + self.head(x)

        def _loss(self, batch: Any) -> torch.Tensor:
            x, y = unpack(batch)
            return torch.nn.functional.binary_cross_entropy_with_logits(self(x.to(self.dtype)), y.to(self.dtype))

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = self._loss(batch)
            self.log("train_loss", loss, **log_kwargs)
            if spec["manual"]:
                optimizers = self.optimizers()
                for opt in optimizers if isinstance(optimizers, list) else [optimizers]:
                    opt.zero_grad()
                    self.manual_backward(loss, retain_graph=True)
                    opt.step()
                return None
            if spec["return_none_at"] is not None and batch_idx == spec["return_none_at"]:
                return None
            return loss

        def on_train_batch_start(self, batch: Any, batch_idx: int) -> Any:
            calls.append(("module.on_train_batch_start", batch_idx))
            if spec["skip_at"] is not None and batch_idx == spec["skip_at"]:
                return -1
            return None

        def on_train_epoch_end(self) -> None:
            if spec["log_epoch_end"]:
                self.log("epoch_end_value", float(self.current_epoch))

        def configure_optimizers(self) -> Any:
            opts = [torch.optim.SGD(self.net.parameters(), lr=0.1)]
            if spec["optimizers"] == 2:
                opts.append(torch.optim.Adam(self.head.parameters(), lr=0.01))
            else:
                opts[0].add_param_group({"params": self.head.parameters()})
            kind = spec["scheduler"]
            if kind is None or spec["manual"]:
                return opts if len(opts) > 1 else opts[0]
            schedulers = []
            for opt in opts:
                if kind == "plateau":
                    sched: Any = {
                        "scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0),
                        "monitor": "train_loss",
                        "interval": "epoch",
                        "frequency": spec["scheduler_frequency"],
                    }
                else:
                    sched = {
                        "scheduler": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5),
                        "interval": kind,
                        "frequency": spec["scheduler_frequency"],
                    }
                schedulers.append(sched)
            return opts, schedulers

    if takes_idx:

        def validation_step(self: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            loss = self._loss(batch)
            self.log("val_loss", loss, on_step=spec["val_log_on_step"])

    else:

        def validation_step(self: Any, batch: Any, batch_idx: int) -> None:  # type: ignore[misc]
            loss = self._loss(batch)
            self.log("val_loss", loss, on_step=spec["val_log_on_step"])

    if data["val"] != "none":
        Module.validation_step = validation_step  # type: ignore[attr-defined]

    class Recorder(pl.Callback):
        """Every callback hook, in order, with its arguments' shapes."""

    def recorder_hook(name: str) -> Any:
        def hook(self: Any, *args: Any, **kwargs: Any) -> None:
            calls.append((name, _describe(args[2:]), _describe(kwargs)))

        return hook

    for name in _hook_names(pl):
        setattr(Recorder, name, recorder_hook(name))

    callbacks: list[Any] = [Recorder()]
    if cbs["early_stopping"]:
        callbacks.append(pl.callbacks.EarlyStopping(monitor=cbs["early_stopping"], patience=cbs["patience"]))
    if cbs["checkpoint"] == "val_loss":
        callbacks.append(
            pl.callbacks.ModelCheckpoint(
                dirpath="ckpts", monitor="val_loss", save_top_k=cbs["save_top_k"], save_last=cbs["save_last"]
            )
        )
    elif cbs["checkpoint"] == "every_step":
        callbacks.append(
            pl.callbacks.ModelCheckpoint(
                dirpath="ckpts", every_n_train_steps=1, save_top_k=-1, save_last=cbs["save_last"]
            )
        )
    fit_kwargs = {"train_dataloaders": train_data(), "val_dataloaders": val_data()}
    return Module(), fit_kwargs, callbacks


def _trainer_kwargs(case: dict[str, Any]) -> dict[str, Any]:
    kwargs = {k: v for k, v in case["flags"].items() if v is not None}
    if case["invalid"] is not None:
        key, value = case["invalid"]
        kwargs[key] = value
    kwargs.update(
        accelerator="cpu", devices=1, enable_progress_bar=False, enable_model_summary=False, deterministic=True,
        logger=True, enable_checkpointing=case["callbacks"]["checkpoint"] is not None,
    )
    return kwargs


@dataclass
class Outcome:
    calls: list[Any] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error: str | None = None
    error_classes: list[str] = field(default_factory=list)  # the class and its bases: ``except X`` still works
    counters: dict[str, Any] = field(default_factory=dict)
    callback_metrics: dict[str, float] = field(default_factory=dict)
    lrs: list[list[float]] = field(default_factory=list)
    weights: dict[str, list[float]] = field(default_factory=dict)
    files: dict[str, Any] = field(default_factory=dict)


def _text(message: str) -> str:
    """A message with what differs between two runs of the same program taken out (paths, addresses)."""
    message = re.sub(r"/[^\s'\"]*/(fulmen|lightning)[^\s'\"]*", "<path>", message)
    message = re.sub(r"0x[0-9a-f]+", "0x?", message)
    message = message.replace("lightning.pytorch", "<pl>").replace("fulmen", "<pl>")
    message = message.replace("lightning_fabric", "<pl>").replace("lightning.fabric", "<pl>")
    return " ".join(message.split())


def run_case(case: dict[str, Any], framework: str) -> Outcome:
    pl = importlib.import_module(framework)
    out = Outcome()
    cwd = os.getcwd()
    environ = {k: v for k, v in os.environ.items() if k.startswith("PL_")}
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        os.chdir(tmp)
        quiet = [logging.getLogger(n) for n in ("lightning.pytorch", "lightning.fabric", "fulmen")]
        levels = [q.level for q in quiet]
        for q in quiet:
            q.setLevel(logging.ERROR)
        trainer = None
        try:
            pl.seed_everything(case["seed"], verbose=False)
            model, fit_kwargs, callbacks = _build(pl, case, out.calls)
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                trainer = pl.Trainer(callbacks=callbacks, default_root_dir=tmp, **_trainer_kwargs(case))
                trainer.fit(model, **fit_kwargs)
        except Exception as err:  # the outcome of a run, compared like the rest
            out.error = f"{type(err).__name__}: {_text(str(err))}"
            out.error_classes = [k.__name__ for k in type(err).__mro__]
        finally:
            for q, level in zip(quiet, levels):
                q.setLevel(level)
            if trainer is not None:
                _read_state(out, trainer, model)
            _read_files(out, Path(tmp))
            os.chdir(cwd)
            for key in [k for k in os.environ if k.startswith("PL_")]:
                del os.environ[key]
            os.environ.update(environ)
        for w in caught:
            text = _text(str(w.message))
            if not _NOISE.search(text) and w.category.__module__.split(".")[0] in ("builtins", "lightning", "fulmen"):
                out.warnings.append(f"{w.category.__name__}: {text}")
    out.warnings = sorted(set(out.warnings))
    return out


def _read_state(out: Outcome, trainer: Any, model: Any) -> None:
    out.counters = {
        "global_step": trainer.global_step,
        "current_epoch": trainer.current_epoch,
        "num_training_batches": _number(trainer.num_training_batches),
        "num_val_batches": [_number(n) for n in (trainer.num_val_batches or [])],
        "should_stop": bool(trainer.should_stop),
        "state": str(getattr(trainer.state.status, "value", trainer.state.status)),
    }
    out.callback_metrics = {k: round(float(v), 5) for k, v in sorted(trainer.callback_metrics.items())}
    out.lrs = [[round(g["lr"], 8) for g in opt.param_groups] for opt in trainer.optimizers]
    out.weights = {k: [round(x, 5) for x in v.detach().double().flatten().tolist()] for k, v in model.state_dict().items()}


def _number(n: Any) -> Any:
    return "inf" if isinstance(n, float) and math.isinf(n) else n


def _read_files(out: Outcome, root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        rel = re.sub(r"version_\d+", "version_N", str(path.relative_to(root)))
        rel = re.sub(r"events\.out\.tfevents\..*", "events.out.tfevents.*", rel)
        if path.suffix == ".ckpt":
            try:
                ckpt = torch.load(path, map_location="cpu", weights_only=False)
                out.files[rel] = {
                    "keys": sorted(ckpt),
                    "epoch": ckpt.get("epoch"),
                    "global_step": ckpt.get("global_step"),
                    "callbacks": sorted(re.sub(r"'dirpath': '[^']*'", "", k) for k in ckpt.get("callbacks", {})),
                }
            except Exception as err:
                out.files[rel] = f"unreadable: {type(err).__name__}"
        elif path.name == "metrics.csv":
            with path.open() as f:
                rows = list(csv.DictReader(f))
            out.files[rel] = [
                {k: (round(float(v), 5) if v not in ("", None) else None) for k, v in sorted(r.items())} for r in rows
            ]
        elif path.name == "hparams.yaml":
            out.files[rel] = path.read_text()
        else:
            out.files[rel] = "present"


# ---- comparing -------------------------------------------------------------------------------------------------


def _close(a: Any, b: Any, tol: float = 1e-4) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b)) or abs(a - b) <= tol * max(1.0, abs(a), abs(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k], tol) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y, tol) for x, y in zip(a, b))
    return a == b


def _first_difference(a: list[Any], b: list[Any]) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if not _close(x, y):
            return f"at {i}: {x!r} (Lightning) vs {y!r} (fulmen)"
    return f"length {len(a)} (Lightning) vs {len(b)} (fulmen); next: {(a[len(b):] or b[len(a):])[:2]!r}"


def compare(theirs: Outcome, ours: Outcome) -> list[str]:
    """Every aspect in which fulmen's outcome differs from Lightning's, one line each."""
    found: list[str] = []
    if (theirs.error is None) != (ours.error is None) or (
        theirs.error_classes and theirs.error_classes[0] not in ours.error_classes
    ):
        found.append(f"error: {theirs.error!r} (Lightning) vs {ours.error!r} (fulmen)")
    elif theirs.error != ours.error:
        found.append(f"error text: {theirs.error!r} (Lightning) vs {ours.error!r} (fulmen)")
    same_end = (theirs.error is None) == (ours.error is None) and (
        theirs.error is None or theirs.error_classes[:1] == [] or theirs.error_classes[0] in ours.error_classes
    )  # runs that ended differently differ in their hooks and warnings too: the "error" line says it once
    if same_end and not _close(theirs.calls, ours.calls):
        found.append(f"hooks: {_first_difference(theirs.calls, ours.calls)}")
    only_theirs = sorted(set(theirs.warnings) - set(ours.warnings)) if same_end else []
    only_ours = sorted(set(ours.warnings) - set(theirs.warnings)) if same_end else []
    for w in only_theirs:
        found.append(f"warning missing: {w}")
    for w in only_ours:
        found.append(f"warning extra: {w}")
    if theirs.error is None and ours.error is None:
        for aspect in ("counters", "callback_metrics", "lrs", "weights"):
            a, b = getattr(theirs, aspect), getattr(ours, aspect)
            if not _close(a, b):
                if isinstance(a, dict) and isinstance(b, dict):
                    keys = sorted(set(a) | set(b))
                    diff = {k: (a.get(k), b.get(k)) for k in keys if not _close(a.get(k), b.get(k))}
                    found.append(f"{aspect}: {_clip(diff)}")
                else:
                    found.append(f"{aspect}: {_clip(a)} (Lightning) vs {_clip(b)} (fulmen)")
        if set(theirs.files) != set(ours.files):
            found.append(
                f"files: only Lightning {sorted(set(theirs.files) - set(ours.files))}, "
                f"only fulmen {sorted(set(ours.files) - set(theirs.files))}"
            )
        for name in sorted(set(theirs.files) & set(ours.files)):
            if not _close(theirs.files[name], ours.files[name]):
                found.append(f"file {name}: {_clip(theirs.files[name])} (Lightning) vs {_clip(ours.files[name])} (fulmen)")
    return found


def _clip(value: Any, size: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= size else text[:size] + "..."


def known(line: str, case: dict[str, Any] | None = None) -> str | None:
    """Why ``line`` is expected: a deliberate difference (``KNOWN``) or, given its case, an open one (``PENDING``)."""
    for (aspect, pattern), why in KNOWN.items():
        if line.startswith(aspect) and re.search(pattern, line):
            return why
    for aspect, pattern, applies, why in KNOWN_WHEN if case is not None else ():
        if line.startswith(aspect) and re.search(pattern, line) and applies(case):
            return why
    for aspect, pattern, applies, what in PENDING if case is not None else ():
        if line.startswith(aspect) and re.search(pattern, line) and applies(case):
            return f"open: {what}"
    return None


class CaseTimeout(BaseException):
    """A case ran over its time limit (a BaseException: the frameworks' error handling lets it through)."""


def _run_limited(case: dict[str, Any], framework: str, limit: float | None) -> Outcome:
    """``run_case`` stopped after ``limit`` seconds (SIGALRM; no limit where the platform has none)."""
    if not limit or not hasattr(signal, "SIGALRM"):
        return run_case(case, framework)

    def expire(signum: int, frame: Any) -> None:
        raise CaseTimeout(f"{framework} ran over {limit:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return run_case(case, framework)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def divergences(seed: int, limit: float | None = None) -> list[str]:
    """What differs between the two runs of case ``seed``; a run over ``limit`` seconds is a divergence of its
    own (``timeout: ...``): a hang or a run far slower than the other framework's is a finding too."""
    case = generate(seed)
    outcomes, stopped = [], []
    for framework in FRAMEWORKS:
        try:
            outcomes.append(_run_limited(case, framework, limit))
        except CaseTimeout as timeout:
            stopped.append(str(timeout))
    if len(stopped) == len(FRAMEWORKS):  # e.g. max_steps that no epoch reaches (every batch skipped by -1)
        BOTH_OVER_LIMIT.append(seed)
        return []
    if stopped:
        return [f"timeout: {', '.join(stopped)}"]
    return compare(*outcomes)


BOTH_OVER_LIMIT: list[int] = []  # cases that ran over the limit under both frameworks: not compared


def unexpected(seed: int) -> list[str]:
    """The divergences of case ``seed`` that are neither deliberate nor already known to be open."""
    case = generate(seed)
    return [line for line in divergences(seed) if known(line, case) is None]


# ---- command line ----------------------------------------------------------------------------------------------


def _aspect(line: str) -> str:
    head = line.split(":", 1)[0]
    if head.startswith("warning"):
        return line[: line.find(":", line.find(":") + 1)]
    if head == "error":
        return "error: " + re.sub(r"'[^']*'", "'...'", line.split(" vs ")[0])[:80]
    return head


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0, help="the first case's seed; case i has seed + i")
    parser.add_argument("--case", type=int, default=None, help="one case, shown in full")
    parser.add_argument("--all", action="store_true", help="also show allowlisted divergences")
    parser.add_argument("--strict", action="store_true", help="exit with status 1 when a divergence is unexpected")
    parser.add_argument("--case-limit", type=float, default=120.0,
                        help="seconds a case may run under each framework (0: no limit); over it is a divergence")  # fmt: skip
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    if args.case is not None:
        case = generate(args.case)
        print(json.dumps(case, indent=1))
        outcomes = [run_case(case, f) for f in FRAMEWORKS]
        for name, outcome in zip(FRAMEWORKS, outcomes):
            print(f"--- {name}")
            print(json.dumps({k: v for k, v in vars(outcome).items() if k != "weights"}, indent=1, default=str)[:20000])
        for line in compare(*outcomes):
            print("DIVERGENCE", line)
        return 0
    tally: dict[str, list[int]] = {}
    diverging = 0
    for seed in range(args.seed, args.seed + args.cases):
        case = generate(seed)
        lines = [ln for ln in divergences(seed, args.case_limit) if args.all or known(ln, case) is None]
        diverging += bool(lines)
        for line in lines:
            print(f"case {seed}: {line}", flush=True)
            tally.setdefault(_aspect(line), []).append(seed)
    print(f"\n{args.cases} cases, {diverging} diverging")
    if BOTH_OVER_LIMIT:
        print(f"{len(BOTH_OVER_LIMIT)} ran over {args.case_limit:g} s under both frameworks, not compared "
              f"(cases {BOTH_OVER_LIMIT[:6]})")  # fmt: skip
    for aspect, seeds in sorted(tally.items(), key=lambda kv: -len(kv[1])):
        print(f"{len(seeds):5d}  {aspect}  (cases {seeds[:6]})")
    return 1 if args.strict and diverging and not args.all else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.exit(main(sys.argv[1:]))
