"""End to end: `loadtest/run.sh` against a real `cmq dev` cluster with an impossible send SLO."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("locust") is None or not (BIN / "locust").exists(),
        reason="locust is not installed (pip install -e '.[loadtest]' or make loadtest)",
    ),
]


def test_run_records_e2e_and_an_impossible_slo_fails(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        BIN=str(BIN),
        LOADTEST_OUT=str(tmp_path),
        LOADTEST_SHAPE="soak",
        LOADTEST_SECONDS="12",
        LOADTEST_USERS="6",
        LOADTEST_TIMEOUT="90",
        SLO_SEND_P99_MS="0.001",  # impossible: every run must fail this gate
    )
    env.pop("LOADTEST_SLO_REPORT", None)
    env.pop("CMQ_URLS", None)
    proc = subprocess.run(
        [str(ROOT / "loadtest" / "run.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 1, output
    assert "SLO FAILED: send p99" in output, output

    for name in ("cmq_stats.csv", "cmq_stats_history.csv", "cmq_failures.csv", "report.html"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert "send-to-receive" in (tmp_path / "report.html").read_text()

    with (tmp_path / "cmq_stats.csv").open() as f:
        rows = {(r["Type"], r["Name"]): r for r in csv.DictReader(f)}
    assert int(rows["E2E", "send-to-receive"]["Request Count"]) > 0
    assert int(rows["POST", "send"]["Request Count"]) > 0

    verdict = json.loads((tmp_path / "slo.json").read_text())
    assert verdict["passed"] is False
    assert any(b.startswith("send p99") for b in verdict["breaches"]), verdict
    assert not any(": no " in b for b in verdict["breaches"]), verdict  # traffic did flow
    assert verdict["observed"]["e2e_count"] > 0
    assert verdict["observed"]["send_p99_ms"] > 0.001
