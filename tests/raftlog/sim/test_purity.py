"""The core simulator's randomness is seeded: every generator is a ``random.Random`` made from the
run's seed, never the module-level functions of ``random``.

(What the simulator may import, no I/O, clocks or event loops, is the ``sim-pure`` import-linter
contract in pyproject.toml, run by ``make lint``.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SIM = Path(__file__).resolve().parents[3] / "raftlog" / "sim"
IMPURE = {"__main__.py", "runtime_sim.py", "vloop.py"}
"""The command line, and the real asyncio runtime on a virtual-time loop."""


def sim_files() -> list[Path]:
    files = sorted(p for p in SIM.glob("*.py") if p.name not in IMPURE)
    assert files, "raftlog/sim has no modules?"
    return files


def global_random_uses(tree: ast.Module) -> list[str]:
    """``random.<name>`` attribute uses other than ``random.Random``."""
    return [
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "random"
        and node.attr != "Random"
    ]


@pytest.mark.parametrize("path", sim_files(), ids=lambda p: p.name)
def test_sim_module_uses_no_global_random(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    assert not global_random_uses(tree), f"{path.name} uses random.{global_random_uses(tree)}"


def test_checker_catches_global_random() -> None:
    planted = ast.parse("import random\nrng = random.Random(1)\nx = random.random()\n")
    assert global_random_uses(planted) == ["random"]
