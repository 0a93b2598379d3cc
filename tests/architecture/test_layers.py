"""The package's shape, checked from its source (an AST walk, so a rename cannot fool it):

- no import cycle among modules at import time (package ``__init__`` files count: importing ``a.b.c`` runs
  ``a/b/__init__.py`` first);
- imports point one way: trainer -> loops -> runtime / strategies / precision -> core -> utilities, and
  loops, runtime, strategies, callbacks and tuner never import ``fulmen.trainer``;
- nothing outside ``fulmen/trainer/`` reads or writes a private attribute of a trainer (``trainer._x``).

Imports under ``if TYPE_CHECKING:`` are for annotations only (they never run) and are not counted.

A module holds a name from a layer above (``fulmen.core.module.Callback``, because Lightning's module holds it and
libraries import it from there) only through a ``lazy_aliases`` table (``fulmen/utilities/imports.py``): a PEP 562
``__getattr__`` that resolves a dotted path on first use, so nothing is imported when the module is. That is the
one exception to the rule above, and a narrow one: a table names only what the module's own code never uses (not
bound at module level, read by no function that does not bind it itself), and each path names a fulmen module
that defines or imports that name.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import fulmen

ROOT = Path(fulmen.__file__).parent


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def _module_name(path: Path) -> str:
    parts = ["fulmen", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(module: str) -> set[str]:
    """Modules ``module`` imports when it is imported: module-level statements, TYPE_CHECKING blocks left out,
    each with the packages whose ``__init__`` the import runs."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.If):
                if not _is_type_checking(node):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for handler in node.handlers:
                    visit(handler.body)
                visit(node.finalbody)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)

    visit(ast.parse(path.read_text()).body)
    edges: set[str] = set()
    for name in found:
        if not name.startswith("fulmen"):
            continue
        parts = name.split(".")
        for end in range(2, len(parts) + 1):  # the packages on the way, then the module itself
            candidate = ".".join(parts[:end])
            if candidate in MODULES:
                edges.add(candidate)
    # a module's own packages are always initialised before it (Python imports parents first), so an edge back
    # to one of them never makes a cycle of its own
    return {edge for edge in edges if not _within(module, edge)}


GRAPH = {module: _runtime_imports(module) for module in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def strongconnect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            strongconnect(v)
    return found


def test_the_import_graph_is_read():
    """The walk sees real edges (a broken walk would make the tests below pass vacuously)."""
    assert "fulmen.runtime.state" in GRAPH["fulmen.loops.fit_loop"]
    assert "fulmen.loops" in GRAPH["fulmen.trainer.checkpointing"]  # `from fulmen.loops import resume`: the package
    assert "fulmen.trainer.flags" not in GRAPH["fulmen.runtime.context"]  # TYPE_CHECKING only
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert _cycles(GRAPH) == []


# The layers, top to bottom: a module may import from its own layer and the layers below it, never above, at
# import time or inside a function. Components (the second row) are what the trainer builds or a user passes;
# the loops reach them only through the hook dispatcher and the metrics hub.
LAYERS = (
    ("fulmen.trainer",),
    ("fulmen.callbacks", "fulmen.loggers", "fulmen.tuner", "fulmen.serve", "fulmen.profilers"),
    ("fulmen.loops",),
    ("fulmen.runtime", "fulmen.strategies"),
    ("fulmen.precision", "fulmen.plugins", "fulmen.accelerators", "fulmen.overrides"),
    ("fulmen.core",),
    ("fulmen.checkpoint",),
    ("fulmen.utilities",),
)
# Within a layer, what a package may still not import (each line says why). A package not named may import its
# siblings.
NEVER = {
    # the run state is what strategies are handed; the strategies are what the run state drives
    "fulmen.runtime": ("fulmen.strategies",),
    "fulmen.strategies": ("fulmen.runtime",),
    # a component sees a run only through the hooks it is called with
    "fulmen.callbacks": ("fulmen.loops",),
    "fulmen.tuner": ("fulmen.loops",),
    "fulmen.loggers": ("fulmen.loops", "fulmen.runtime", "fulmen.callbacks", "fulmen.tuner"),
    "fulmen.serve": ("fulmen.loops", "fulmen.runtime", "fulmen.strategies"),
    "fulmen.profilers": ("fulmen.loops", "fulmen.runtime", "fulmen.strategies", "fulmen.core",
                         "fulmen.callbacks", "fulmen.loggers", "fulmen.tuner"),
}  # fmt: skip
# The public face and the command line sit above every layer and may import anything: the package itself, the
# CLI, the demos, the `lightning.pytorch` alias and the names Lightning removed. So may a module that exists only
# to answer one of Lightning's import paths (its docstring starts with LIGHTNING_PATH_HEADER).
TOP = ("fulmen.cli", "fulmen.demos", "fulmen.as_lightning", "fulmen._as_lightning_boot", "fulmen._graveyard",
       "fulmen._removed_paths")  # fmt: skip
LIGHTNING_PATH_HEADER = "Lightning's import path "  # see test_a_lightning_path_module_names_its_own_path


def _layer(module: str) -> int | None:
    return next((i for i, row in enumerate(LAYERS) for package in row if _within(module, package)), None)


def _package(module: str) -> str | None:
    return next((package for row in LAYERS for package in row if _within(module, package)), None)


def is_lightning_path(module: str) -> bool:
    doc = ast.get_docstring(ast.parse(MODULES[module].read_text())) or ""
    return doc.startswith(LIGHTNING_PATH_HEADER)


def _tables(tree: ast.Module) -> set[int]:
    """The nodes inside ``lazy_aliases`` / ``lazy_exports`` calls (checked by the alias-table tests below) and
    the docstrings: the strings there name paths, they reach nothing."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name.lstrip("_") in ("lazy_aliases", "lazy_exports"):
                inside.update(id(n) for n in ast.walk(node))
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                inside.add(id(first.value))
    return inside


_DOTTED = re.compile(r"(?<![\w.])(fulmen(?:\.\w+)+)")


def _reaches(module: str) -> list[tuple[int, str]]:
    """Every fulmen module ``module`` reaches: import statements anywhere (a function's too; ``if
    TYPE_CHECKING:`` blocks left out) and dotted ``fulmen.x`` strings (what ``importlib`` or a comparison of
    qualified names would reach), each with its line."""
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    skip = _tables(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node):
            skip.update(id(n) for statement in node.body for n in ast.walk(statement))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.extend((node.lineno, match) for match in _DOTTED.findall(node.value))
    return [(line, name) for line, name in found if _within(name, "fulmen")]


def _wrong_reach(module: str, target: str) -> str | None:
    if any(_within(target, top) for top in TOP) or target == "fulmen":
        return "the top layer"
    own, theirs = _layer(module), _layer(target)
    if own is None or theirs is None:
        return None
    if theirs < own:
        return "a layer above"
    package, other = _package(module), _package(target)
    if package is not None and other is not None and package != other and other in NEVER.get(package, ()):
        return f"a package {package} never reaches"
    return None


def test_the_reach_walk_sees_function_imports_and_strings():
    """Function-level imports and ``fulmen.x`` strings are seen (a broken walk would pass vacuously)."""
    reached = {name for _, name in _reaches("fulmen.trainer.flag_parsing")}
    assert any(_within(name, "fulmen.profilers") for name in reached)  # imported inside _profiler()
    assert _wrong_reach("fulmen.utilities.data", "fulmen.core.module") == "a layer above"
    assert _wrong_reach("fulmen.core.saving", "fulmen.cli.instantiate") == "the top layer"
    assert _wrong_reach("fulmen.loggers.csv_logs", "fulmen.callbacks.callback") == "a package fulmen.loggers never reaches"
    assert _wrong_reach("fulmen.trainer.trainer", "fulmen.callbacks.callback") is None


@pytest.mark.parametrize("layer", [package for row in LAYERS for package in row])
def test_imports_point_one_way(layer):
    """No exception by name: a module needing something from above gets it moved down, or is handed it."""
    wrong = sorted(
        f"{module}:{line} reaches {target} ({why})"
        for module in MODULES
        if _within(module, layer) and not is_lightning_path(module)
        for line, target in _reaches(module)
        if (why := _wrong_reach(module, target))
    )
    assert wrong == []


# -- Lightning's module paths -----------------------------------------------------------------------------------
# Paths Lightning 1.x had and 2.x dropped (fulmen answers both eras); the rest are checked against Lightning itself.
LIGHTNING_1X_MODULES = ("strategies.ddp_spawn",)
_HEADER = re.compile(r"Lightning's import path ``(lightning\.pytorch(?:\.\w+)*)``")


def _lightning_has(path: str) -> bool:
    """Whether Lightning (2.x, installed with the test extras; or 1.x, from the list above) has module ``path``
    (given as fulmen's, without the ``fulmen.`` prefix)."""
    import importlib.util

    if path in LIGHTNING_1X_MODULES:
        return True
    try:
        return importlib.util.find_spec(f"lightning.pytorch.{path}") is not None
    except ModuleNotFoundError:
        return False


def test_a_lightning_path_module_names_its_own_path():
    """A module that exists only to answer Lightning's import path says so on its first line, naming that path,
    and Lightning has it."""
    pytest.importorskip("lightning")
    found = [module for module in MODULES if is_lightning_path(module)]
    assert len(found) > 10  # the walk finds them
    wrong = []
    for module in found:
        doc = ast.get_docstring(ast.parse(MODULES[module].read_text())) or ""
        match = _HEADER.match(doc)
        own = module.removeprefix("fulmen.")
        if match is None or match.group(1) != f"lightning.pytorch.{own}":
            wrong.append(f"{module}: the header must name ``lightning.pytorch.{own}``")
        elif not _lightning_has(own):
            wrong.append(f"{module}: Lightning has no module {match.group(1)}")
    assert wrong == []


def test_no_two_files_in_a_folder_differ_only_by_a_suffix():
    """``fit.py`` beside ``fit_loop.py`` leaves a reader guessing which holds the code: fulmen's own modules take
    names no other in their folder begins with. Only where Lightning itself has both names do both stay."""
    pytest.importorskip("lightning")
    wrong = []
    for folder in sorted({path.parent for path in MODULES.values()}):
        names = sorted({p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
                       | {p.name for p in folder.iterdir() if (p / "__init__.py").exists()})  # fmt: skip
        prefix = ".".join(folder.relative_to(ROOT).parts)
        for short in names:
            for long in names:
                if long != short and long.startswith(short):
                    paths = [f"{prefix}.{n}" if prefix else n for n in (short, long)]
                    if not all(_lightning_has(path) for path in paths):
                        wrong.append(f"{folder.relative_to(ROOT)}: {short} / {long}")
    assert wrong == []


def _private_trainer_accesses(source: str) -> list[str]:
    """``<...>.trainer._x`` / ``trainer._x`` / ``self._trainer._x``: a private name read through a trainer."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        owner = node.value
        name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else None
        if name in ("trainer", "_trainer"):
            found.append(f"{node.lineno}: .{node.attr}")
    return sorted(found)


def test_the_private_access_check_finds_accesses():
    source = "def f(trainer, module):\n    trainer._hooks.call()\n    module.trainer._progress = 1\n" \
             "    return self._trainer._data, trainer.public, module._private\n"  # fmt: skip
    assert _private_trainer_accesses(source) == ["2: ._hooks", "3: ._progress", "4: ._data"]


def test_no_private_trainer_state_outside_the_trainer_package():
    found = [
        f"{path.relative_to(ROOT)}:{hit}"
        for module, path in MODULES.items()
        if not _within(module, "fulmen.trainer")
        for hit in _private_trainer_accesses(path.read_text())
    ]
    assert found == []


def test_the_trainer_module_stays_small():
    """trainer.py holds the entry points and read-only properties; the rest lives in the layers above."""
    assert len((ROOT / "trainer" / "trainer.py").read_text().splitlines()) <= 600


# -- lazy_aliases tables: names a module only exposes ----------------------------------------------------------
def _alias_tables() -> dict[str, tuple[str, dict[str, str]]]:
    """``{module: (where the table is written, {name: "fulmen.x.y.attribute"})}`` of every ``lazy_aliases`` call:
    its first argument ``__name__`` (this module) or a module's name, its second a dict literal."""
    found: dict[str, tuple[str, dict[str, str]]] = {}
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name.lstrip("_") != "lazy_aliases":
                continue
            owner, table = node.args[0], node.args[1]
            target = module if isinstance(owner, ast.Name) and owner.id == "__name__" else ast.literal_eval(owner)
            assert target not in found, f"{target} has two lazy_aliases tables"
            found[target] = (module, ast.literal_eval(table))  # a literal: readable here, and by a reviewer
    return found


TABLES = _alias_tables()


def _runtime_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """Module-level statements that run: ``if TYPE_CHECKING:`` blocks left out."""
    out: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.If) and _is_type_checking(node):
            out.extend(_runtime_statements(node.orelse))
        elif isinstance(node, (ast.If, ast.Try)):
            out.append(node)
            for block in (node.body, node.orelse, getattr(node, "finalbody", []),
                          *(h.body for h in getattr(node, "handlers", []))):  # fmt: skip
                out.extend(_runtime_statements(block))
        else:
            out.append(node)
    return out


def _module_bindings(tree: ast.Module) -> set[str]:
    """Names bound at module level when the module runs (definitions, assignments, imports)."""
    bound: set[str] = set()
    for node in _runtime_statements(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return bound


def _global_reads(tree: ast.Module, name: str) -> list[int]:
    """Lines where the module's code reads ``name`` as a global: at module level, or in a function that does not
    bind it itself (a local import). Annotations and ``if TYPE_CHECKING:`` blocks are not code that runs."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        annotations = []
        if isinstance(node, ast.If) and _is_type_checking(node):
            annotations.extend(node.body)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg]
            annotations.extend(a.annotation for a in args if a is not None and a.annotation is not None)
            annotations.append(node.returns)
        if isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        skip.update(id(n) for a in annotations if a is not None for n in ast.walk(a))

    def binds(function: ast.AST) -> bool:
        for n in ast.walk(function):
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store):
                return True
            if isinstance(n, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == name for a in n.names):
                return True
            if isinstance(n, ast.arg) and n.arg == name:
                return True
        return False

    reads: list[int] = []

    def visit(node: ast.AST, in_binding_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if id(child) in skip:
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                visit(child, in_binding_function or binds(child))
                continue
            read = isinstance(child, ast.Name) and child.id == name and isinstance(child.ctx, ast.Load)
            if read and not in_binding_function:
                reads.append(child.lineno)
            visit(child, in_binding_function)

    visit(tree, False)
    return reads


def test_the_alias_tables_are_read():
    """The walk sees the tables (a broken walk would make the test below pass vacuously), and its rule works."""
    assert TABLES["fulmen.core.module"][1]["Callback"] == "fulmen.core.hooks.Callback"
    assert "is_overridden" in TABLES["fulmen.trainer.trainer"][1]  # a table written in another module
    source = "import x\nfrom y import z\ndef f():\n    from y import Callback\n    return Callback\ndef g(a: Callback):\n    return Callback\n"
    assert _global_reads(ast.parse(source), "Callback") == [7]


@pytest.mark.parametrize("module", sorted(TABLES))
def test_an_alias_table_only_exposes_names_the_module_does_not_use(module):
    written_in, table = TABLES[module]
    tree = ast.parse(MODULES[module].read_text())
    bound = _module_bindings(tree)
    wrong = []
    for name, path in sorted(table.items()):
        home, _, attribute = path.rpartition(".")
        if name in bound:
            wrong.append(f"{name}: bound in {module} itself, the table entry is never used")
        if reads := _global_reads(tree, name):
            wrong.append(f"{name}: read by {module}'s code (lines {reads}): import it, do not alias it")
        if home not in MODULES:
            wrong.append(f"{name}: {home} is not a fulmen module")
        elif attribute not in _module_bindings(ast.parse(MODULES[home].read_text())):
            wrong.append(f"{name}: {home} does not define or import {attribute}")
    assert wrong == [], f"the table of {module} (written in {written_in})"

