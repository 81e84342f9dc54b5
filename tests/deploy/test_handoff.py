"""A node stopped with SIGTERM (what Kubernetes and `docker stop` send) first hands the
leadership of its groups to other nodes, so a rolling restart costs no election timeout."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.cmq.cluster import CmqCluster, request

pytestmark = pytest.mark.slow


def _leaders(cluster: CmqCluster, nid: int) -> dict[str, int]:
    status, body = request(cluster.http[nid], "GET", "/v1/status")
    assert status == 200
    return {g: v["leader"] for g, v in body["groups"].items()}


def test_sigterm_hands_leadership_off_before_exiting(tmp_path: Path) -> None:
    cluster = CmqCluster(tmp_path, n=3, groups=2)
    cluster.start_all()
    try:
        # The node leading the most groups (the meta group and 2 data groups) is stopped.
        leaders = _leaders(cluster, 1)
        counts = {n: list(leaders.values()).count(n) for n in cluster.procs}
        victim = max(counts, key=lambda n: counts[n])
        assert counts[victim] >= 1
        proc = cluster.procs.pop(victim)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        took = time.monotonic() - started
        log = (tmp_path / f"node{victim}.log").read_text()
        assert f"cmq node {victim} stopping; groups still led here: 0" in log, log[-2000:]
        assert took < 10
        # The others lead every group at once: no election timeout was needed.
        other = next(n for n in cluster.procs)
        after = _leaders(cluster, other)
        assert all(v not in (0, victim) for v in after.values()), after
    finally:
        cluster.stop_all()
