"""Libraries built on Lightning, run through their own test suites under Lightning and under fulmen.

A library that imports ``lightning.pytorch`` / ``pytorch_lightning`` itself runs on fulmen unchanged through
``python -m fulmen.as_lightning``. This script checks that on real libraries: it runs the parts of their own
test suites that train through the ``Trainer``, once under Lightning 2.6.6 (the baseline) and once under
fulmen's alias, and prints a table per library plus every test whose outcome differs.

How to run (from the repository root)::

    python tests/compat/libraries.py                           # every library, both modes
    python tests/compat/libraries.py optuna torchmetrics       # some libraries (names or prefixes)
    python tests/compat/libraries.py --mode fulmen -k pruning  # one mode, the tests pytest -k selects
    python tests/compat/libraries.py --setup-only              # venv and test files only
    python tests/compat/libraries.py --reuse-baseline          # Lightning's outcomes from the last run

How long: the first run installs the libraries (a minute or two). Then, on 2 CPU cores shared with other work,
optuna-integration takes 4 to 8 minutes per mode (its DDP tests start two processes with ``ddp_spawn``, four
times), torchmetrics under a minute per mode, finetuning-scheduler 1 to 2 minutes per mode, scvi-tools about a minute per mode:
about 10 to 25 minutes in all. ``--mode fulmen`` halves it once the baseline is known.

What it sets up:

- a virtual environment (``--venv``, default ``/tmp/libvenv``) made with ``--system-site-packages``, so it sees
  this environment's torch, Lightning and fulmen (``pip install -e .``) without touching them; the libraries are
  installed into it with a constraints file pinning ``torch`` (the installed version), ``lightning==2.6.6``
  and ``pytorch-lightning==2.6.6``, so pip never upgrades either.
- the libraries' test files, taken with ``git archive`` from a local git directory of each library's
  repository: ``/work/.mirror/<owner>+<name>/repo`` as the session tool ``fetch github:<owner>/<name>`` leaves
  it, or any clone given with ``--repo NAME=GIT_DIR``. They are written under ``--work`` (default
  ``/tmp/libs``), never into this repository: the libraries' tests are their authors' code.
- fulmen mode runs ``python -m fulmen.as_lightning -m pytest ...`` with this checkout's ``src`` first on
  ``PYTHONPATH`` (the processes the tests start, DDP workers included, inherit the alias).

The chosen test files (those that train through the Trainer):

- **optuna-integration** (5.0.0, tests at the stored repository's HEAD, 5.0.0.dev: no 5.0.0 tag is stored):
  ``tests/pytorch_lightning/test_pytorch_lightning.py``, the whole Lightning part of the library: its
  ``PyTorchLightningPruningCallback`` reporting to an optuna trial from ``on_validation_end``, pruning a
  trial by raising from inside ``fit``, and the same across two ``ddp_spawn`` processes sharing an SQLite
  study (5 tests).
- **torchmetrics** (1.9.0, tag ``v1.9.0``): ``tests/integrations/test_lightning.py``, its Lightning
  integration: metrics and metric collections logged with ``self.log`` / ``self.log_dict``, reset at epoch
  ends, moved with the module's dtype and device, wrappers (classwise, min-max, multitask) (9 tests). The
  rest of torchmetrics' suite never imports Lightning.
- **finetuning-scheduler** (2.14.1, tests at the stored repository's HEAD, 2.14.0.dev0: no newer tag is
  stored): ``tests/test_finetuning_scheduler_callback.py``, the tests of its ``FinetuningScheduler`` callback,
  which thaws a module's layers phase by phase during ``fit`` and works closely with the Trainer's
  checkpointing, early stopping and optimizers (147 tests). Its FSDP and model-parallel files need GPUs. The
  library drives Lightning's private trainer objects (``trainer._checkpoint_connector``, ``trainer._results``,
  ``trainer._callback_connector``, ``trainer._accelerator_connector``) and loop state
  (``fit_loop.epoch_progress``, ``epoch_loop.global_step``), which fulmen has as views of its own state.

- **scvi-tools** (1.4.2, tag ``1.4.2``: the newest release that installs on Python 3.11): ``tests/train``, the tests of its training plans and callbacks on the
  Trainer: a ``TrainingPlan`` that logs ELBO components and reads ``trainer.current_epoch`` / ``max_epochs``
  for KL warm-up, its ``LoudEarlyStopping`` (a subclass of ``EarlyStopping``) and checkpoint callbacks reading
  ``callback_metrics`` and ``should_stop``, a progress bar of its own, and device arguments parsed with
  ``_AcceleratorConnector`` before a Trainer exists; and ``tests/model/test_scvi.py``, its main model trained,
  saved, loaded and queried through the Trainer (92 tests; here 21 of them fail under Lightning too, where the
  library reads ``rich.pretty`` without importing it, and 7 are skipped).

Forecasting and tabular libraries built on Lightning are left out on purpose: they are kept for an
independent check.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIGHTNING_VERSION = "2.6.6"


@dataclass(frozen=True)
class Library:
    name: str
    repo: str  # owner/name on GitHub
    ref: str  # tag or commit of the test files
    packages: tuple[str, ...]  # pip requirements of the library and of its tests
    archive: tuple[str, ...]  # paths taken from the repository
    cwd: str  # where pytest runs, relative to the extracted tree
    tests: tuple[str, ...]  # pytest arguments naming the chosen tests, relative to cwd
    pythonpath: tuple[str, ...] = ()  # relative to the extracted tree
    pytest_args: tuple[str, ...] = field(default=())


LIBRARIES = (
    Library(
        name="optuna-integration",
        repo="optuna/optuna-integration",
        ref="HEAD",
        packages=("optuna-integration==5.0.0", "optuna", "fakeredis", "sqlalchemy"),
        archive=("tests/__init__.py", "tests/pytorch_lightning"),
        cwd=".",
        tests=("tests/pytorch_lightning/test_pytorch_lightning.py",),
    ),
    Library(
        name="torchmetrics",
        repo="Lightning-AI/torchmetrics",
        ref="v1.9.0",
        packages=("torchmetrics==1.9.0",),
        archive=("tests/integrations",),
        cwd="tests",
        tests=("integrations/test_lightning.py",),
        pythonpath=("tests",),  # the tests import ``integrations.lightning.boring_model``
    ),
    Library(
        name="finetuning-scheduler",
        repo="speediedan/finetuning-scheduler",
        ref="HEAD",
        packages=("finetuning-scheduler==2.14.1",),
        archive=("tests", "pyproject.toml"),
        cwd=".",
        tests=("tests/test_finetuning_scheduler_callback.py",),
        pythonpath=("tests",),  # as its pyproject's ``pythonpath = "tests"``
    ),
    Library(
        name="scvi-tools",
        repo="scverse/scvi-tools",
        ref="1.4.2",
        packages=("scvi-tools==1.4.2",),
        archive=("pyproject.toml", "tests/__init__.py", "tests/conftest.py", "tests/data", "tests/train", "tests/model"),
        cwd=".",
        tests=("tests/train", "tests/model/test_scvi.py"),
        pythonpath=(".",),  # the tests import ``tests.data.utils``
    ),
)


# -- set-up ------------------------------------------------------------------------------------------------
def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure_venv(venv: Path, libraries: list[Library]) -> None:
    python = venv_python(venv)
    if not python.exists():
        print(f"creating {venv} (--system-site-packages)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    import torch

    constraints = venv / "constraints.txt"
    constraints.write_text(
        f"torch=={torch.__version__.split('+')[0]}\nlightning=={LIGHTNING_VERSION}\n"
        f"pytorch-lightning=={LIGHTNING_VERSION}\n"
    )
    wanted = sorted({p for lib in libraries for p in lib.packages})
    probe = "import importlib.metadata as m, sys\nfor r in sys.argv[1:]:\n    n = r.split('==')[0]\n" \
        "    try: v = m.version(n)\n    except m.PackageNotFoundError: print(r); continue\n" \
        "    if '==' in r and v != r.split('==')[1]: print(r)\n"  # fmt: skip
    missing = subprocess.run([str(python), "-c", probe, *wanted], capture_output=True, text=True, check=True)
    todo = missing.stdout.split()
    if todo:
        print(f"installing into {venv}: {' '.join(todo)}", flush=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "-c", str(constraints), *todo], check=True)


def git_dir(lib: Library, given: dict[str, str], mirror: Path) -> Path:
    if lib.name in given:
        return Path(given[lib.name])
    path = mirror / lib.repo.replace("/", "+") / "repo"
    if not path.exists():
        raise SystemExit(
            f"{lib.name}: no git directory of {lib.repo} at {path}. Fetch it (session tool: fetch "
            f"github:{lib.repo}) or clone it and pass --repo {lib.name}=/path/to/clone/.git"
        )
    return path


def extract_tests(lib: Library, repo: Path, work: Path) -> Path:
    target = work / lib.name
    stamp = target / ".extracted"
    key = f"{repo}@{lib.ref}:{' '.join(lib.archive)}"
    if stamp.exists() and stamp.read_text() == key:
        return target
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    data = subprocess.run(
        ["git", f"--git-dir={repo}", "archive", lib.ref, *lib.archive], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(target, filter="data")
    commit = subprocess.run(
        ["git", f"--git-dir={repo}", "rev-parse", lib.ref], capture_output=True, text=True, check=True
    ).stdout.strip()
    (target / ".commit").write_text(commit + "\n")
    stamp.write_text(key)
    return target


# -- running -----------------------------------------------------------------------------------------------
def run_pytest(lib: Library, tree: Path, venv: Path, mode: str, extra: list[str], timeout: float) -> Path:
    """Run the library's chosen tests in ``mode`` ('lightning' or 'fulmen'); return the JUnit XML path."""
    report = tree / f"junit-{mode}.xml"
    report.unlink(missing_ok=True)
    env = os.environ.copy()
    paths = [str(tree / p) for p in lib.pythonpath]
    if mode == "fulmen":
        paths.insert(0, str(ROOT / "src"))
    env.setdefault("PYTHONHASHSEED", "0")
    prefix = ["-m", "fulmen.as_lightning"] if mode == "fulmen" else []
    # a plugin that records which Trainer the tests trained with, so the table shows they ran on fulmen
    (tree / "_which_trainer.py").write_text(_WHICH_TRAINER)
    paths.append(str(tree))
    env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [os.environ.get("PYTHONPATH")])])
    env["WHICH_TRAINER_FILE"] = str(tree / f"trainer-{mode}.txt")
    command = [
        str(venv_python(venv)), *prefix, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "_which_trainer",
        "-o", "addopts=", f"--junitxml={report}", *lib.pytest_args, *lib.tests, *extra,
    ]  # fmt: skip
    log = tree / f"pytest-{mode}.log"
    started = time.monotonic()
    print(f"[{lib.name}] {mode}: running (log: {log})", flush=True)
    with log.open("w") as out:
        try:
            subprocess.run(command, cwd=tree / lib.cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                           timeout=timeout, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            out.write(f"\n*** stopped after {timeout:.0f} s (--timeout)\n")
    print(f"[{lib.name}] {mode}: done in {time.monotonic() - started:.0f} s", flush=True)
    return report


_WHICH_TRAINER = """
import os, sys


def pytest_sessionfinish(session):
    names = ("lightning.pytorch", "pytorch_lightning")
    seen = [f"{n}.Trainer is {sys.modules[n].Trainer.__module__}" for n in names if n in sys.modules]
    with open(os.environ["WHICH_TRAINER_FILE"], "w") as out:
        out.write("; ".join(seen) or "no Lightning package imported")
"""


def which_trainer(tree: Path, mode: str) -> str:
    path = tree / f"trainer-{mode}.txt"
    return path.read_text() if path.exists() else "unknown (no record)"


def outcomes(report: Path) -> dict[str, tuple[str, str]]:
    """test id -> (outcome, first line of its message) from a JUnit XML report."""
    if not report.exists():
        return {}
    found: dict[str, tuple[str, str]] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, message = "passed", ""
        for child in case:
            if child.tag in _OUTCOME:
                outcome = _OUTCOME[child.tag]
                lines = (child.get("message") or child.text or "").strip().splitlines()
                message = lines[0][:160] if lines else ""
                break
        found[test] = (outcome, message)
    return found


_OUTCOME = {"failure": "failed", "error": "error", "skipped": "skipped"}


def counts(results: dict[str, tuple[str, str]]) -> tuple[int, int, int]:
    passed = sum(o == "passed" for o, _ in results.values())
    skipped = sum(o == "skipped" for o, _ in results.values())
    return passed, len(results) - passed - skipped, skipped


def differing(before: dict[str, tuple[str, str]], after: dict[str, tuple[str, str]]) -> list[str]:
    """Tests whose outcome differs between two runs (a test missing from one run differs too)."""
    return sorted(
        t for t in before.keys() | after.keys() if before.get(t, _MISSING)[0] != after.get(t, _MISSING)[0]
    )


_MISSING = ("missing", "")


def report_table(rows: dict[str, dict[str, dict[str, tuple[str, str]]]], modes: list[str]) -> None:
    both = len(modes) == 2
    head = f"{'library':<22}{'tests':>6}" + "".join(
        f" | {m + ': passed / failed / skipped':<36}" for m in modes
    )
    print("\n" + head + (" | differ" if both else ""))
    print("-" * (len(head) + (9 if both else 0)))
    for name, by_mode in rows.items():
        line = f"{name:<22}{max(len(by_mode[m]) for m in modes):>6}"
        for m in modes:
            p, f, s = counts(by_mode[m])
            line += f" | {f'{p} / {f} / {s}':<36}"
        print(line + (f" | {len(differing(*(by_mode[m] for m in modes)))}" if both else ""))
    if not both:
        return
    for name, by_mode in rows.items():
        before, after = (by_mode[m] for m in modes)
        tests = differing(before, after)
        if tests:
            print(f"\n{name}: outcomes that differ ({modes[0]} -> {modes[1]})")
        # a test file that failed to import under one mode: one line for its tests instead of one each
        uncollected = [t for t in tests if t not in after and any(_collects(e, t) for e in after)]
        for test in tests:
            if test in uncollected:
                continue
            (was, _), (now, message) = before.get(test, _MISSING), after.get(test, _MISSING)
            print(f"  {test}: {was} -> {now}" + (f"  [{message}]" if message else ""))
        for error in sorted({e for t in uncollected for e in after if _collects(e, t)}):
            n = sum(_collects(error, t) for t in uncollected)
            print(f"  {n} tests of {error} not run: it failed to import [{after[error][1]}]")


def _collects(entry: str, test: str) -> bool:
    """Whether ``entry`` is the collection error of the module that holds ``test``."""
    module = entry.split("::")[-1] if entry.startswith("::") else ""
    holder = test.split("::")[0]  # the module, or module.Class for a test method
    return bool(module) and (holder == module or holder.startswith(module + "."))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("libraries", nargs="*", help="library names or prefixes (default: all)")
    parser.add_argument("--mode", choices=("both", "lightning", "fulmen"), default="both")
    parser.add_argument("--venv", type=Path, default=Path("/tmp/libvenv"))
    parser.add_argument("--work", type=Path, default=Path("/tmp/libs"), help="where the test files go")
    parser.add_argument("--mirror", type=Path, default=Path("/work/.mirror"), help="fetched git directories")
    parser.add_argument("--repo", action="append", default=[], metavar="NAME=GIT_DIR")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per library and mode")
    parser.add_argument("--setup-only", action="store_true")
    parser.add_argument(
        "--reuse-baseline",
        action="store_true",
        help="read the last Lightning run's report instead of running it again",
    )
    parser.add_argument("--json", type=Path, help="also write the outcomes here")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression: only the tests it selects")
    parser.add_argument("--pytest", default="", help="more pytest arguments, as one string")
    args = parser.parse_args(argv)

    chosen = [lib for lib in LIBRARIES if not args.libraries or lib.name.startswith(tuple(args.libraries))]
    if not chosen:
        known = ", ".join(lib.name for lib in LIBRARIES)
        parser.error(f"no library matches {args.libraries!r}; known: {known}")
    given = dict(item.split("=", 1) for item in args.repo)
    ensure_venv(args.venv, chosen)
    trees = {lib.name: extract_tests(lib, git_dir(lib, given, args.mirror), args.work) for lib in chosen}
    if args.setup_only:
        for name, tree in trees.items():
            print(f"{name}: tests in {tree} (commit {(tree / '.commit').read_text().strip()})")
        return 0
    modes = ["lightning", "fulmen"] if args.mode == "both" else [args.mode]
    extra = (["-k", args.keyword] if args.keyword else []) + shlex.split(args.pytest)
    rows: dict[str, dict[str, dict[str, tuple[str, str]]]] = {}
    for lib in chosen:
        rows[lib.name] = {}
        for mode in modes:
            report = trees[lib.name] / f"junit-{mode}.xml"
            if not (mode == "lightning" and args.reuse_baseline and report.exists()):
                report = run_pytest(lib, trees[lib.name], args.venv, mode, extra, args.timeout)
            rows[lib.name][mode] = outcomes(report)
    report_table(rows, modes)
    print()
    for lib in chosen:
        for mode in modes:
            print(f"{lib.name}, {mode}: {which_trainer(trees[lib.name], mode)}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, sort_keys=True))
    if len(modes) == 2:
        return int(any(r["lightning"].get(t, ("",))[0] == "passed" and r["fulmen"].get(t, ("",))[0] != "passed"
                       for r in rows.values() for t in r["lightning"]))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
