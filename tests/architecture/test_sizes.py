"""Every room stays small enough to read: no source file over 500 lines, no function over 60.

The exceptions are a table in docs/architecture.md ("Size limits"), each with its reason, and this test reads that
table: a file or function over the limit that the table does not name fails, and so does a row naming one that is
back under the limit (the table never goes stale).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import fulmen

ROOT = Path(fulmen.__file__).parent
DOCS = ROOT.parents[1] / "docs" / "architecture.md"
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60


def _over_the_limits() -> dict[str, int]:
    """``{"strategies/strategy.py": 775, "trainer/config.py::_parse_loop": 106, ...}``: what is over a limit."""
    found: dict[str, int] = {}
    for path in sorted(ROOT.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        source = path.read_text()
        if (lines := len(source.splitlines())) > MAX_FILE_LINES:
            found[name] = lines
        tree = ast.parse(source)

        def visit(node: ast.AST, prefix: str, name: str = name) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = child.end_lineno - child.lineno + 1  # type: ignore[operator]
                    if length > MAX_FUNCTION_LINES:
                        found[f"{name}::{prefix}{child.name}"] = length
                    visit(child, f"{prefix}{child.name}.")

        visit(tree, "")
    return found


def _exceptions() -> dict[str, str]:
    """The table under "## Size limits" in docs/architecture.md: ``| `name` | reason |`` rows."""
    text = DOCS.read_text()
    section = text.split("## Size limits", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| (.+?) \|$", section, flags=re.MULTILINE)
    return dict(rows)


def test_the_size_check_sees_files_and_methods():
    found = _over_the_limits()
    assert all(lines > MAX_FILE_LINES for name, lines in found.items() if "::" not in name)
    assert _exceptions(), "the table of exceptions is read"


def test_nothing_is_over_the_limits_unless_the_architecture_names_it():
    found = _over_the_limits()
    exceptions = _exceptions()
    unnamed = sorted(f"{name} ({lines} lines)" for name, lines in found.items() if name not in exceptions)
    stale = sorted(name for name in exceptions if name not in found)
    assert unnamed == [], "over the limit: split it, or name it in docs/architecture.md with the reason"
    assert stale == [], "back under the limit: remove its row from docs/architecture.md"
