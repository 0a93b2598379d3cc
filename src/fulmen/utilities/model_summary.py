"""A table of a module's layers and parameter counts (printed by the ModelSummary callback)."""

from __future__ import annotations

from typing import Any

import torch


def _human(n: float) -> str:
    for unit in ("", "K", "M", "B", "T"):
        if abs(n) < 1000:
            return f"{n:.1f} {unit}".strip() if unit else f"{int(n)}"
        n /= 1000.0
    return f"{n:.1f} P"


class ModelSummaryTable:
    """Layers down to ``max_depth`` with type, parameter count and train/eval mode."""

    def __init__(self, model: torch.nn.Module, max_depth: int = 1) -> None:
        if not isinstance(max_depth, int) or max_depth < -1:
            raise ValueError(f"max_depth={max_depth!r} must be an int >= -1 (-1 shows every layer).")
        self.model = model
        self.max_depth = max_depth
        self.rows: list[tuple[str, str, int, str]] = []
        if max_depth != 0:
            for name, mod in model.named_modules():
                if not name:
                    continue
                depth = name.count(".") + 1
                if max_depth != -1 and depth > max_depth:
                    continue
                n = sum(p.numel() for p in mod.parameters())
                self.rows.append((name, type(mod).__name__, n, "train" if mod.training else "eval"))

    @property
    def total_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def trainable_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters() if p.requires_grad)

    @property
    def model_size_mb(self) -> float:
        size = sum(p.numel() * p.element_size() for p in self.model.parameters())
        size += sum(b.numel() * b.element_size() for b in self.model.buffers())
        return size / 1e6

    def __str__(self) -> str:
        header = ("", "Name", "Type", "Params", "Mode")
        body = [(str(i), n, t, _human(p), m) for i, (n, t, p, m) in enumerate(self.rows)]
        widths = [max(len(r[c]) for r in [header, *body]) for c in range(5)]
        fmt = " | ".join("{:<" + str(w) + "}" for w in widths)
        lines = [fmt.format(*header), "-" * (sum(widths) + 3 * 4)]
        lines += [fmt.format(*r) for r in body]
        lines.append("-" * (sum(widths) + 3 * 4))
        trainable = self.trainable_parameters
        total = self.total_parameters
        lines += [
            f"{_human(trainable):<10} Trainable params",
            f"{_human(total - trainable):<10} Non-trainable params",
            f"{_human(total):<10} Total params",
            f"{self.model_size_mb:<10.3f} Total estimated model params size (MB)",
        ]
        return "\n".join(lines)


def summarize(model: torch.nn.Module, max_depth: int = 1, **_: Any) -> ModelSummaryTable:
    return ModelSummaryTable(model, max_depth=max_depth)
