"""Training curves from a run's logs: ``fulmen plot LOGDIR`` and the ``curves.png`` the CLI writes after fit."""

from __future__ import annotations

import os


def _read_metrics(log_dir: str) -> dict[str, list[tuple[int, float]]]:
    """Scalar series of a run: metrics.csv (CSVLogger) or TensorBoard event files."""
    import csv

    series: dict[str, list[tuple[int, float]]] = {}
    csv_path = os.path.join(log_dir, "metrics.csv")
    if os.path.exists(csv_path):
        with open(csv_path) as f:
            for row in csv.DictReader(f):
                step = int(row.get("step") or 0)
                for key, value in row.items():
                    if key in ("step", "epoch", "hp_metric") or value in (None, ""):
                        continue
                    series.setdefault(key, []).append((step, float(value)))
        return series
    if any(name.startswith("events.out.tfevents") for name in os.listdir(log_dir)):
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        acc = EventAccumulator(log_dir)
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            if tag not in ("epoch", "hp_metric"):
                series[tag] = [(e.step, e.value) for e in acc.Scalars(tag)]
    return series


def plot_run(log_dir: str) -> str | None:
    """Write ``curves.png`` (training and validation metrics over steps) into ``log_dir``; needs matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    if not os.path.isdir(log_dir):
        raise FileNotFoundError(f"fulmen plot: {log_dir!r} is not a directory.")
    series = _read_metrics(log_dir)
    if not series:
        return None
    groups: dict[str, list[str]] = {}
    for key in sorted(series):
        base = key.removeprefix("train_").removeprefix("val_").removesuffix("_step").removesuffix("_epoch")
        groups.setdefault(base, []).append(key)
    fig, axes = plt.subplots(len(groups), 1, figsize=(7, 2.6 * len(groups)), squeeze=False)
    for ax, (name, keys) in zip(axes[:, 0], groups.items()):
        for key in keys:
            steps, values = zip(*series[key])
            ax.plot(steps, values, label=key, marker="o" if len(steps) < 30 else None, markersize=3)
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.legend()
    fig.tight_layout()
    path = os.path.join(log_dir, "curves.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
