"""Write ``lightning_suite_known_failures.txt`` from a peer run's ``outcomes.tsv``.

    ../shared/peer/run.sh                      # lenient mode, the 39 files
    python tests/compat/update_known_failures.py /tmp/fulmen-peer/out/lenient/outcomes.tsv

Every test that Lightning passes and fulmen does not gets one line: ``<file>::<test id>`` and a reason, one of
``internal: <what it reaches>`` (private attributes, internal modules, mock targets inside Lightning),
``deliberate: <why>`` (listed in ``DELIBERATE`` below, and in docs/compatibility.md) or ``not yet: <what the
test saw>``. Tests that also fail under real Lightning are not listed (the peer run's reference numbers count
those as not passing)."""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

HERE = Path(__file__).parent

# test-id patterns fulmen fails on purpose: the reason is in docs/compatibility.md
DELIBERATE = {
    r"test_csv::test_manual_versioning_file_exists": "fulmen never deletes an earlier run's logs in a reused "
    "version directory (Lightning empties it)",
    r"test_tqdm_progress_bar::test_tqdm_progress_bar_correct_value_epoch_end": "the progress bar reads "
    "metrics at most ten times a second (each read is a host-device sync), not at every batch",
    r"test_datamodules::test_dm_init_from_datasets_dataloaders": "from_datasets pins memory only where a GPU "
    "exists (pinning on a CPU-only machine only warns)",
    r"test_model_checkpoint::test_model_checkpoint_save_last_as_link_not_local": "save_last='link' on a store "
    "without links writes a copy instead of failing",
    r"test_hooks::test_trainer_model_hook_system_fit(\[|_no_val_and_resume)": "checkpoints carry Lightning's "
    "format version (pytorch-lightning_version 2.6.6, so Lightning loads them), not fulmen's version; the hook "
    "order itself matches",
    r"test_cli::test_lightning_cli_load_from_checkpoint_dependency_injection": "the CLI records its own "
    "instantiator's name (fulmen.cli.instantiate_module; Lightning's name loads too)",
    r"test_cli::test_lightning_cli_(print_config|single_arg_callback)": "configs name fulmen's classes and "
    "version (fulmen.callbacks.X, # fulmen==X), not lightning.pytorch's",
    r"test_restore::test_restarting_mid_epoch_raises_warning": "fulmen resumes mid-epoch exactly (the batches "
    "seen are skipped in the same order), so it does not warn that such a resume is unreliable",
    r"test_scale_batch_size::test_error_on_dataloader_passed_to_fit": "the batch-size finder rebuilds "
    "dataloaders passed to fit instead of refusing them",
    r"test_hparams::test_save_hyperparameters_ignore_under_composition": "a module's hparams hold its own "
    "__init__ arguments, not those of the module that builds it",
    r"test_hparams::test_save_hparams_to_yaml_warning": "values YAML cannot hold are written as their repr, "
    "not dropped",
    r"test_hparams::test_hparams_pickle_warning": "objects among the hyperparameters stay in hparams and are "
    "left out of the checkpoint, instead of being removed from hparams",
}

# the three tests that fail under Lightning too here (packages not installed): not listed
FAIL_UNDER_LIGHTNING = {
    "test_hparams::test_model_save_hyper_parameters_interpolation_with_hydra",  # hydra
    "test_hparams::test_save_hparams_to_yaml",  # omegaconf
    "test_cli::test_lightning_cli_jsonnet",  # jsonnet
}

# signs that a failure comes from reaching into Lightning's internals
INTERNAL = [
    (r"has no attribute '(_\w+)'", "private attribute {0}"),
    (r"does not have the attribute '(_\w+)'", "mock target {0}"),
    (r"'(TrainingEpochLoop|FitLoop|EvaluationLoop|PredictionLoop|_FitLoop)' object has no attribute '(\w+)'",
     "loop internals {0}.{1}"),
    (r"module '([\w.]+)' has no attribute '(\w+)'", "internal module path {0}.{1}"),
    (r"No module named '([\w.]+)'.*fulmen has no module", "internal module {0}"),
    (r"peer-missing: ([\w.]*\._\w+)", "private name {0}"),
    (r"peer-missing: (lightning\.pytorch\.(?:trainer\.connectors|loops|core\.optimizer\._|utilities\.imports)"
     r"[\w.]*)", "internal name {0}"),
    (r"lightning\.fabric\.", "a lightning.fabric object"),
]


def classify(test: str, message: str) -> str:
    for pattern, reason in DELIBERATE.items():
        if re.search(pattern, test):
            return f"deliberate: {reason}"
    for pattern, reason in INTERNAL:
        match = re.search(pattern, message)
        if match:
            return "internal: " + reason.format(*match.groups())
    first = " ".join(message.split())[:160] or "no message"
    return f"not yet: {first}"


def main(outcomes: str) -> None:
    lines = []
    with open(outcomes, newline="") as f:
        for row in csv.reader(f, delimiter="\t"):
            if len(row) < 3 or row[2] not in ("failed", "error"):
                continue
            file, test, _, message = (row + [""])[:4]
            if test in FAIL_UNDER_LIGHTNING:
                continue
            lines.append(f"{file}::{test.split('::', 1)[-1]}\t{classify(test, message)}")
    target = HERE / "lightning_suite_known_failures.txt"
    header = ("# Lightning 2.6.5 tests (../shared/peer, lenient mode) that pass under Lightning and not under fulmen.\n"
              "# <file>::<test id>\\t<internal|deliberate|not yet>: <why>. Regenerate with update_known_failures.py.\n")
    target.write_text(header + "\n".join(sorted(lines)) + "\n")
    kinds = {k: sum(1 for line in lines if line.split("\t")[1].startswith(k)) for k in ("internal", "deliberate", "not yet")}
    print(f"{len(lines)} entries: {kinds}")


if __name__ == "__main__":
    main(sys.argv[1])
