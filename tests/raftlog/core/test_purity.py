"""raftlog/core must stay pure: no I/O, clocks, event loops or global randomness at run time."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[3] / "raftlog" / "core"
FORBIDDEN = {
    "asyncio",
    "os",
    "socket",
    "time",
    "random",
    "threading",
    "subprocess",
    "io",
    "pathlib",
    "datetime",
    "selectors",
    "signal",
    "shutil",
    "tempfile",
}


def runtime_imports(tree: ast.Module) -> set[str]:
    """Top-level module names imported outside ``if TYPE_CHECKING:`` blocks."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def core_files() -> list[Path]:
    files = sorted(CORE.glob("*.py"))
    assert files, "raftlog/core has no modules?"
    return files


@pytest.mark.parametrize("path", core_files(), ids=lambda p: p.name)
def test_core_module_imports_nothing_impure(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    bad = runtime_imports(tree) & FORBIDDEN
    assert not bad, f"{path.name} imports {sorted(bad)} at run time"


def test_checker_catches_an_impure_import() -> None:
    planted = ast.parse("import os\nfrom time import monotonic\n")
    assert runtime_imports(planted) & FORBIDDEN == {"os", "time"}
    typed_only = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import random\n"
    )
    assert runtime_imports(typed_only) & FORBIDDEN == set()
