"""Seeds for the simulator sweeps of `make test`: fresh whenever the code under test changes,
the same for a given commit, and replayable with one variable.

A sweep's seeds are ``range(base, base + count)``, ``base`` drawn from a *draw* and the
sweep's name. The draw is a digest of the committed trees of the packages the sweep exercises
(``git rev-parse HEAD:raftlog``, ``HEAD:cmq``): a change to ``raftlog/`` gives every raftlog
sweep new seeds, and a clean clone of the same commit (CI) runs exactly the seeds a local run
of that commit ran. ``TEST_SEED_DRAW=<any text>`` replaces the draw (new seeds at will, or a
printed draw replayed elsewhere); outside a git checkout it is ``"0"``. The pytest header
prints the draws (`tests.conftest`) and a failing sweep names its seed, which replays alone
(`python -m raftlog.sim --seed S --seeds 1`, ``python -m tests.nodesim --seed S``, ...). The
fixed long sweeps stay in ``make sim-long``; seeds that once found a bug are pinned in tests
of their own.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV = "TEST_SEED_DRAW"
SPAN = 10_000_000
"""Bases are below this, well above the small seeds that pinned regression tests use."""
FLOOR = 100_000
RAFT = ("raftlog",)
"""The core and runtime simulators exercise raftlog only."""
QUEUE = ("raftlog", "cmq")
"""The queue and whole-node simulators exercise both packages."""


@functools.cache
def draw(paths: tuple[str, ...]) -> str:
    """``TEST_SEED_DRAW`` if set, else a digest of the committed trees of ``paths``, else
    ``"0"`` (not a git checkout)."""
    fixed = os.environ.get(ENV)
    if fixed:
        return fixed
    try:
        out = subprocess.run(
            ["git", "rev-parse", *(f"HEAD:{p}" for p in paths)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "0"
    return hashlib.sha256(out.encode()).hexdigest()[:12]


def rotating_seeds(name: str, count: int, paths: tuple[str, ...] = RAFT) -> range:
    """``count`` consecutive seeds for the sweep ``name`` over the code in ``paths``."""
    h = int(hashlib.sha256(f"{draw(paths)}:{name}".encode()).hexdigest()[:12], 16)
    base = FLOOR + h % (SPAN - FLOOR)
    return range(base, base + count)


def header() -> str:
    """The pytest header line: each draw, and how to replay or change it."""
    return (
        f"simulator seed draws: raftlog={draw(RAFT)} raftlog+cmq={draw(QUEUE)} "
        f"({ENV}=<text> draws others)"
    )
