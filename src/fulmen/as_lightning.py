"""fulmen under Lightning's names: ``import lightning.pytorch`` / ``import pytorch_lightning`` give fulmen.

Libraries built on Lightning (pruning callbacks, metric integrations, model zoos ...) import
``lightning.pytorch`` or ``pytorch_lightning`` themselves, so changing the user's own imports is not enough to
run them on fulmen. Two ways to run them unchanged:

- in a program: ``import fulmen; fulmen.install_as_lightning()`` before the library is imported;
- from the shell: ``python -m fulmen.as_lightning train.py --its args`` (or ``-m package.module args``), which
  also covers the processes the program starts (fulmen's DDP launcher, ``torchrun`` workers, spawned
  DataLoader workers, any ``python`` subprocess): they inherit a ``PYTHONPATH`` entry whose
  ``sitecustomize`` installs the alias at their start.

After it, every ``lightning.pytorch[.X]`` and ``pytorch_lightning[.X]`` module is fulmen's ``fulmen[.X]``
module object itself (so a library's ``class MyCallback(pl.Callback)`` subclasses fulmen's class and
``isinstance`` agrees both ways), except the two roots: they are thin views of ``fulmen`` whose
``__version__`` is the Lightning version fulmen matches, because libraries gate features on that number.
``lightning.fabric``, ``lightning_fabric`` and ``lightning_utilities`` stay the real packages where they are
installed (the umbrella ``lightning`` imports Fabric only when ``lightning.Fabric`` or
``lightning.seed_everything`` is first read); without Lightning installed, ``import lightning`` gives a package
whose ``pytorch`` is fulmen.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import runpy
import sys
from collections.abc import Sequence
from types import ModuleType

from fulmen.utilities.imports import LIGHTNING_VERSION

_ROOTS = ("lightning.pytorch", "pytorch_lightning")
_BOOT_DIR = os.path.join(os.path.dirname(__file__), "_as_lightning_boot")


def _fulmen_name(fullname: str) -> str | None:
    """``lightning.pytorch.callbacks.x`` -> ``fulmen.callbacks.x``; None for a name the alias does not cover."""
    for root in _ROOTS:
        if fullname == root:
            return "fulmen"
        if fullname.startswith(root + "."):
            return "fulmen" + fullname[len(root) :]
    return None


class _LightningRoot(ModuleType):
    """``lightning.pytorch`` / ``pytorch_lightning``: every attribute is fulmen's, except ``__version__``."""

    def __init__(self, name: str, fulmen: ModuleType) -> None:
        super().__init__(name, fulmen.__doc__)
        self.__version__ = LIGHTNING_VERSION
        self.__path__ = list(fulmen.__path__)
        self.__file__ = fulmen.__file__
        self._fulmen = fulmen

    def __getattr__(self, name: str) -> object:
        # only called for what this view does not hold itself: the package's names and submodules
        return getattr(self._fulmen, name)

    def __dir__(self) -> list[str]:
        return sorted({*dir(self._fulmen), "__version__"})


class _Existing(importlib.abc.Loader):
    """Loads a module that already exists (fulmen's), under a second name."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.spec = module.__spec__

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        # the import system gave the module the alias's spec; fulmen's own keeps ``importlib.reload`` and
        # pickling by ``__spec__`` pointing at the real file
        if not isinstance(module, _LightningRoot):
            module.__spec__ = self.spec


class _LightningAlias(importlib.abc.MetaPathFinder):
    """First on ``sys.meta_path``: resolves Lightning's trainer package names to fulmen's modules."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "lightning":
            real = self._real_spec(fullname, path)
            return self._umbrella_spec() if real is None else _lazy_umbrella_spec(real)
        target_name = _fulmen_name(fullname)
        if target_name is None:
            return None
        try:
            module = importlib.import_module(target_name)
        except ModuleNotFoundError as err:
            if err.name != target_name:  # fulmen has the module; something it imports is missing
                raise
            raise ModuleNotFoundError(
                f"No module named {fullname!r}: fulmen has no counterpart of it ({target_name!r}). fulmen runs "
                "here under Lightning's names (fulmen.install_as_lightning()); see docs/compatibility.md for "
                "what fulmen does not provide.",
                name=fullname,
            ) from None
        if fullname in _ROOTS:
            module = _LightningRoot(fullname, module)
        return importlib.machinery.ModuleSpec(
            fullname, _Existing(module), is_package=hasattr(module, "__path__"), origin=getattr(module, "__file__", None)
        )

    def _real_spec(self, fullname: str, path: Sequence[str] | None) -> importlib.machinery.ModuleSpec | None:
        """The spec a finder after this one gives the real umbrella package ``lightning`` (None: not installed)."""
        later = sys.meta_path[sys.meta_path.index(self) + 1 :] if self in sys.meta_path else sys.meta_path
        for finder in later:
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            try:
                spec = find(fullname, path)
            except ImportError:
                return None
            if spec is not None:
                return spec
        return None

    def _umbrella_spec(self) -> importlib.machinery.ModuleSpec:
        umbrella = ModuleType("lightning", "Lightning's umbrella package, standing in for fulmen (no Lightning installed).")
        umbrella.__path__ = []  # a package: ``lightning.pytorch`` resolves through this finder
        umbrella.__version__ = LIGHTNING_VERSION  # type: ignore[attr-defined]
        return importlib.machinery.ModuleSpec("lightning", _Umbrella(umbrella), is_package=True)


class _Umbrella(_Existing):
    def exec_module(self, module: ModuleType) -> None:
        # ``import lightning as L; L.pytorch.Trainer`` and ``L.Trainer`` work as with the real package
        import fulmen

        root = importlib.import_module("lightning.pytorch")
        module.pytorch = root  # type: ignore[attr-defined]
        for name in ("Trainer", "LightningModule", "LightningDataModule", "Callback", "seed_everything"):
            setattr(module, name, getattr(fulmen, name))


# the real umbrella package's names that live in Lightning Fabric, imported when first read
_FABRIC_NAMES = {"Fabric": "lightning.fabric.fabric", "seed_everything": "lightning.fabric.utilities.seed"}
_TRAINER_NAMES = ("Trainer", "LightningModule", "LightningDataModule", "Callback")


def _lazy_umbrella_spec(real: importlib.machinery.ModuleSpec) -> importlib.machinery.ModuleSpec:
    """The installed ``lightning`` package (its files: ``lightning.fabric`` and the rest stay the real ones),
    without running its ``__init__``, which imports Lightning Fabric (about 3 s of every aliased process's start,
    its DDP workers' included) for two names a program rarely reads: those are imported when first read."""
    spec = importlib.machinery.ModuleSpec("lightning", _LazyUmbrella(), origin=real.origin, is_package=True)
    spec.submodule_search_locations = list(real.submodule_search_locations or [])
    spec.has_location = real.has_location
    return spec


class _LazyUmbrella(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # a plain module

    def exec_module(self, module: ModuleType) -> None:
        import logging

        # what the real __init__ sets up besides its imports: the "lightning" logger prints INFO to the console
        logger = logging.getLogger("lightning")
        logger.setLevel(logging.INFO)
        console = logging.StreamHandler()
        console.setLevel(logging.INFO)
        console.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
        logger.addHandler(console)
        # the package's metadata (`__author__`, `__license__` ...: what its `__about__` exports)
        about = importlib.import_module("lightning.__about__")
        module.__dict__.update({name: getattr(about, name) for name in getattr(about, "__all__", ())})
        module.__version__ = importlib.import_module("lightning.__version__").version  # type: ignore[attr-defined]
        module.__all__ = [*_TRAINER_NAMES, "seed_everything", "Fabric", "__version__"]  # type: ignore[attr-defined]

        def __getattr__(name: str) -> object:
            if name in _FABRIC_NAMES:
                value = getattr(importlib.import_module(_FABRIC_NAMES[name]), name)
            elif name in _TRAINER_NAMES:
                value = getattr(importlib.import_module("lightning.pytorch"), name)
            else:
                raise AttributeError(f"module 'lightning' has no attribute {name!r}")
            setattr(module, name, value)
            return value

        module.__getattr__ = __getattr__  # type: ignore[method-assign]


def alias_finder() -> importlib.abc.MetaPathFinder:
    """The installed alias (``install_as_lightning`` first)."""
    return next(finder for finder in sys.meta_path if isinstance(finder, _LightningAlias))


def _imported_lightning_modules() -> list[str]:
    """Lightning trainer modules already imported for real (not through the alias)."""
    found = []
    for name, module in list(sys.modules.items()):
        if _fulmen_name(name) is None or module is None:
            continue
        home = getattr(module, "__name__", "")
        if not (isinstance(module, _LightningRoot) or home == "fulmen" or home.startswith("fulmen.")):
            found.append(name)
    return sorted(found)


def install_as_lightning() -> None:
    """Make ``lightning.pytorch`` and ``pytorch_lightning`` (and all their submodules) fulmen, in this process.

    Call it before anything imports Lightning's trainer package. Calling it again does nothing.

    Raises:
        RuntimeError: Lightning's own ``lightning.pytorch`` / ``pytorch_lightning`` modules were imported
            already: classes made from them would not be fulmen's, so the two could not be mixed.
    """
    if any(isinstance(finder, _LightningAlias) for finder in sys.meta_path):
        return
    already = _imported_lightning_modules()
    if already:
        shown = ", ".join(already[:8]) + (f" and {len(already) - 8} more" if len(already) > 8 else "")
        raise RuntimeError(
            f"install_as_lightning() was called after Lightning's own modules were imported: {shown}. Call it "
            "before anything imports lightning.pytorch or pytorch_lightning (first thing in the program), or run "
            "the program with `python -m fulmen.as_lightning SCRIPT [ARGS]`."
        )
    sys.meta_path.insert(0, _LightningAlias())


def _inherit_alias(env: dict[str, str]) -> None:
    """Put the boot folder first on ``PYTHONPATH`` so every Python subprocess installs the alias at start."""
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != _BOOT_DIR]
    env["PYTHONPATH"] = os.pathsep.join([_BOOT_DIR, *parts])


_USAGE = """usage: python -m fulmen.as_lightning SCRIPT [ARGS ...]
       python -m fulmen.as_lightning -m MODULE [ARGS ...]

Runs a program that imports lightning.pytorch / pytorch_lightning on fulmen, its subprocesses included."""


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help") or (args[0] == "-m" and len(args) < 2):
        print(_USAGE, file=sys.stderr if not args or args[0] == "-m" else sys.stdout)
        raise SystemExit(0 if args and args[0] in ("-h", "--help") else 2)
    _inherit_alias(os.environ)  # type: ignore[arg-type]  # os.environ is a MutableMapping[str, str]
    install_as_lightning()
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]  # run_module puts the module's file in argv[0]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return
    script = args[0]
    if not os.path.exists(script):
        raise SystemExit(f"python -m fulmen.as_lightning: can't open file {script!r}: no such file")
    sys.argv = [script, *args[1:]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as `python SCRIPT` puts its folder first
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
