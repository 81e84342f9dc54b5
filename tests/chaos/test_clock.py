"""The clock-offset hook of a node (`CMQ_CLOCK_OFFSET_MS`) and how a run with clock faults is
judged (lease overlaps reported, not failed; losses and redeliveries after ack still fail)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from cmq.errors import InvalidParameter
from cmq.routing.clock import clock_offset_ms
from tests.chaos.checker import Report
from tests.chaos.runner import RunConfig, RunResult


def test_offset_parsing() -> None:
    assert clock_offset_ms("") == 0
    assert clock_offset_ms("-2500") == -2500
    with pytest.raises(InvalidParameter, match="CMQ_CLOCK_OFFSET_MS must be an integer"):
        clock_offset_ms("5s")


def test_a_node_process_clock_carries_the_offset() -> None:
    code = "from cmq.routing.clock import node_clock; print(node_clock().wall_ms())"
    env = dict(os.environ, CMQ_CLOCK_OFFSET_MS="-7000")
    before = time.time_ns() // 1_000_000
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, check=True, capture_output=True, text=True
    )
    after = time.time_ns() // 1_000_000
    assert before - 7000 <= int(out.stdout) <= after - 7000


def result(faults: dict[str, int], report: Report) -> RunResult:
    return RunResult(
        cfg=RunConfig(seed=1),
        report=report,
        faults=Counter(faults),
        fault_errors=[],
        replica_problems=[],
        crashed={},
        drained=True,
        skipped=[],
        elapsed=1.0,
        root=Path("/nonexistent"),
        log_errors={},
    )


def test_clock_jumps_excuse_lease_overlaps_only() -> None:
    rep = Report(lease_overlaps=["q/1: ops 3 and 9 both leased it for 2.000s"])
    assert not result({"kill": 1}, rep).ok
    assert result({"clock": 1, "clock-jump": 1}, rep).ok
    # Drift under the bound excuses nothing (the checker's tolerance already allows its skew).
    assert not result({"clock": 1, "clock-drift": 1}, rep).ok
    rep.lost = ["k1"]
    assert [f[:6] for f in result({"clock": 1, "clock-jump": 1}, rep).failures()] == ["lost=1"]
    rep.lost, rep.redelivered_after_ack = [], ["q/1 (k): received 1.0s after its ack"]
    assert not result({"clock": 1, "clock-jump": 1}, rep).ok
