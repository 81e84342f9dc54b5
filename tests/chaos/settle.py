"""After a chaos run's faults heal: drain the queues (`drain`: consumers ack until every queue
is empty, seen from every node) and wait until the replicas agree (`quiesce`: the same commit,
applied and last index for every group, then byte-for-byte digests, `same_digests`, and equal
queue stats); `tests.chaos.runner.run_once` calls them, `tests.upgrade` too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from cmq.errors import CmqError
from tests.chaos.checker import check_replicas, compare_digests, same_stats
from tests.chaos.cluster import ChaosCluster
from tests.chaos.workload import Workload

Say = Callable[[str], None]


async def drain(
    cluster: ChaosCluster, workload: Workload, queues: tuple[str, ...], timeout: float
) -> bool:
    """Consumers ack everything until every queue is empty twice in a row, seen from every node."""
    workload.draining = True
    deadline = time.monotonic() + timeout
    clean = 0
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        empty = True
        for q in queues:
            stats = await queue_stats(cluster, q)
            if len(stats) < len(cluster.running()) or any(
                s["visible"] or s["in_flight"] or s["delayed"] for s in stats.values()
            ):
                empty = False
                break
        clean = clean + 1 if empty and workload.quiet else 0
        if clean >= 2:
            return True
    return False


async def queue_stats(cluster: ChaosCluster, queue: str) -> dict[int, dict[str, Any]]:
    out = {}
    for nid in cluster.running():
        try:
            info = await cluster.node(nid, 5).get_queue(queue)
        except CmqError:
            continue
        stats = dataclasses.asdict(info.stats)
        stats.pop("oldest_age_ms", None)
        out[nid] = stats
    return out


async def quiesce(
    cluster: ChaosCluster, queues: tuple[str, ...], timeout: float = 60, say: Say | None = None
) -> list[str]:
    """Wait until every node reports the same commit/applied/last index for every group;
    the remaining differences (empty when the replicas agree)."""
    deadline = time.monotonic() + timeout
    problems = ["no status yet"]
    while time.monotonic() < deadline:
        statuses = await cluster.statuses(cluster.ids)
        problems = check_replicas(statuses)
        if len(statuses) < cluster.n:
            problems.append(f"only nodes {sorted(statuses)} answered /v1/status")
        if not problems:
            break
        await asyncio.sleep(0.5)
    if not problems:
        problems = await same_digests(cluster, max(5.0, deadline - time.monotonic()), say)
    for q in queues:
        problems += [f"{q}: {p}" for p in same_stats(await queue_stats(cluster, q))]
    return problems


async def same_digests(cluster: ChaosCluster, timeout: float, say: Say | None = None) -> list[str]:
    """Byte-for-byte comparison of every data group's replicas (`compare_digests`): retried
    while their applied indexes differ (housekeeping may still commit) or a replica does not
    answer; the remaining differences (empty when every replica hashes the same)."""
    deadline = time.monotonic() + timeout
    while True:
        digests = await cluster.digests()
        problems = compare_digests(digests)
        for g, by_node in digests.items():
            if len(by_node) < 2:
                problems.append(f"group {g}: only nodes {sorted(by_node)} answered its digest")
        settled = all("applied differs" not in p and "answered" not in p for p in problems)
        if (settled and problems) or not problems or time.monotonic() > deadline:
            if say is not None and not problems:
                for g, by_node in sorted(digests.items()):
                    d = next(iter(by_node.values()))
                    say(
                        f"group {g}: nodes {sorted(by_node)} identical at applied {d['applied']} "
                        f"(image {d['image_sha256'][:12]}, {d['image_bytes']} B; "
                        f"{d['segments']} segment files {d['segments_sha256'][:12]})"
                    )
            return problems
        await asyncio.sleep(0.3)
