"""``cmq archive`` as a command (no Spark needed here): help, bad arguments, an unknown queue, and
a run with nothing to archive, which never starts a JVM."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.archive.fake_cluster import FakeCluster


def cmq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cmq", "archive", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_help_and_bad_arguments() -> None:
    assert "--max-segments" in cmq("--help").stdout
    bad = cmq("--url", ",", "--out", "x")
    assert bad.returncode == 2 and "invalid_argument" in bad.stderr
    assert cmq("--out", "x").returncode == 2  # --url is required


def test_nothing_to_archive_starts_no_spark(fake: FakeCluster, tmp_path: Path) -> None:
    fake.add_segments("q", [5], state="sealed")
    got = cmq("--url", ",".join(fake.urls), "--out", str(tmp_path), "--json")
    assert got.returncode == 0, got.stderr
    summary = json.loads(got.stdout)
    assert (summary["segments"], summary["rows"], summary["skipped"]) == (0, 0, 0)
    assert "Spark" not in got.stderr and "log4j" not in got.stderr
    steps = [line.split("] ", 1)[1] for line in got.stderr.splitlines() if line.startswith("[")]
    assert steps[-1] == "listing and claiming released segments", got.stderr  # the progress
    assert fake.remaining("q") == [0]


def test_an_unknown_queue_fails_with_its_code(fake: FakeCluster, tmp_path: Path) -> None:
    got = cmq("--url", fake.urls[0], "--out", str(tmp_path), "--queue", "nope")
    assert got.returncode == 1
    assert "error: api_error: HTTP 404 queue_not_found" in got.stderr
