"""``cmq archive --follow`` as a process (its own JVM) against the test double of the cluster:
segments released while it runs are archived, it backs off when idle, a cluster that is down
for a while is retried, SIGTERM during a batch lets that batch finish and exits 0, and every
record is in the output exactly once."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.archive.conftest import NEEDS_JAVA
from tests.archive.fake_cluster import FakeCluster
from tests.archive.output import check_exactly_once, manifests

pytestmark = [NEEDS_JAVA, pytest.mark.slow]  # a real `cmq archive` process and its JVM
WAIT = 120.0
"""Seconds allowed for each expected line (generous: a loaded shared machine; a quiet one
needs a few)."""


class Lines:
    """The process's stdout, one JSON object per line, read on a thread."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.q: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        assert proc.stdout is not None
        out = proc.stdout
        threading.Thread(target=self._read, args=(out,), daemon=True).start()

    def _read(self, out: Any) -> None:
        for raw in out:
            if raw.startswith("{"):  # Spark's JVM may write a blank line of its own
                self.q.put(json.loads(raw))

    def until(self, pred: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        """Lines until one satisfies ``pred`` (all kept in ``seen``)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no such line within {timeout} s; seen {self.seen}"
            try:
                got = self.q.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(got)
            if pred(got):
                return got


def test_follow_archives_as_segments_are_released_backs_off_and_stops_on_sigterm(
    fake: FakeCluster, tmp_path: Path
) -> None:
    fake.add_segments("q", [40, 30, 20])
    expected = fake.records("q")
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cmq",
            "archive",
            "--follow",
            "--url",
            ",".join(fake.urls),
            "--out",
            str(out),
            "--max-segments",
            "2",
            "--idle-backoff-max",
            "2",
            "--timeout",
            "3",
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=(tmp_path / "stderr.log").open("w"),  # a file: a full pipe would block it
        text=True,
    )
    err_log = tmp_path / "stderr.log"
    try:
        lines = Lines(proc)
        # A full batch (2 of 3 segments: the next at once), then the rest.
        first = lines.until(lambda x: x["ok"], 5 * WAIT)  # the JVM starts first
        assert (first["segments"], first["next_in"]) == (2, 0.0)
        second = lines.until(lambda x: x["ok"], WAIT)
        assert second["segments"] == 1 and 0.8 <= second["next_in"] <= 1.0
        # Idle: the waits grow to the cap (2 s, jitter shortens by up to a fifth).
        idle = [lines.until(lambda x: True, WAIT) for _ in range(2)]
        assert [x["segments"] for x in idle] == [0, 0]
        assert 0.8 <= idle[0]["next_in"] <= 1.0 and 1.6 <= idle[1]["next_in"] <= 2.0
        # The cluster goes away for a while: logged with its code and retried.
        for nid in (1, 2, 3):
            fake.set_down(nid)
        down = lines.until(lambda x: True, WAIT)  # after --timeout of retries
        assert (down["ok"], down["code"]) == (False, "cluster_unavailable")
        assert down["next_in"] > 0
        for nid in (1, 2, 3):
            fake.faults[nid].down = False
            fake.set_up(nid)
        # Released while it runs: archived by the next batches.
        fake.add_segments("q", [25, 35])
        fake.add_segments("q", [5], state="sealed")
        expected += [r for r in fake.records("q") if r["seq"] < 150]
        got = lines.until(lambda x: x["ok"] and x["segments"] > 0, WAIT)
        assert got["segments"] == 2
        # SIGTERM during a batch: that batch finishes, then the process exits 0.
        fake.delay = 1.5
        fake.add_segments("q", [15])  # after the sealed one: seqs 155..169
        last = fake.records("q")[-15:]
        deadline = time.monotonic() + WAIT
        while fake.inflight == 0:
            assert time.monotonic() < deadline, lines.seen
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=WAIT)
        err = err_log.read_text()
        assert proc.returncode == 0, err
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        print(err_log.read_text()[-4000:], file=sys.stderr)  # the process's log
        raise
    assert "stopping after the batch in flight" in err
    final = lines.until(lambda x: x["ok"] and x["segments"] > 0, 10)
    assert final["segments"] == 1 and final["rows"] == 15
    assert lines.q.empty()  # nothing after the stop
    assert "error: cluster_unavailable" in err
    # Every released record once; only the sealed segment is left on the cluster.
    check_exactly_once(out, expected + last)
    assert fake.remaining("q") == [150]
    assert sum(len(m["segments"]) for m in manifests(out)) == 6
    assert len({m["batch_id"] for m in manifests(out)}) == 4
