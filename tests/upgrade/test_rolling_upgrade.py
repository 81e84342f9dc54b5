"""A rolling upgrade from the previous release under load, and the downgrade refusal.

Real processes (`tests.chaos.cluster.ChaosCluster`): a 3-node cluster runs the previous
release's code (`tests.upgrade.releases`, from the commit ``RELEASES.toml`` records), with the
chaos workload (producers and consumers over HTTP, every operation recorded and checked: nothing
confirmed lost, nothing unexpected, nothing delivered again after its ack) and a producer over
the stream protocol. The nodes are replaced one at a time with this release on the same data
directories, in the Helm chart's order (highest ordinal first; SIGTERM, then wait for
``/readyz``); the leader of a data group is killed once mid-upgrade. While releases are mixed,
old and new nodes replicate the same groups, each way round (an old leader with a new follower,
and a new leader with an old follower, both observed). Then every feature flag is enabled, the
load runs on, the queues are drained and the replicas compared byte for byte (the digest route).

The downgrade: a node of this release whose data directory records a feature flag it does not
know (what the next release leaves once its flag is enabled) must exit at start with an error
naming the flag, and change nothing on disk. The previous release (0.1.0) predates that record
and cannot refuse this release's data: a downgrade to it is not supported (docs/operations.md,
"Upgrades").

Figures (printed, for the release notes): seconds per node replaced, and the longest gaps in
confirmed sends the producers saw during the upgrade.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import statistics
import time
from pathlib import Path

import pytest

from cmq.client import Client
from cmq.client.stream import StreamClient
from cmq.errors import CmqError
from cmq.node import feature_marker
from cmq.upgrade import features
from tests.chaos.checker import check
from tests.chaos.cluster import ChaosCluster, snapshot_code
from tests.chaos.history import History
from tests.chaos.runner import create_queues, drain, quiesce
from tests.chaos.workload import Workload, WorkloadConfig
from tests.upgrade.releases import checkout, have_commit, previous_release, same_dependencies

QUEUES = ("chaos-a", "chaos-b")
STREAM_QUEUE = "upgrade-stream"

pytestmark = pytest.mark.slow


def _digest_dir(root: Path) -> dict[str, str]:
    """Every file under ``root``: relative path -> SHA-256 of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


async def _stream_producer(urls: list[str], stop: asyncio.Event, confirmed: set[str]) -> None:
    """Sends over the stream protocol until ``stop``; a send that fails is not confirmed (the
    client reconnects to another node on the next one)."""
    n = 0
    async with StreamClient(urls, timeout=5) as client:
        while not stop.is_set():
            n += 1
            with contextlib.suppress(CmqError, OSError, asyncio.TimeoutError):
                sent = await client.send(STREAM_QUEUE, [f"s{n}-{i}".encode() for i in range(4)])
                confirmed.update(m.id for m in sent)
            await asyncio.sleep(0.03)


async def _drain_stream_queue(cluster: ChaosCluster, confirmed: set[str]) -> set[str]:
    """Receive and ack the stream queue until every confirmed id came back (or 60 s)."""
    got: set[str] = set()
    deadline = time.monotonic() + 60
    while not confirmed <= got and time.monotonic() < deadline:
        with contextlib.suppress(CmqError, OSError, asyncio.TimeoutError):
            batch = await cluster.node(1, 10).receive(
                STREAM_QUEUE, max_messages=10, visibility_timeout=30, wait_seconds=1
            )
            if batch:
                await cluster.node(1, 10).ack(STREAM_QUEUE, [m.receipt for m in batch])
                got.update(m.id for m in batch)
    return confirmed - got


async def _receipt_lengths(client: Client) -> set[int]:
    """The lengths of the receipts of a receive from the stream queue; the messages are
    visible again at once (a visibility of 0)."""
    batch = await client.receive(STREAM_QUEUE, max_messages=4, visibility_timeout=0, wait_seconds=5)
    assert batch, "the stream queue has no message to probe"
    return {len(m.receipt) for m in batch}


async def _watch_leaders(
    cluster: ChaosCluster, release_of: dict[int, str], seen: set[tuple[str, str]]
) -> None:
    """Record (leader's release, a follower's release) of every group, twice a second."""
    while True:
        for status in (await cluster.statuses()).values():
            for info in status["groups"].values():
                leader = int(info.get("leader") or 0)
                if info.get("role") != "leader" or leader not in release_of:
                    continue
                for peer in info.get("lag", {}) or {}:
                    if int(peer) in release_of:
                        seen.add((release_of[leader], release_of[int(peer)]))
        await asyncio.sleep(0.5)


async def _wait_node_ready(cluster: ChaosCluster, nid: int, timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        with contextlib.suppress(Exception):
            if await cluster.node(nid, 2).ready():
                return time.monotonic() - start
        await asyncio.sleep(0.1)
    raise AssertionError(f"node {nid} not ready within {timeout} s; logs in {cluster.root}")


def _send_gaps(history: History, since: float, until: float) -> list[float]:
    """Gaps (s) between consecutive confirmed sends, from any producer, in [since, until]."""
    ends = sorted(
        op.end for op in history.ops if op.kind == "send" and op.outcome == "ok"
        and since <= op.end <= until
    )  # fmt: skip
    return [b - a for a, b in itertools.pairwise(ends)]


async def test_rolling_upgrade_from_the_previous_release_then_no_downgrade(
    tmp_path: Path,
) -> None:
    prev = previous_release()
    if not have_commit(prev.commit):
        pytest.skip(f"release {prev.version}'s commit {prev.commit} is not in this clone's history")
    assert same_dependencies(prev.commit), (
        f"release {prev.version} ran on other dependencies: build it a virtualenv of its own"
    )
    old = checkout(prev.commit, tmp_path / "code-old")
    new = snapshot_code(tmp_path / "code-new")
    cluster = ChaosCluster(tmp_path / "cluster", n=3, groups=2, code=old)
    release_of = dict.fromkeys(cluster.ids, prev.version)
    history = History()
    workload = Workload(cluster.http, history, WorkloadConfig(), seed=25, tag="up")
    stop_stream = asyncio.Event()
    stream_confirmed: set[str] = set()
    mixed: set[tuple[str, str]] = set()
    tasks: list[asyncio.Task[None]] = []
    try:
        await cluster.start()
        await create_queues(cluster, (*QUEUES, STREAM_QUEUE))
        await workload.start()
        tasks.append(
            asyncio.ensure_future(
                _stream_producer(list(cluster.http.values()), stop_stream, stream_confirmed)
            )
        )
        tasks.append(asyncio.ensure_future(_watch_leaders(cluster, release_of, mixed)))
        await asyncio.sleep(3.0)

        upgrade_start = time.monotonic()
        per_node: dict[int, float] = {}
        for nid in sorted(cluster.ids, reverse=True):  # the chart's order: highest first
            began = time.monotonic()
            await cluster.terminate(nid)
            cluster.code = new
            cluster.start_node(nid)
            release_of[nid] = "new"
            await _wait_node_ready(cluster, nid, 90)
            per_node[nid] = time.monotonic() - began
            await asyncio.sleep(2.0)  # mixed releases serve for a while
            if nid == 2:  # mid-upgrade: kill a data group's leader once, whatever it runs
                leaders = await cluster.leaders()
                victim = leaders.get(1) or leaders.get(2)
                assert victim, leaders
                cluster.kill(victim)
                cluster.code = new if release_of[victim] == "new" else old
                cluster.start_node(victim)
                await _wait_node_ready(cluster, victim, 90)
        upgrade_end = time.monotonic()
        await cluster.wait_ready(60)

        client = cluster.node(1, 15)
        # Until batch_receipts is enabled, receipts keep layout 1 (43 characters), which the
        # previous release reads; then layout 2 (59: one MAC per run), acked as runs.
        assert await _receipt_lengths(client) == {43}
        enabled = await client.enable_features()
        assert sorted(enabled) == sorted(features.KNOWN)
        rows = await client.list_features()
        assert all(r["enabled"] and r["missing"] == [] for r in rows), rows
        await asyncio.sleep(3.0)  # load on the upgraded cluster, flags enabled
        assert await _receipt_lengths(client) == {59}

        stop_stream.set()
        await workload.stop_producers()
        assert await drain(cluster, workload, QUEUES, 120), "the queues did not drain"
        await workload.stop()
        stream_missing = await _drain_stream_queue(cluster, stream_confirmed)
        problems = await quiesce(cluster, (*QUEUES, STREAM_QUEUE))
    finally:
        stop_stream.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await workload.stop()
        history.close()

    try:
        report = check(history.ops)
        assert report.acked > 300, report.acked
        assert not report.lost, report.lost[:5]
        assert not report.unexpected, report.unexpected[:5]
        assert not report.redelivered_after_ack, report.redelivered_after_ack[:5]
        assert not report.stored_twice, report.stored_twice[:5]
        assert len(stream_confirmed) > 100 and not stream_missing, len(stream_missing)
        assert not problems, problems  # replicas byte-identical, the same stats everywhere
        assert ("new", prev.version) in mixed and (prev.version, "new") in mixed, mixed

        gaps = _send_gaps(history, upgrade_start, upgrade_end)
        print(
            f"\nupgrade {prev.version} -> {features.FEATURES[0].since}: seconds per node "
            f"{ {n: round(s, 1) for n, s in sorted(per_node.items())} }; confirmed sends "
            f"{report.acked} (+{len(stream_confirmed)} over the stream); gap between "
            f"confirmed sends p50 {statistics.median(gaps):.3f} s, max {max(gaps):.2f} s"
        )

        # The downgrade, as the next release's data meets this one: node 1's data directory
        # marked with a flag this release does not know (what a later release writes once its
        # flag is enabled). This release must refuse it before writing anything. (The previous
        # release predates the marker: it cannot refuse, docs/operations.md "Upgrades".)
        victim = 1
        assert await cluster.terminate(victim) == 0
        data = cluster.data_dir(victim)
        marker = data / feature_marker.MARKER
        recorded = json.loads(marker.read_text())
        assert sorted(recorded["features"]) == sorted(features.KNOWN), recorded
        marker.write_text(
            json.dumps(recorded | {"features": [*recorded["features"], "zz_later_flag"]})
        )
        before = _digest_dir(data)
        cluster.start_node(victim)
        proc = cluster.procs[victim]
        code = await asyncio.to_thread(proc.wait, 30)
        cluster.procs.pop(victim)
        assert code != 0
        assert _digest_dir(data) == before, "a refused start changed the data directory"
        log = cluster.log_path(victim).read_text(errors="replace").rsplit("--- start", 1)[-1]
        assert "FeatureUnsupported" in log and "zz_later_flag" in log, log[-2000:]
        marker.write_text(json.dumps(recorded))
        cluster.start_node(victim)
        await _wait_node_ready(cluster, victim, 90)
    finally:
        await cluster.stop()
