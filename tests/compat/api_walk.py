"""Walk Lightning's public API and compare fulmen with it, name by name.

    python tests/compat/api_walk.py            # the counts and every difference not on the allowlist
    python tests/compat/api_walk.py --all      # also the allowlisted ones
    python tests/compat/api_walk.py strategies # only the lines that contain ``strategies``

What counts as public (Lightning 2.6.6, the test-only oracle): every module under ``lightning.pytorch`` with no
path component starting with ``_``; in each, its ``__all__``, else the public classes and functions defined
there, and for a package also those its ``__init__`` re-exports from Lightning Fabric; plus ``PRACTICAL``,
names programs import although the walk's rule does not reach them (availability flags, re-exported helpers).

Three more layers, because libraries and callbacks touch more than the documented names:

- **members**: every public method, classmethod, staticmethod, property and class attribute of every public
  class (inherited ones included, those of ``object`` and ``torch.nn.Module`` aside: both sides inherit them from
  torch). A Lightning method is a callable here with a compatible signature; a Lightning property or attribute
  is readable here, and settable when Lightning's has a setter.
- **exposed names**: every public name a Lightning module holds whose object Lightning, Fabric or
  ``lightning_utilities`` defines (its own definitions and what it imports, e.g. ``core.saving.get_filesystem``,
  ``utilities.imports.rank_zero_warn``), classes, functions and objects (a ``warning_cache``) alike: libraries
  import helpers from wherever Lightning's modules happen to import them.
- **one object per object**: names that are one object in Lightning (``utilities.rank_zero.rank_zero_warn`` and
  ``utilities.imports.rank_zero_warn``) are one object in fulmen, so patching or comparing one reaches the
  other.

A name's signature is compatible when fulmen's callable (a class: its constructor) has Lightning's
parameters with the same names, kinds, order and defaults, and any extra parameter has a default (or is
``*args`` / ``**kwargs``). For a method, a parameter Lightning requires may have a default here (it accepts
more calls), and where Lightning's override takes only ``*args`` (a callback hook written as ``(self, *_)``)
the contract is the nearest base class's signature of that method that names its parameters. ``ALLOWED`` lists the deliberate differences, each one a row in
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
    # members: (module, "Class.member") of every public class, once per class (its first public home)
    members: list[tuple[str, str]] = field(default_factory=list)
    member_problems: dict[tuple[str, str], str] = field(default_factory=dict)
    # exposed names: (module, name) of everything a module holds that Lightning or Fabric defines
    exposed: list[tuple[str, str]] = field(default_factory=list)
    exposed_problems: dict[tuple[str, str], str] = field(default_factory=dict)

    def counts(self) -> str:
        n = len(self.names)
        present = n - len(self.missing_names)
        compatible = present - len(self.incompatible)
        m = len(self.modules)
        k, e = len(self.members), len(self.exposed)
        return (
            f"names present: {present} of {n}; compatible signatures: {compatible} of {n}; "
            f"modules importable: {m - len(self.missing_modules)} of {m}; "
            f"class members compatible: {k - len(self.member_problems)} of {k}; "
            f"module-exposed names present and the same object: {e - len(self.exposed_problems)} of {e}"
        )

    def problems(self, *, include_allowed: bool = False) -> list[str]:
        out = [f"missing module: {FULMEN}{m[len(LIGHTNING):]}" for m in self.missing_modules]
        for key in self.missing_names:
            if include_allowed or key not in ALLOWED:
                out.append(f"missing name: {_fulmen_module(key[0])}.{key[1]}")
        for key, why in self.incompatible.items():
            if include_allowed or key not in ALLOWED:
                out.append(f"signature: {_fulmen_module(key[0])}.{key[1]}: {why}")
        for kind, found in (("member", self.member_problems), ("exposed", self.exposed_problems)):
            for key, why in found.items():
                if include_allowed or key not in ALLOWED:
                    out.append(f"{kind}: {_fulmen_module(key[0])}.{key[1]}: {why}")
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
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_default(x, y) for x, y in zip(a, b))
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
    return parameters_difference(_parameters(theirs), _parameters(ours))


def parameters_difference(
    expected: list[inspect.Parameter] | None, actual: list[inspect.Parameter] | None, *, method: bool = False
) -> str | None:
    """What ``actual`` lacks of ``expected``; ``method``: a required parameter there may have a default here."""
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
        if (p.default is inspect.Parameter.empty) != (mine.default is inspect.Parameter.empty) and not (
            method and p.default is inspect.Parameter.empty
        ):
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
    classes: dict[int, tuple[str, str, type, object]] = {}  # Lightning class -> its first public home, ours
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
            their_obj, our_obj = getattr(theirs, attr), getattr(ours, attr)
            why = signature_difference(their_obj, our_obj)
            if why is not None:
                report.incompatible[key] = why
            if inspect.isclass(their_obj) and inspect.isclass(our_obj):
                classes.setdefault(id(their_obj), (name, attr, their_obj, our_obj))
    for name, attr, their_cls, our_cls in classes.values():
        _walk_members(report, name, attr, their_cls, our_cls)
    _walk_exposed(report)
    return report


# ---- members ---------------------------------------------------------------------------------------------------

_OURS = (LIGHTNING, "lightning.fabric", "lightning_fabric", "pytorch_lightning")
# what a Lightning module holds counts as Lightning's when Lightning AI's packages define it: lightning_utilities
# too (``rank_zero_warn``, ``WarningCache``, ``apply_to_collection`` ... reach Lightning's modules from there)
_EXPOSED = (*_OURS, "lightning_utilities")


def _lightnings(obj: object) -> bool:
    return (getattr(obj, "__module__", None) or "").startswith(_OURS)


def _defined_in(cls: type, member: str) -> tuple[type, object] | None:
    for klass in cls.__mro__:
        if member in vars(klass):
            return klass, vars(klass)[member]
    return None


def _member_kind(raw: object) -> str:
    """'method', 'property' (settable: 'property+set') or 'attribute', from the class's own entry."""
    if isinstance(raw, property):
        return "property+set" if raw.fset is not None else "property"
    if isinstance(raw, (staticmethod, classmethod)) or inspect.isfunction(raw) or hasattr(raw, "method"):
        return "method"
    if hasattr(type(raw), "__get__") and hasattr(type(raw), "__set__"):
        return "property+set"  # a data descriptor (a config field, a stage flag)
    if hasattr(type(raw), "__get__") and callable(raw):
        return "method"
    return "attribute"


def _method_parameters(raw: object, owner: type, member: str) -> list[inspect.Parameter] | None:
    """The parameters a caller passes: ``self`` / ``cls`` left out."""
    if isinstance(raw, staticmethod):
        function, drop = raw.__func__, 0
    elif isinstance(raw, classmethod):
        function, drop = raw.__func__, 1
    elif inspect.isfunction(raw):
        function, drop = raw, 1
    elif hasattr(raw, "method"):  # Lightning's restricted classmethod (load_from_checkpoint)
        function, drop = raw.method, 1
    elif inspect.isfunction(getattr(raw, "__wrapped__", None)):  # a method under functools.lru_cache
        function, drop = raw.__wrapped__, 1  # type: ignore[attr-defined]
    else:
        function, drop = getattr(owner, member), 0
    try:
        return list(inspect.signature(function).parameters.values())[drop:]
    except (TypeError, ValueError):
        return None


def _takes_star_args(params: list[inspect.Parameter] | None) -> bool:
    return bool(params) and any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params or ())


def _contract(their_cls: type, member: str, params: list[inspect.Parameter] | None) -> list[inspect.Parameter] | None:
    """A Lightning override taking ``*args`` promises what the nearest base that names its parameters promises."""
    if not _takes_star_args(params):
        return params
    for klass in their_cls.__mro__[1:]:
        if member in vars(klass) and _lightnings(klass):
            base = _method_parameters(vars(klass)[member], klass, member)
            if base is not None and not _takes_star_args(base):
                return base
    return params


def _instance(cls: type) -> object | None:
    """An instance built with no arguments, to read attributes set in ``__init__``; None when that needs any."""
    if cls.__name__.endswith("CLI"):
        return None  # building a LightningCLI parses this process's command line and runs it
    try:
        return cls()
    except Exception:
        return None


def _walk_members(report: Report, module: str, cls_name: str, their_cls: type, our_cls: type) -> None:
    if issubclass(their_cls, enum.Enum) and issubclass(our_cls, enum.Enum):
        members = [m.name for m in their_cls]
        for m in members:
            key = (module, f"{cls_name}.{m}")
            report.members.append(key)
            if m not in our_cls.__members__:
                report.member_problems[key] = "missing"
            elif our_cls[m].value != their_cls[m].value:
                report.member_problems[key] = f"value {their_cls[m].value!r} expected, got {our_cls[m].value!r}"
        return
    instance: object | None = None
    built = False
    for member in sorted(dir(their_cls)):
        if member.startswith("_"):
            continue
        found = _defined_in(their_cls, member)
        if found is None or not _lightnings(found[0]):
            continue  # object's, torch.nn.Module's, typing's: both sides inherit them from there
        owner, raw = found
        key = (module, f"{cls_name}.{member}")
        report.members.append(key)
        kind = _member_kind(raw)
        mine = _defined_in(our_cls, member)
        if mine is None:
            if not built:
                instance, built = _instance(our_cls), True
            if instance is not None and member in getattr(instance, "__dict__", {}):
                if kind == "method" and not callable(getattr(instance, member)):
                    report.member_problems[key] = "a method in Lightning, a value here"
                continue  # an instance attribute: readable and settable
            report.member_problems[key] = "missing"
            continue
        our_owner, our_raw = mine
        our_kind = _member_kind(our_raw)
        if kind == "method":
            if our_kind != "method":
                report.member_problems[key] = f"a method in Lightning, {our_kind.split('+')[0]} here"
                continue
            if isinstance(raw, (staticmethod, classmethod)) and inspect.isfunction(our_raw):
                report.member_problems[key] = f"a {type(raw).__name__} in Lightning (callable on the class), an instance method here"
                continue
            expected = _contract(their_cls, member, _method_parameters(raw, owner, member))
            why = parameters_difference(expected, _method_parameters(our_raw, our_owner, member), method=True)
            if why is not None:
                report.member_problems[key] = why
        elif our_kind == "method" and kind != "attribute":
            report.member_problems[key] = f"{kind.split('+')[0]} in Lightning, a method here"
        elif kind == "property+set" and our_kind == "property":
            report.member_problems[key] = "settable in Lightning, read-only here"
        elif (
            kind == "attribute"
            and our_kind == "attribute"
            and isinstance(raw, (str, int, float, tuple, dict))
            and not _same_default(raw, our_raw)
        ):
            report.member_problems[key] = f"value {raw!r} expected, got {our_raw!r}"


# ---- names a module exposes ------------------------------------------------------------------------------------


def _origin(obj: object) -> str:
    if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return getattr(obj, "__module__", None) or ""
    return type(obj).__module__


def _walk_exposed(report: Report) -> None:
    public = set(report.names)
    holders: dict[int, list[tuple[str, str]]] = {}  # Lightning object -> where it is exposed
    objects: dict[int, object] = {}
    ours_of: dict[tuple[str, str], object] = {}
    for name in report.modules:
        if name in report.missing_modules:
            continue
        theirs = importlib.import_module(name)
        ours = importlib.import_module(_fulmen_module(name))
        for attr, obj in vars(theirs).items():
            if attr.startswith("_") or inspect.ismodule(obj) or not _origin(obj).startswith(_EXPOSED):
                continue
            key = (name, attr)
            holders.setdefault(id(obj), []).append(key)
            objects[id(obj)] = obj
            if key not in public:
                report.exposed.append(key)
            if not hasattr(ours, attr):
                if key not in public:  # a missing public name is reported by the name walk already
                    report.exposed_problems[key] = "missing"
                continue
            mine = getattr(ours, attr)
            ours_of[key] = mine
            if key in public:
                continue
            if inspect.isclass(obj) or inspect.isfunction(obj):
                if getattr(mine, "__name__", None) != obj.__name__ and not inspect.isclass(mine):
                    report.exposed_problems[key] = f"{obj.__name__!r} expected, got {mine!r}"
                    continue
                why = signature_difference(obj, mine)
                if why is not None:
                    report.exposed_problems[key] = why
            elif type(mine).__name__ != type(obj).__name__:
                report.exposed_problems[key] = f"a {type(obj).__name__} expected, got a {type(mine).__name__}"
    for ident, keys in holders.items():
        present = [k for k in keys if k in ours_of]
        if len(present) < 2:
            continue
        obj = objects[ident]
        home = next((k for k in present if k[0] == _origin(obj)), None) or next(
            (k for k in present if k in public), present[0]
        )
        for key in present:
            if ours_of[key] is not ours_of[home] and key not in report.exposed_problems:
                where = f"{_fulmen_module(home[0])}.{home[1]}"
                report.exposed_problems[key] = f"one object in Lightning, here not the same object as {where}"
                if key not in public and key not in report.exposed:
                    report.exposed.append(key)


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
