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
    assert "fulmen.runtime.state" in GRAPH["fulmen.loops.fit"]
    assert "fulmen.loops" in GRAPH["fulmen.trainer.checkpointing"]  # `from fulmen.loops import resume`: the package
    assert "fulmen.trainer.config" not in GRAPH["fulmen.runtime.context"]  # TYPE_CHECKING only
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    assert _cycles(GRAPH) == []


# what each layer may not import at import time (the layers above it)
_ABOVE = {
    "fulmen.utilities": ("fulmen.core", "fulmen.runtime", "fulmen.strategies", "fulmen.loops", "fulmen.trainer",
                         "fulmen.callbacks", "fulmen.loggers", "fulmen.tuner", "fulmen.precision"),
    "fulmen.core": ("fulmen.runtime", "fulmen.strategies", "fulmen.loops", "fulmen.trainer", "fulmen.tuner"),
    "fulmen.precision": ("fulmen.runtime", "fulmen.strategies", "fulmen.loops", "fulmen.trainer", "fulmen.tuner"),
    "fulmen.runtime": ("fulmen.strategies", "fulmen.loops", "fulmen.trainer", "fulmen.tuner", "fulmen.loggers",
                       "fulmen.callbacks"),
    "fulmen.strategies": ("fulmen.runtime", "fulmen.loops", "fulmen.trainer", "fulmen.callbacks", "fulmen.tuner"),
    "fulmen.loops": ("fulmen.trainer", "fulmen.callbacks", "fulmen.loggers", "fulmen.tuner"),
    "fulmen.callbacks": ("fulmen.trainer", "fulmen.loops"),
    "fulmen.tuner": ("fulmen.trainer", "fulmen.loops"),
    "fulmen.loggers": ("fulmen.trainer", "fulmen.loops", "fulmen.runtime"),
    # the plugins users pass (precision, checkpoint I/O, cluster environments) read strategies' launcher layout
    "fulmen.plugins": ("fulmen.trainer", "fulmen.loops", "fulmen.runtime", "fulmen.callbacks", "fulmen.loggers",
                       "fulmen.tuner"),
    # the trainer builds profilers from its flag; the dispatcher only calls their start / stop
    "fulmen.profilers": ("fulmen.trainer", "fulmen.loops", "fulmen.runtime", "fulmen.strategies", "fulmen.core",
                         "fulmen.callbacks", "fulmen.loggers", "fulmen.tuner"),
    # serving is a callback: it sees a run only through the hooks it is called with
    "fulmen.serve": ("fulmen.trainer", "fulmen.loops", "fulmen.runtime", "fulmen.strategies", "fulmen.tuner"),
}  # fmt: skip


@pytest.mark.parametrize("layer", sorted(_ABOVE))
def test_imports_point_one_way(layer):
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in GRAPH.items()
        if _within(module, layer)
        for target in targets
        if any(_within(target, above) for above in _ABOVE[layer])
    )
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
    assert TABLES["fulmen.core.module"][1]["Callback"] == "fulmen.callbacks.callback.Callback"
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

