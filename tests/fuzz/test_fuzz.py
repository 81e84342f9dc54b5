"""The fuzz targets (`tests.fuzz.targets`): their committed seeds decode, every input that once
broke a decoder is now handled, and a bounded atheris run of each target finds nothing.

`make fuzz` runs the same harnesses for ``FUZZ_SECONDS`` each (docs/testing.md, "Fuzzing")."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fuzz.targets import CORPUS, TARGETS

REGRESSIONS = Path(__file__).parent / "regressions"
RUNS = int(os.environ.get("FUZZ_RUNS", "20000"))
"""Inputs per target in the bounded run (about a second each)."""
ROOT = Path(__file__).parents[2]


def _inputs(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_file())


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_seeds_are_real_encodings(name: str) -> None:
    """Each target's seed corpus exists and at least one seed decodes to a value (the fuzzer
    starts from valid encodings, not only from refusals); none breaks the property."""
    seeds = _inputs(CORPUS / name)
    assert seeds, f"no seeds for {name}"
    decoded = [TARGETS[name].check(p.read_bytes()) for p in seeds]
    assert any(decoded), f"no seed of {name} decodes"


def test_committed_seeds_match_the_generator() -> None:
    """The committed corpus is what `tests.fuzz.seeds` writes today (regenerate it when an
    encoding changes: ``python -m tests.fuzz.seeds``)."""
    from tests.fuzz.seeds import seeds

    for name, inputs in seeds().items():
        committed = sorted(p.read_bytes() for p in _inputs(CORPUS / name))
        assert committed == sorted(inputs), f"tests/fuzz/corpus/{name} is stale"


@pytest.mark.parametrize("path", _inputs(REGRESSIONS), ids=lambda p: p.name)
def test_regression(path: Path) -> None:
    """An input that once raised an undocumented exception now decodes or is refused with the
    documented error (the file name starts with its target; `check` raises otherwise)."""
    target = next(t for t in TARGETS if path.name.startswith(t + "-"))
    assert TARGETS[target].check(path.read_bytes()) in (True, False)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_bounded_run(tmp_path: Path) -> None:
    """``RUNS`` coverage-guided inputs per target from its seeds, every target in one process
    (`tests.fuzz.run` ``all``): no crash, no hang (each child exits 0 only then; a finding is
    left under ``tmp_path`` and printed)."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.fuzz.run", "all", "--runs", str(RUNS), "--out", tmp_path],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    findings = [p for p in tmp_path.rglob("*") if p.name.startswith(("crash-", "timeout-"))]
    assert proc.returncode == 0 and not findings, proc.stderr[-4000:]
    for name in TARGETS:
        assert f"fuzz target {name}: exit 0" in proc.stderr
