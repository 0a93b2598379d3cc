"""utilities.imports: the availability flags have Lightning's values on this machine, and the helpers behind
them (package_available, compare_version, RequirementCache) answer as lightning_utilities' do, reading
installed versions without importing the packages."""

from __future__ import annotations

import operator
import subprocess
import sys

import pytest

from fulmen.utilities import imports
from fulmen.utilities.imports import RequirementCache, compare_version, package_available
from tests.parity import oracle

FLAGS = [
    "_OMEGACONF_AVAILABLE", "_PYTHON_GREATER_EQUAL_3_11_0", "_RICH_AVAILABLE", "_TORCHMETRICS_GREATER_EQUAL_0_11",
    "_TORCHMETRICS_GREATER_EQUAL_0_8_0", "_TORCHMETRICS_GREATER_EQUAL_0_9_1", "_TORCHMETRICS_GREATER_EQUAL_1_0_0",
    "_TORCHVISION_AVAILABLE", "_TORCH_EQUAL_2_8", "_TORCH_EQUAL_2_9", "_TORCH_GREATER_EQUAL_2_6",
    "_TORCH_GREATER_EQUAL_2_8",
]  # fmt: skip


@oracle.parity
@pytest.mark.parametrize("name", FLAGS)
def test_flags_have_lightnings_values(name):
    theirs = getattr(oracle.lightning("lightning.pytorch.utilities.imports"), name)
    assert bool(getattr(imports, name)) == bool(theirs)
    assert str(getattr(imports, name)) == str(theirs)


REQUIREMENTS = [
    "torch", "torch>=2.0", "torch<2.0", "torch>=2.13.0,<2.14", "torch==2.13.*", "torch!=2.13.*", "torch~=2.13",
    "torch~=2.12.0", "torch>2.13.0", "torch==2.13.0", "torch===2.13.0+cpu", "rich>=10.2.2", "no_such_package",
    "no_such_package>=1.0", "jsonargparse[signatures]", "jsonargparse[signatures]>=4.0", "jsonargparse[no_extra]",
    "pytest>=7; python_version>'3.0'", "PyYAML>=5.4", "pyyaml", "typing_extensions", "typing-extensions>=4",
]  # fmt: skip


@oracle.parity
@pytest.mark.parametrize("requirement", REQUIREMENTS)
def test_requirement_cache_answers_as_lightning_utilities(requirement):
    theirs = oracle.lightning("lightning_utilities.core.imports").RequirementCache(requirement)
    ours = RequirementCache(requirement)
    assert bool(ours) == bool(theirs)
    if bool(ours) or any(c in requirement for c in "<>="):  # (without a version, its "not met" text differs)
        assert str(ours) == str(theirs)


@oracle.parity
@pytest.mark.parametrize("module", ["torch.utils", "torch.no_such", "no_such.module", "yaml"])
def test_requirement_cache_of_a_module(module):
    theirs = oracle.lightning("lightning_utilities.core.imports").RequirementCache(module=module)
    ours = RequirementCache(module=module)
    assert (bool(ours), str(ours)) == (bool(theirs), str(theirs))
    assert bool(RequirementCache("torch>=2.0", module=module)) == bool(theirs)


def test_requirement_cache_refuses_what_it_cannot_check():
    with pytest.raises(ValueError, match="needs a requirement"):
        RequirementCache()
    with pytest.raises(ValueError, match="Invalid requirement 'torch >= = 2'"):
        RequirementCache("torch >= = 2")


def test_specifiers_mean_what_pep_440_says():
    """Every operator on versions around its edges, against packaging's SpecifierSet (pre-releases allowed,
    as RequirementCache checks them)."""
    pytest.importorskip("packaging")
    from packaging.specifiers import SpecifierSet

    versions = ["2.8.0", "2.8.0rc1", "2.8.0.post1", "2.8.0+cpu", "2.8.1", "2.9.0", "2.9.0rc1", "2.9", "2.10.0.dev1",
                "3.0", "1.13.1", "2.8.0.dev1", "2.8.0rc1+local", "2.9.post1", "1!2.8.0", "2.8.0.post1.dev2"]  # fmt: skip
    specs = ["==2.8.0", "==2.8.*", "!=2.8.*", "~=2.8", "~=2.8.0", "<2.9", "<=2.9", ">2.8.0", ">=2.8", "!=2.8.0",
             "<2.9.0rc2", ">2.8.0rc1", "==2.8.0+cpu", "===2.8.0", ">=2.8.0,<2.9.0", "<2.9.post1", ">2.8.post1",
             "==1!2.8.*", "~=2.8.0rc1", "<=2.8.0", ">2.8"]  # fmt: skip
    for spec in specs:
        parsed = imports._parse_requirement(f"x{spec}")
        for version in versions:
            ours = all(imports._specifier_allows(op, v, imports.parse_version(version)) for op, v in parsed.specifiers)
            assert ours == SpecifierSet(spec).contains(version, prereleases=True), (spec, version)


@oracle.parity
def test_compare_version_and_package_available_are_lightning_utilities():
    theirs = oracle.lightning("lightning_utilities.core.imports")
    for args in [("torch", operator.ge, "2.6.0"), ("torch", operator.lt, "2.13.0"), ("torch", operator.lt, "2.13.0", True),
                 ("no_such_package", operator.ge, "0.0"), ("yaml", operator.ge, "5.0")]:  # fmt: skip
        assert compare_version(*args) == theirs.compare_version(*args), args
    for name in ("os", "torch", "no_such_package", "no_such_package.sub", "torch.no_such"):
        assert package_available(name) == theirs.package_available(name), name


@pytest.mark.slow  # a fresh interpreter
def test_reading_the_module_imports_none_of_the_packages_it_checks():
    code = ("import sys, fulmen.utilities.imports as i\n"
            "bool(i._RICH_AVAILABLE), bool(i._TORCHMETRICS_GREATER_EQUAL_1_0_0), bool(i._OMEGACONF_AVAILABLE)\n"
            "print(sorted(m for m in ('rich', 'torchmetrics', 'omegaconf', 'torchvision') if m in sys.modules))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
