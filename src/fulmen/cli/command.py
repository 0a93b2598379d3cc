"""The ``fulmen`` console script (``main``): ``fit`` / ``validate`` / ``test`` / ``predict`` / ``tune`` through
LightningCLI (the bundled digits demo when no model is given), ``plot`` and ``consolidate``."""

from __future__ import annotations

import sys

from fulmen.cli.lightning_cli import _ARGS_ARE_THE_COMMAND_LINE, LightningCLI
from fulmen.utilities.curves import plot_run

_DEMO_MODEL = "fulmen.demos.digits.DigitsClassifier"
_DEMO_DATA = "fulmen.demos.digits.DigitsDataModule"


def main(argv: list[str] | None = None) -> None:
    """The ``fulmen`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["consolidate"]:
        # --no-weights-only: a trusted directory whose hyperparameters hold objects (as upgrade_checkpoint takes it)
        trusted = "--no-weights-only" in argv
        argv = [a for a in argv if a != "--no-weights-only"]
        if len(argv) != 3:
            raise SystemExit("usage: fulmen consolidate SHARDED_CHECKPOINT_DIR OUTPUT.ckpt [--no-weights-only]")
        from fulmen.checkpoint.sharded import consolidate

        checkpoint = consolidate(argv[1], argv[2], weights_only=not trusted)
        print(f"Wrote {argv[2]}: {len(checkpoint.get('state_dict', {}))} tensors of the model, "
              f"{len(checkpoint.get('optimizer_states', []))} optimizer state(s), from {argv[1]}.")  # fmt: skip
        return
    if argv[:1] == ["plot"]:
        if len(argv) != 2:
            raise SystemExit("usage: fulmen plot LOGDIR")
        path = plot_run(argv[1])
        print(path if path else f"No metrics (or no matplotlib) to plot in {argv[1]}.")
        return
    if argv[:1] in (["fit"], ["tune"]) and not any(
        a == "--model" or a.startswith(("--model=", "--model.", "--config", "-c")) for a in argv
    ):
        argv += ["--model", _DEMO_MODEL]
        if not any(a.startswith("--data") for a in argv):
            argv += ["--data", _DEMO_DATA]
        if not any(a.startswith("--trainer.max_epochs") for a in argv):
            argv += ["--trainer.max_epochs", "20"]
        # on stderr: `fulmen fit --print_config > cfg.yaml` must leave a config that `--config cfg.yaml` reads
        print(f"No --model given: the bundled digits demo (fulmen {argv[0]} --help for options).", file=sys.stderr)
    # the CLI reads the command line as rewritten (the demo's model added), as if it had been typed
    token = _ARGS_ARE_THE_COMMAND_LINE.set(True)
    try:
        LightningCLI(args=argv)
    finally:
        _ARGS_ARE_THE_COMMAND_LINE.reset(token)
