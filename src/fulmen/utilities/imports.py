"""Optional packages: are they installed, in which version; and lazily loaded package contents.

``require`` fails early, naming the extra to install, when a component's package is missing.
``lazy_exports`` gives a package ``__getattr__`` / ``__dir__`` that import each public class from its
module on first use, so ``import fulmen`` (and a run that does not use a component) pays nothing for it.
``lazy_aliases`` does the same for names a module holds only because Lightning's counterpart does.

``package_available``, ``compare_version`` and ``RequirementCache`` answer "is X (in version Y) installed?",
and the ``_X_AVAILABLE`` / ``_TORCH_GREATER_EQUAL_*`` flags are their answers for the packages programs
commonly gate on. Reading this module imports none of those packages: availability comes from
``importlib.util.find_spec`` and versions from the installed distributions' metadata, and a
``RequirementCache`` looks only when it is first asked.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import operator
import re
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from fulmen.utilities.rank_zero import rank_zero_warn as rank_zero_warn

# The Lightning release whose public API and checkpoint format fulmen matches: what checkpoints record as their
# format version (Lightning reads it to migrate old files), what the ``lightning.pytorch`` alias reports as
# ``__version__`` (libraries gate features on it), and where checkpoint upgrades stop.
LIGHTNING_VERSION = "2.6.6"

if TYPE_CHECKING:
    from torch._vendor.packaging.version import Version


def require(package: str, extra: str, component: str, available: object = None) -> None:
    """Raise ``ModuleNotFoundError`` naming ``pip install 'fulmen[<extra>]'`` when ``package`` is missing.

    ``available``: the availability flag of the component's module (``_WANDB_AVAILABLE``), as the caller reads
    it when it runs; its truth then decides instead of a look-up, so that a program or test suite that patches
    the flag (``mock.patch("lightning.pytorch.loggers.wandb._WANDB_AVAILABLE", False)``) sees the component
    refuse, or, patched true over a stand-in package, accept."""
    missing = importlib.util.find_spec(package) is None if available is None else not available
    if missing:
        raise ModuleNotFoundError(
            f"{component} needs the `{package}` package, which is not installed: pip install 'fulmen[{extra}]' "
            f"(or pip install {package})."
        )


def lazy_exports(package: str, where: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package`` whose public names live in the modules ``where``
    maps them to (``{"ModelCheckpoint": "model_checkpoint", ...}``); its submodules are attributes too.
    ``lazy_exports(package, {})`` gives a package only the submodule attributes."""

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is not None:
            return getattr(importlib.import_module(f"{package}.{module}"), name)
        # a submodule reads as an attribute without its own import (``pl.callbacks.early_stopping.X``), as it
        # does after Lightning's package imports everything: programs and libraries rely on that
        if not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}") is not None:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted([*importlib.import_module(package).__dict__, *where])

    return __getattr__, __dir__


def lazy_aliases(
    module: str, where: Mapping[str, str], fallback: Callable[[str], object] | None = None
) -> Callable[[str], object]:
    """A PEP 562 ``__getattr__`` for ``module`` that resolves each name of ``where`` on first use to the object at
    its dotted path (``{"Callback": "fulmen.callbacks.callback.Callback"}``): the very object, then kept in the
    module. For names a module only exposes because Lightning's counterpart holds them (libraries import helpers
    from wherever Lightning's modules import them) and that its own code never uses: such a name may live in a
    layer above, or in a module heavy to import, without the module importing it. Other names go to
    ``fallback`` (the module's own ``__getattr__``), else raise ``AttributeError``."""

    def __getattr__(name: str) -> object:
        path = where.get(name)
        if path is None:
            if fallback is not None:
                return fallback(name)
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        home, _, attribute = path.rpartition(".")
        value = getattr(importlib.import_module(home), attribute)
        setattr(sys.modules[module], name, value)
        return value

    return __getattr__


def optional_packages(
    module: str, where: Mapping[str, str], fallback: Callable[[str], object] | None = None
) -> tuple[Callable[[str], object], Callable[[str], Any]]:
    """An optional package (or an object of one) as a name of ``module`` that patching reaches, imported only
    when used: ``where`` maps each name to a module path (``{"wandb": "wandb"}``) or ``"module:attribute"``
    (``{"MlflowClient": "mlflow.tracking:MlflowClient"}``).

    Returns ``(__getattr__, lookup)``. The PEP 562 ``__getattr__`` gives the name's object, imported now and
    not kept in the module (other names go to ``fallback``); ``lookup(name)``, which the module's code calls
    each time it needs the package, gives the value set on the module when there is one (``mock.patch(
    "fulmen.loggers.wandb.wandb", fake)``), else the object imported now, so that a stand-in put in
    ``sys.modules`` is honoured as well, as by the ``import`` statement Lightning's code runs there."""

    def resolve(name: str) -> Any:
        path, _, attribute = where[name].partition(":")
        found = importlib.import_module(path)
        return getattr(found, attribute) if attribute else found

    def __getattr__(name: str) -> object:
        if name in where:
            return resolve(name)
        if fallback is not None:
            return fallback(name)
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    def lookup(name: str) -> Any:
        patched = sys.modules[module].__dict__.get(name)
        return patched if patched is not None else resolve(name)

    return __getattr__, lookup


# -- versions -------------------------------------------------------------------------------------------------
def parse_version(text: str) -> Version:
    """A PEP 440 version (``packaging``'s ``Version``), comparable with ``<``, ``>=`` ...; ``ValueError``
    (``InvalidVersion``) for text that is not one.

    ``packaging`` is not one of fulmen's dependencies, but torch carries the same module (and has already
    loaded it), so no package is imported to read a version; a standalone ``packaging`` is the fallback."""
    try:
        from torch._vendor.packaging.version import Version as _Version
    except ImportError:  # a torch without its vendored copy
        from packaging.version import Version as _Version  # type: ignore[assignment]  # the same class
    return _Version(text)


@functools.lru_cache
def package_available(package_name: str) -> bool:
    """Whether ``package_name`` can be imported (found on the path; nothing is imported)."""
    try:
        return importlib.util.find_spec(package_name) is not None
    except (ModuleNotFoundError, ValueError):  # a dotted name whose parent is missing; an empty name
        return False


@functools.lru_cache
def module_available(module_path: str) -> bool:
    """Whether the module ``module_path`` (``"torch.utils"``) imports; its package must be installed first."""
    if not package_available(module_path.split(".")[0]):
        return False
    try:
        importlib.import_module(module_path)
    except ImportError:
        return False
    return True


def compare_version(package: str, op: Callable[..., Any], version: str, use_base_version: bool = False) -> bool:
    """``op(installed version of package, version)``, e.g. ``compare_version("torch", operator.ge, "2.6")``;
    ``False`` when the package is not installed. ``use_base_version`` drops pre-release, post-release and
    local labels first (a nightly ``2.7.0.dev20250101`` counts as ``2.7.0``)."""
    module = sys.modules.get(package)
    if module is None:
        try:
            module = importlib.import_module(package)
        except (ImportError, RuntimeError):
            return False
    found = getattr(module, "__version__", None)
    if found is None:
        try:
            found = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            # a stand-in module with no version (documentation builds mock packages): treat it as recent
            return True
    installed = parse_version(str(found))
    if use_base_version:
        installed = parse_version(installed.base_version)
    return bool(op(installed, parse_version(version)))


# -- requirement strings: "name[extra1,extra2]>=1.0,<2; marker" ------------------------------------------------
_REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*"
    r"(?:\[(?P<extras>[^\]]*)\])?\s*"
    r"\(?(?P<specifiers>[^;()]*)\)?\s*"
    r"(?:;(?P<marker>.*))?$"
)
_SPECIFIER = re.compile(r"^\s*(?P<op>===|~=|==|!=|<=|>=|<|>)\s*(?P<version>[^\s,]+)\s*$")


class _Requirement(NamedTuple):
    name: str
    extras: tuple[str, ...]
    specifiers: tuple[tuple[str, str], ...]  # (operator, version)
    marker: str


def _parse_requirement(text: str) -> _Requirement:
    match = _REQUIREMENT.match(text)
    specifiers = []
    if match is not None:
        for part in filter(str.strip, match["specifiers"].split(",")):
            spec = _SPECIFIER.match(part)
            if spec is None:
                match = None
                break
            specifiers.append((spec["op"], spec["version"]))
    if match is None:
        raise ValueError(
            f"Invalid requirement {text!r}: expected a package name with optional extras and version "
            "specifiers, e.g. 'torch>=2.1,<3' or 'jsonargparse[signatures]>=4.27'."
        )
    extras = tuple(e.strip() for e in (match["extras"] or "").split(",") if e.strip())
    return _Requirement(match["name"], extras, tuple(specifiers), (match["marker"] or "").strip())


def _release_prefix_matches(candidate: Version, prefix: str) -> bool:
    """``candidate`` matches ``==prefix.*``: same epoch, and its release numbers start with the prefix's
    (zero-padded)."""
    wanted = parse_version(prefix)
    release = tuple(candidate.release) + (0,) * max(0, len(wanted.release) - len(candidate.release))
    return candidate.epoch == wanted.epoch and release[: len(wanted.release)] == tuple(wanted.release)


def _replaced(version: Version, **parts: Any) -> Version:
    """``version`` with some of its parts (post, dev, local) replaced; None removes one."""
    fields = {"epoch": version.epoch, "release": version.release, "pre": version.pre, "post": version.post,
              "dev": version.dev, "local": version.local, **parts}  # fmt: skip
    text = f"{fields['epoch']}!" if fields["epoch"] else ""
    text += ".".join(str(n) for n in fields["release"])
    if fields["pre"] is not None:
        text += f"{fields['pre'][0]}{fields['pre'][1]}"
    if fields["post"] is not None:
        text += f".post{fields['post']}"
    if fields["dev"] is not None:
        text += f".dev{fields['dev']}"
    if fields["local"] is not None:
        text += f"+{fields['local']}"
    return parse_version(text)


def _specifier_allows(op: str, spec: str, candidate: Version) -> bool:
    """PEP 440's meaning of one specifier, pre-releases allowed (as ``RequirementCache`` checks them)."""
    if op == "===":
        return str(candidate).lower() == spec.lower()
    public = _replaced(candidate, local=None)
    if op in ("==", "!=") and spec.endswith(".*"):
        equal = _release_prefix_matches(public, spec[:-2])
        return equal if op == "==" else not equal
    wanted = parse_version(spec)
    if op in ("==", "!="):
        # a specifier without a local label ignores the candidate's (2.13.0+cpu satisfies ==2.13.0)
        equal = (candidate if wanted.local is not None else public) == wanted
        return equal if op == "==" else not equal
    if op == "~=":  # ~=2.8.1 is >=2.8.1 and ==2.8.*
        prefix = ".".join(str(n) for n in wanted.release[:-1])
        if wanted.epoch:
            prefix = f"{wanted.epoch}!{prefix}"
        return public >= wanted and _release_prefix_matches(public, prefix)
    if op == "<=":
        return public <= wanted
    if op == ">=":
        return public >= wanted
    if op == "<":  # <2.9 does not admit 2.9.0rc1, a pre-release of the version it excludes
        if not candidate < wanted:
            return False
        return not (
            not wanted.is_prerelease and candidate.is_prerelease and candidate >= _replaced(wanted, dev=0, local=None)
        )
    # ">": >2.8 does not admit 2.8.post1 or 2.8+cpu, which are still 2.8
    if not candidate > wanted:
        return False
    if not wanted.is_postrelease and candidate.is_postrelease and _replaced(candidate, post=None, dev=None, local=None) == wanted:
        return False
    return not (candidate.local is not None and public == wanted)


def _installed_version(name: str) -> Version | None:
    try:
        return parse_version(importlib.metadata.version(name))
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return None


def _requirement_met(requirement: _Requirement) -> bool:
    installed = _installed_version(requirement.name)
    if installed is None:
        return False
    if not all(_specifier_allows(op, spec, installed) for op, spec in requirement.specifiers):
        return False
    return all(_extra_installed(requirement.name, extra) for extra in requirement.extras)


def _extra_installed(name: str, extra: str) -> bool:
    """Every package ``name[extra]`` pulls in is installed in a version it accepts (an unknown extra: no)."""
    declared = importlib.metadata.requires(name) or []
    marker = re.compile(r"""extra\s*==\s*["']""" + re.escape(extra) + r"""["']""")
    needed = [_parse_requirement(line) for line in declared if ";" in line and marker.search(line.split(";", 1)[1])]
    if not needed:
        return False
    return all(_requirement_met(req._replace(extras=())) for req in needed)


class RequirementCache:
    """A requirement (``"torch>=2.1"``, ``"jsonargparse[signatures]"``) and/or a module path (``module=
    "torch.utils"``) that is true when it is satisfied. It is checked on first use (``bool()``, ``str()``)
    and the answer kept; ``str()`` says what was found, or which ``pip install`` fixes it.

    A requirement without a version whose distribution metadata cannot be found (a package installed without
    it) counts as met when the module imports."""

    def __init__(self, requirement: str | None = None, module: str | None = None) -> None:
        if not (requirement or module):
            raise ValueError(
                "RequirementCache needs a requirement (e.g. RequirementCache('torch>=2.1')) or a module path "
                "(RequirementCache(module='torch.utils')): both were empty."
            )
        self.requirement = requirement
        self.module = module
        # parsed now, so that a malformed requirement fails where it is written rather than where it is used
        self._parsed = _parse_requirement(requirement) if requirement else None

    def _check_requirement(self) -> None:
        assert self.requirement is not None and self._parsed is not None
        self.available = _requirement_met(self._parsed)
        if self.available:
            self.message = f"Requirement {self.requirement!r} met"
            return
        self.message = (
            f"Requirement {self.requirement!r} not met. HINT: Try running `pip install -U {self.requirement!r}`"
        )
        # a module stands in for the requirement: the one given, else the package itself when nothing more than
        # its name is asked for (installed without distribution metadata, or under another name: `yaml`)
        bare = not (self._parsed.specifiers or self._parsed.extras or self._parsed.marker)
        module = self.module if self.module is not None else self._parsed.name if bare else None
        if module is not None:
            self.available = module_available(module)
            if self.available:
                self.message = f"Module {module!r} available"

    def _check_module(self) -> None:
        assert self.module is not None
        self.available = module_available(self.module)
        if self.available:
            self.message = f"Module {self.module!r} available"
        else:
            self.message = f"Module not found: {self.module!r}. HINT: Try running `pip install -U {self.module}`"

    def _check_available(self) -> None:
        if hasattr(self, "available"):
            return
        if self.requirement:
            self._check_requirement()
        if getattr(self, "available", True) and self.module:
            self._check_module()

    def __bool__(self) -> bool:
        self._check_available()
        return self.available

    def __str__(self) -> str:
        self._check_available()
        return self.message

    def __repr__(self) -> str:
        return self.__str__()


# -- what programs gate on ------------------------------------------------------------------------------------
_PYTHON_GREATER_EQUAL_3_11_0 = sys.version_info[:2] >= (3, 11)
# torch is imported by fulmen anyway: comparing its version costs nothing more
_TORCH_GREATER_EQUAL_2_2 = compare_version("torch", operator.ge, "2.2.0")
_TORCH_GREATER_EQUAL_2_4 = compare_version("torch", operator.ge, "2.4.0")
_TORCH_GREATER_EQUAL_2_6 = compare_version("torch", operator.ge, "2.6.0")
_TORCH_GREATER_EQUAL_2_8 = compare_version("torch", operator.ge, "2.8.0")
_TORCH_EQUAL_2_8 = RequirementCache("torch>=2.8.0,<2.9.0")
_TORCH_EQUAL_2_9 = RequirementCache("torch>=2.9.0,<2.10.0")
_TORCHMETRICS_GREATER_EQUAL_0_8_0 = RequirementCache("torchmetrics>=0.8.0")
_TORCHMETRICS_GREATER_EQUAL_0_9_1 = RequirementCache("torchmetrics>=0.9.1")
_TORCHMETRICS_GREATER_EQUAL_0_11 = RequirementCache("torchmetrics>=0.11.0")  # metrics take `task=`
_TORCHMETRICS_GREATER_EQUAL_1_0_0 = RequirementCache("torchmetrics>=1.0.0")
_OMEGACONF_AVAILABLE = package_available("omegaconf")
_TORCHVISION_AVAILABLE = RequirementCache("torchvision")
_RICH_AVAILABLE = RequirementCache("rich>=10.2.2")
# the other availability flags Lightning's modules hold, with its requirements; each module of fulmen that has
# a counterpart there re-exports its flags from here (one definition per package)
_PSUTIL_AVAILABLE = RequirementCache("psutil")
_ONNX_AVAILABLE = RequirementCache("onnx")
_ONNXSCRIPT_AVAILABLE = RequirementCache("onnxscript")
_TORCH_TRT_AVAILABLE = RequirementCache("torch_tensorrt")
_REQUESTS_AVAILABLE = RequirementCache("requests")
_XLA_AVAILABLE = RequirementCache("torch_xla>=1.13", "torch_xla")
_DEEPSPEED_AVAILABLE = RequirementCache("deepspeed")
_HYDRA_AVAILABLE = RequirementCache("hydra-core")
_TENSORBOARD_AVAILABLE = RequirementCache("tensorboard")
_TENSORBOARDX_AVAILABLE = RequirementCache("tensorboardX")
_MATPLOTLIB_AVAILABLE = RequirementCache("matplotlib")
