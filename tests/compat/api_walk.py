"""Walk Lightning's public API and compare fulmen with it, name by name.

    python tests/compat/api_walk.py            # the three counts and every difference not on the allowlist
    python tests/compat/api_walk.py --all      # also the allowlisted ones

What counts as public (Lightning 2.6.6, the test-only oracle): every module under ``lightning.pytorch`` with no
path component starting with ``_``; in each, its ``__all__``, else the public classes and functions defined
there, and for a package also those its ``__init__`` re-exports from Lightning Fabric; plus ``PRACTICAL``,
names programs import although the walk's rule does not reach them (availability flags, re-exported helpers).

A name's signature is compatible when fulmen's callable (a class: its constructor) has Lightning's
parameters with the same names, kinds, order and defaults, and any extra parameter has a default (or is
``*args`` / ``**kwargs``). ``ALLOWED`` lists the deliberate differences, each one a row in
docs/compatibility.md.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
import pkgutil
import sys
import warnings
from dataclasses import dataclass, field
from types import ModuleType

LIGHTNING = "lightning.pytorch"
FULMEN = "fulmen"

# Names outside the walk's rule that programs and libraries import all the same.
PRACTICAL: dict[str, tuple[str, ...]] = {
    "utilities.rank_zero": (
        "LightningDeprecationWarning", "WarningCache", "rank_prefixed_message", "rank_zero_debug",
        "rank_zero_deprecation", "rank_zero_info", "rank_zero_only", "rank_zero_warn",
    ),
    "utilities.warnings": ("PossibleUserWarning",),
    "utilities.imports": (
        "_OMEGACONF_AVAILABLE", "_PYTHON_GREATER_EQUAL_3_11_0", "_RICH_AVAILABLE", "_TORCHMETRICS_GREATER_EQUAL_0_11",
        "_TORCHMETRICS_GREATER_EQUAL_0_8_0", "_TORCHMETRICS_GREATER_EQUAL_0_9_1", "_TORCHMETRICS_GREATER_EQUAL_1_0_0",
        "_TORCHVISION_AVAILABLE", "_TORCH_EQUAL_2_8", "_TORCH_EQUAL_2_9", "_TORCH_GREATER_EQUAL_2_6",
        "_TORCH_GREATER_EQUAL_2_8", "RequirementCache", "compare_version", "package_available",
    ),
    "utilities.data": ("has_iterable_dataset", "sized_len", "extract_batch_size", "has_len_all_ranks"),
    "utilities.enums": ("LightningEnum",),
    "utilities.exceptions": ("MisconfigurationException",),
    "utilities.model_helpers": ("is_overridden",),
}  # fmt: skip

# (module, name) -> why fulmen differs on purpose; each is a row in docs/compatibility.md
ALLOWED: dict[tuple[str, str], str] = {}


@dataclass
class Report:
    modules: list[str] = field(default_factory=list)
    missing_modules: list[str] = field(default_factory=list)
    names: list[tuple[str, str]] = field(default_factory=list)
    missing_names: list[tuple[str, str]] = field(default_factory=list)
    incompatible: dict[tuple[str, str], str] = field(default_factory=dict)

    def counts(self) -> str:
        n = len(self.names)
        present = n - len(self.missing_names)
        compatible = present - len(self.incompatible)
        m = len(self.modules)
        return (
            f"names present: {present} of {n}; compatible signatures: {compatible} of {n}; "
            f"modules importable: {m - len(self.missing_modules)} of {m}"
        )

    def problems(self, *, include_allowed: bool = False) -> list[str]:
        out = [f"missing module: {FULMEN}{m[len(LIGHTNING):]}" for m in self.missing_modules]
        for key in self.missing_names:
            if include_allowed or key not in ALLOWED:
                out.append(f"missing name: {_fulmen_module(key[0])}.{key[1]}")
        for key, why in self.incompatible.items():
            if include_allowed or key not in ALLOWED:
                out.append(f"signature: {_fulmen_module(key[0])}.{key[1]}: {why}")
        return out


def _fulmen_module(lightning_module: str) -> str:
    return FULMEN + lightning_module[len(LIGHTNING) :]


def lightning_modules() -> list[tuple[str, bool]]:
    root = importlib.import_module(LIGHTNING)
    found = [(LIGHTNING, True)]
    for info in pkgutil.walk_packages(root.__path__, LIGHTNING + "."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found.append((info.name, info.ispkg))
    return found


def public_names(module: ModuleType, is_package: bool) -> list[str]:
    if hasattr(module, "__all__"):
        names = list(module.__all__)
    else:
        names = []
        for name, obj in vars(module).items():
            if name.startswith("_") or not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            home = getattr(obj, "__module__", "") or ""
            if home == module.__name__ or (is_package and home.startswith(("lightning.fabric", "lightning_fabric"))):
                names.append(name)
    extra = PRACTICAL.get(module.__name__[len(LIGHTNING) + 1 :], ())
    return names + [n for n in extra if n not in names]


def _parameters(obj: object) -> list[inspect.Parameter] | None:
    if inspect.isclass(obj):
        if issubclass(obj, enum.Enum) or _is_typing_construct(obj):
            return None
        if obj.__init__ is object.__init__:
            return []
        target: object = obj.__init__
    elif callable(obj):
        target = obj
    else:
        return None
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return None
    if inspect.isclass(obj) and params and params[0].name == "self":
        params = params[1:]
    return params


def _is_typing_construct(cls: type) -> bool:
    """TypedDicts and Protocols are annotations, not things a program constructs."""
    return (hasattr(cls, "__total__") and issubclass(cls, dict)) or bool(getattr(cls, "_is_protocol", False))


def _same_default(a: object, b: object) -> bool:
    if a is b:
        return True
    if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b) and type(a).__name__ == type(b).__name__:
        return dataclasses.asdict(a) == dataclasses.asdict(b)  # fulmen's own class with Lightning's values
    if isinstance(a, enum.Enum) or isinstance(b, enum.Enum):
        return getattr(a, "value", a) == getattr(b, "value", b)
    if callable(a) and callable(b):  # classes and functions: the same name is the same default
        return getattr(a, "__name__", None) == getattr(b, "__name__", None)
    try:
        return bool(a == b)
    except Exception:
        return repr(a) == repr(b)


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def signature_difference(theirs: object, ours: object) -> str | None:
    """None when ``ours`` accepts every call ``theirs`` accepts, in the same way; else what differs."""
    expected, actual = _parameters(theirs), _parameters(ours)
    if expected is None:
        return None
    if actual is None:
        return "not callable with Lightning's arguments"
    var_kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    wanted = {p.name for p in expected}
    for p in actual:
        if p.name not in wanted and p.kind not in var_kinds and p.default is inspect.Parameter.empty:
            return f"extra parameter {p.name!r} has no default"
    ours_named = [p for p in actual if p.name in wanted or p.kind in var_kinds]
    ours_kinds = {p.kind for p in actual}
    ours_by_name = {p.name: p for p in actual}
    ours_positional = [p.name for p in actual if p.kind in _POSITIONAL]
    their_positional = [p.name for p in expected if p.kind in _POSITIONAL]
    if ours_positional[: len(their_positional)] != their_positional:
        return f"positional order {their_positional} expected, got {ours_positional}"
    for p in expected:
        if p.kind in var_kinds:
            if p.kind not in ours_kinds:
                return f"{'*args' if p.kind == inspect.Parameter.VAR_POSITIONAL else '**kwargs'} expected"
            continue
        mine = ours_by_name.get(p.name)
        if mine is None:
            if inspect.Parameter.VAR_KEYWORD in ours_kinds and p.kind == inspect.Parameter.KEYWORD_ONLY:
                continue
            return f"parameter {p.name!r} missing"
        if (p.kind == inspect.Parameter.KEYWORD_ONLY) != (mine.kind == inspect.Parameter.KEYWORD_ONLY) and (
            p.kind != inspect.Parameter.KEYWORD_ONLY
        ):
            return f"parameter {p.name!r} is keyword-only, Lightning's is positional"
        if (p.default is inspect.Parameter.empty) != (mine.default is inspect.Parameter.empty):
            return f"parameter {p.name!r}: default {_show(p.default)} expected, got {_show(mine.default)}"
        if p.default is not inspect.Parameter.empty and not _same_default(p.default, mine.default):
            return f"parameter {p.name!r}: default {p.default!r} expected, got {mine.default!r}"
    del ours_named
    return None


def _show(default: object) -> str:
    return "none (required)" if default is inspect.Parameter.empty else repr(default)


def walk() -> Report:
    warnings.filterwarnings("ignore")
    report = Report()
    for name, is_package in lightning_modules():
        theirs = importlib.import_module(name)
        report.modules.append(name)
        try:
            ours: ModuleType | None = importlib.import_module(_fulmen_module(name))
        except ImportError:
            ours = None
            report.missing_modules.append(name)
        for attr in public_names(theirs, is_package):
            key = (name, attr)
            report.names.append(key)
            if ours is None or not hasattr(ours, attr):
                report.missing_names.append(key)
                continue
            why = signature_difference(getattr(theirs, attr), getattr(ours, attr))
            if why is not None:
                report.incompatible[key] = why
    return report


def main(argv: list[str]) -> int:
    report = walk()
    prefixes = [a for a in argv if not a.startswith("--")]  # e.g. ``fulmen.utilities`` shows only those lines
    for line in report.problems(include_allowed="--all" in argv):
        if not prefixes or any(p in line for p in prefixes):
            print(line)
    print(report.counts())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
