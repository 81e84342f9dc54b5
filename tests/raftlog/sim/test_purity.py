"""The Raft simulator stays pure: only the CLI's ``__main__`` may touch clocks or the process.

(``vloop.py``, the virtual-time asyncio loop for simulating the runtime, is not part of it.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.raftlog.core.test_purity import FORBIDDEN, runtime_imports

SIM = Path(__file__).resolve().parents[3] / "raftlog" / "sim"
ALLOWED = {"random"}  # seeded generators only: every instance comes from the run's seed


PURE = ("__init__.py", "checker.py", "disk.py", "network.py", "node.py", "simulation.py")


def sim_files() -> list[Path]:
    return [SIM / name for name in PURE]


@pytest.mark.parametrize("path", sim_files(), ids=lambda p: p.name)
def test_sim_module_imports_nothing_impure(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    bad = runtime_imports(tree) & (FORBIDDEN - ALLOWED)
    assert not bad, f"{path.name} imports {sorted(bad)} at run time"


@pytest.mark.parametrize("path", sim_files(), ids=lambda p: p.name)
def test_sim_module_uses_no_global_random(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "random"
        ):
            assert node.attr == "Random", f"{path.name} uses random.{node.attr}"
