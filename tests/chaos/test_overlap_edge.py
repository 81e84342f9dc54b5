"""Disk damage that overlaps other faults, at and beyond the edge of what a majority survives.

Three real `cmq serve` processes (f = 1). The chaos soak combines a disk fault only with faults
that leave a quorum of intact voters (`tests.chaos.faults.disk_overlap_ok`); this test walks
past that edge on purpose, where the promise is *unavailability, never loss*:

1. **Damage on f nodes plus a kill of another.** A follower's segment file is damaged while it
   is down; the other follower is killed; the damaged one starts and repairs itself from the
   leader, the only intact node left (a rejoining replica takes what the leader ships it). Sends
   in that window either confirm or are refused with an error; then the killed node returns.
   Every message confirmed before, during and after is received exactly as sent, and the
   replicas end byte-identical.
2. **Damage on a majority at once** (both followers, while both are down long enough for the
   leader to step down). The intact node alone is no quorum, and a replica under repair neither
   votes nor campaigns (it cannot tell what it lost): the group refuses sends (an error, never
   a confirm) and both nodes report the repair in `/v1/status`. It stays unavailable until an
   operator decides; the test ends there (reported, not silently wrong).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cmq.client import NO_RETRY, SyncClient
from cmq.errors import CmqError
from tests.chaos import filefaults
from tests.chaos.diskcluster import DiskCluster, same_digests, started, wait_caught_up
from tests.cmq.cluster import request

pytestmark = pytest.mark.slow

QUEUE = "edge"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DiskCluster]:
    with started(tmp_path) as c:
        yield c


def _send(c: DiskCluster, nid: int, tag: str, n: int, timeout: float = 30) -> tuple[set[str], int]:
    """Send ``n`` bodies one by one through ``nid`` (each attempt given ``timeout`` seconds,
    never retried): (confirmed bodies, refusals or timeouts)."""
    confirmed: set[str] = set()
    refused = 0
    with SyncClient(c.http[nid], timeout=timeout, retry=NO_RETRY) as client:
        for k in range(n):
            body = f"{tag}-{k}"
            try:
                raw = client.request(
                    "POST", f"/v1/queues/{QUEUE}/messages", {"messages": [{"body": body}]}
                )
                ok = raw.status == 200
            except (CmqError, OSError):
                ok = False
            if ok:
                confirmed.add(body)
            else:
                refused += 1
    return confirmed, refused


def _drain(c: DiskCluster, nid: int, want: set[str], timeout: float = 60) -> set[str]:
    got: set[str] = set()
    deadline = time.monotonic() + timeout
    while not want <= got and time.monotonic() < deadline:
        status, res = request(
            c.http[nid],
            "POST",
            f"/v1/queues/{QUEUE}/messages/receive",
            {"max_messages": 10, "visibility_timeout": 5},
        )
        if status != 200:
            time.sleep(0.2)
            continue
        receipts = [m["receipt"] for m in res["messages"]]
        got |= {m["body"] for m in res["messages"]}
        if receipts:
            request(c.http[nid], "POST", f"/v1/queues/{QUEUE}/messages/ack", {"receipts": receipts})
    return got


def _under_repair(c: DiskCluster, nid: int) -> dict[str, str]:
    status, st = request(c.http[nid], "GET", "/v1/status")
    return dict(st.get("repair", {}).get("under_repair", {})) if status == 200 else {}


def _damage_segment(c: DiskCluster, nid: int, rng: random.Random) -> str:
    return filefaults.bitflip(c.data_dir(nid), rng, kind="segment", where="head")


def test_damage_beyond_the_quorum_is_refused_never_lost(cluster: DiskCluster) -> None:
    c = cluster
    rng = random.Random(26)
    assert request(c.http[1], "PUT", f"/v1/queues/{QUEUE}", {})[0] == 201
    before, _ = _send(c, 1, "before", 300)
    assert len(before) == 300
    leader = c.leader_of(QUEUE)
    a, b = (n for n in sorted(c.procs) if n != leader)

    # 1. Damage on f = 1 node plus a kill of the other follower.
    wait_caught_up(c, a)
    c.kill(a)
    what = _damage_segment(c, a, rng)
    c.kill(b)
    c.start(a)
    during, refused = _send(c, leader, "during", 8, timeout=2)
    print(f"damaged {a} ({what}), killed {b}: {len(during)} confirmed, {refused} refused")
    c.start(b)
    c.wait_ready(60)
    after, _ = _send(c, leader, "after", 20)
    assert len(after) == 20
    confirmed = before | during | after
    got = _drain(c, leader, confirmed)
    assert confirmed <= got, f"lost {len(confirmed - got)} confirmed messages"
    assert got <= confirmed | {f"during-{k}" for k in range(8)}, "a body nobody sent"
    deadline = time.monotonic() + 30
    while _under_repair(c, a) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _under_repair(c, a)
    assert "repairing" in c.log(a)
    same_digests(c, (1,))

    # 2. Damage on a majority at once: refused and reported, never confirmed into a void.
    more, _ = _send(c, leader, "more", 50)
    assert len(more) == 50
    for nid in (a, b):
        wait_caught_up(c, nid)
    for nid in (a, b):
        c.kill(nid)
        _damage_segment(c, nid, rng)
    time.sleep(3)  # the leader hears no quorum: it steps down (check-quorum)
    for nid in (a, b):
        c.start(nid)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (_under_repair(c, a) and _under_repair(c, b)):
        time.sleep(0.2)
    assert _under_repair(c, a) and _under_repair(c, b), "the damage was not reported"
    late, refused = _send(c, leader, "late", 5, timeout=2)
    print(f"damage on 2 of 3: {len(late)} confirmed, {refused} refused")
    assert not late, "a send was confirmed with a majority of the replicas under repair"
    time.sleep(3)
    assert _under_repair(c, a) and _under_repair(c, b)
