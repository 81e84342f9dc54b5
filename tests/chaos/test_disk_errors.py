"""Disk errors on real `cmq serve` processes whose data directories live on LazyFS mounts with
planted I/O faults (`tests.chaos.iofaults`); what each does is in docs/operations.md, "Disk errors".

- fsync EIO, write EIO (the leader) or a real ENOSPC (a follower) on one node's WAL: that node
  stops its groups there (it says why in ``/v1/status``, its
  ``/readyz`` answers 503, ``cmq_disk_failed`` is 1), the others keep confirming sends, and
  every confirmed message is received after; a restart (after the disk is fixed) brings it back.
- ENOSPC: under the reserve, sends answer 507 ``DiskFull`` and change nothing, receives and acks
  still work; once space is freed, sends work again.
- a slow fsync on the leader's disk: leadership moves away within seconds, sends go on.
- the planted bug: a WAL that retries a failed fsync and reports success loses data it
  acknowledged (the failed fsync dropped the pages: LazyFS's drop shows it); the check that
  catches it passes for the real WAL. Twice: on a WAL alone, and on three `cmq serve` nodes
  (every disk's next fsync fails once, sends go on, a coordinated power loss): real nodes lose
  no confirmed send, nodes running the planted WAL lose the sends confirmed after the failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cmq.client import NO_RETRY, Client, SyncClient
from cmq.errors import CmqError
from raftlog.core.types import Entry
from raftlog.errors import DiskFailed
from raftlog.storage import EntriesRecord, Wal
from tests.chaos.diskcluster import (
    SNAPSHOTS,
    DiskCluster,
    create_queue,
    group_of,
    wait_caught_up,
    wait_ready,
)
from tests.chaos.iofaults import Fault, used_bytes
from tests.chaos.lazyfs import LazyFS, unavailable_reason

_REASON = unavailable_reason()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_REASON is not None, reason=f"LazyFS unavailable: {_REASON}"),
]

WAL_FILES = "*wal-*.log"
RESERVE = 1 << 20


# `cmq serve` with the planted bug: a WAL that retries a failed fsync and reports success.
_WITH_RETRYING_WAL = """
import os, sys
from raftlog.storage.wal import Wal

def retrying_sync(self, fd):
    try:
        os.fdatasync(fd)
    except OSError:
        os.fdatasync(fd)

Wal._sync = retrying_sync
from cmq.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@contextlib.contextmanager
def started(
    root: Path, *, planted: bool = False, group_options: dict[str, Any] | None = None
) -> Iterator[DiskCluster]:
    """Three nodes on LazyFS mounts (with the planted WAL bug when ``planted``), a 1 MiB disk
    reserve and a 0.5 s slow-fsync threshold."""
    c = DiskCluster(root, lazy=True, group_options=group_options)
    if planted:
        c.nodes.command = (sys.executable, "-c", _WITH_RETRYING_WAL)
    env = {"CMQ_DISK_RESERVE_BYTES": str(RESERVE), "CMQ_SLOW_FSYNC_SECONDS": "0.5"}
    c.node_env = dict.fromkeys(c.settings, env)
    try:
        c.start_all()
        yield c
    finally:
        for fs in c.fs.values():  # release hung fsyncs so that the nodes can stop
            with contextlib.suppress(Exception):
                fs.clear_faults()
        c.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DiskCluster]:
    with started(tmp_path) as c:
        yield c


def status(c: DiskCluster, nid: int) -> dict[str, Any]:
    with SyncClient(c.http[nid], timeout=10, retry=NO_RETRY) as client:
        st: dict[str, Any] = client.status()
        return st


def stable_leader(c: DiskCluster, queue: str, settle: float = 2.0) -> int:
    """The leader of ``queue``'s group once it has not changed for ``settle`` seconds (the
    leader balancer moves leaderships to their preferred nodes after a start)."""
    leader, since = 0, time.monotonic()
    deadline = since + 30
    while time.monotonic() < deadline:
        now = c.leader_of(queue)
        if now != leader:
            leader, since = now, time.monotonic()
        elif time.monotonic() - since >= settle:
            return leader
        time.sleep(0.2)
    raise AssertionError(f"the leadership of {queue} never settled")


def ready_and_metrics(c: DiskCluster, nid: int) -> tuple[bool, str]:
    with SyncClient(c.http[nid], timeout=10, retry=NO_RETRY) as client:
        return client.ready(), client.metrics()


def wait_for(what: str, check: Any, timeout: float = 15) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(CmqError, KeyError, IndexError):
            got = check()
            if got:
                return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


class Producers:
    """Producers sending unique bodies through the given nodes; ``confirmed`` is what the
    cluster confirmed."""

    def __init__(self, c: DiskCluster, queue: str, nodes: list[int]) -> None:
        self.client = Client([c.http[n] for n in nodes], timeout=15)
        self.queue = queue
        self.confirmed: list[str] = []
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, n: int = 2) -> None:
        self.tasks = [asyncio.create_task(self._run(w)) for w in range(n)]

    async def _run(self, w: int) -> None:
        k = 0
        while not self.stop.is_set():
            bodies = [f"{self.queue}-{w}-{k}-{j}" for j in range(3)]
            k += 1
            try:
                await self.client.send(self.queue, bodies)
            except CmqError:
                await asyncio.sleep(0.1)
            else:
                self.confirmed.extend(bodies)

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.gather(*self.tasks)
        await self.client.close()


async def receive_all(client: Client, queue: str, expected: set[str], timeout: float = 30) -> None:
    """Receive and ack until every body of ``expected`` was seen."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while not expected <= seen:
        assert time.monotonic() < deadline, f"lost: {sorted(expected - seen)[:10]}"
        try:
            msgs = await client.receive(queue, 50, wait_seconds=1)
            if msgs:
                seen.update(str(m.body) for m in msgs)
                await client.ack(queue, [m.receipt for m in msgs])
        except CmqError:
            await asyncio.sleep(0.2)


# -- fsync EIO ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("op", "kind", "who", "code"),
    [
        ("fsync", "eio", "leader", "EIO"),
        ("write", "eio", "leader", "EIO"),
        # A follower whose disk fills up for real (no reserve left): its WAL fails like a
        # broken disk, the majority goes on without it.
        ("write", "enospc", "follower", "ENOSPC"),
    ],
)
async def test_a_failed_wal_stops_that_node_and_the_others_go_on(
    cluster: DiskCluster, op: str, kind: str, who: str, code: str
) -> None:
    await failed_directory(cluster, Fault(op, kind, glob=WAL_FILES), who, code, "DiskFailed")


async def test_a_failed_segment_fsync_stops_the_directory(tmp_path: Path) -> None:
    """A snapshot's fsync of the segment files fails (EIO) on a follower: that group stops on
    the OSError, the directory is judged failed and every other group on it stops too."""
    with started(tmp_path, group_options=SNAPSHOTS) as c:
        await failed_directory(
            c, Fault("fsync", "eio", glob="/segments/*"), "follower", "EIO", "OSError"
        )


async def failed_directory(c: DiskCluster, fault: Fault, who: str, code: str, stopped: str) -> None:
    """Plant ``fault`` on the queue's leader or a follower (``who``) under a load sent through
    the other two; that node's directory must be judged failed with errno ``code``, its data
    group stopped (the reason containing ``stopped``), the node unready, the others confirming
    sends, every confirmed message received; then a restart brings the node back."""
    await create_queue(c, "eio")
    group = await asyncio.to_thread(group_of, c, "eio")
    leader = await asyncio.to_thread(c.leader_of, "eio")
    victim = leader if who == "leader" else next(n for n in sorted(c.settings) if n != leader)
    others = [n for n in sorted(c.settings) if n != victim]
    load = Producers(c, "eio", others)
    load.start()
    await asyncio.sleep(1.5)
    c.fs[victim].inject(fault)

    def failed() -> dict[str, Any] | None:
        st = status(c, victim)
        return st if st["disks"][0]["state"] == "failed" else None

    st = await asyncio.to_thread(wait_for, "the disk failure to show", failed)
    disk = st["disks"][0]
    assert disk["failed"].startswith(code) and disk["errno"] == getattr(errno, code), disk
    assert stopped in (st["groups"][str(group)]["stopped"] or "None"), st["groups"]
    # One data directory per node: every group here stopped with it (the catalog's too).
    assert all(g["stopped"] for g in st["groups"].values()), st["groups"]
    ready, metrics = await asyncio.to_thread(ready_and_metrics, c, victim)
    assert ready is False
    assert 'cmq_disk_failed{dir="0"} 1.0' in metrics
    assert f"failed ({code}" in c.log(victim), c.log(victim)[-2000:]
    before = len(load.confirmed)
    await asyncio.sleep(4)  # the others elect a leader and keep confirming
    await load.finish()
    assert len(load.confirmed) > before + 10, (before, len(load.confirmed))
    async with Client([c.http[n] for n in others]) as client:
        await receive_all(client, "eio", set(load.confirmed))
    # Recovery: a restart once the disk is fixed; the replica catches up from its peers.
    c.kill(victim)
    c.fs[victim].clear_faults()
    c.fs[victim].drop_unsynced()  # what the failed fsyncs never made durable is gone
    c.start(victim)
    await wait_ready(c)
    await asyncio.to_thread(wait_caught_up, c, victim, 30, group)
    st = await asyncio.to_thread(status, c, victim)
    assert st["disks"][0]["state"] == "ok", st["disks"]


# -- ENOSPC ---------------------------------------------------------------------------------------
async def test_a_full_disk_refuses_sends_and_serves_receives_and_acks(
    cluster: DiskCluster,
) -> None:
    c = cluster
    await create_queue(c, "full")
    async with Client(c.urls) as client:
        for k in range(10):
            await client.send("full", [f"before-{k}"])
        for nid in sorted(c.settings):  # every disk fills: whoever leads is short of space
            used = await asyncio.to_thread(used_bytes, str(c.disk_dir(nid)))
            c.fs[nid].inject(Fault("write", "enospc", limit=used + RESERVE // 2))
        leader = await asyncio.to_thread(c.leader_of, "full")
        await asyncio.to_thread(
            wait_for, "the leader's disk to be full", lambda: status(c, leader)["disks"][0]["full"]
        )
        before = (await client.get_queue("full")).stats
        with pytest.raises(CmqError) as refused:
            await client.send("full", ["refused"])
        assert refused.value.code == "DiskFull"
        assert getattr(refused.value, "status", None) == 507
        assert "reserve" in str(refused.value), refused.value  # the reason reaches the client
        after = (await client.get_queue("full")).stats
        assert (after.sent_total, after.visible) == (before.sent_total, before.visible) == (10, 10)
        got: list[str] = []
        deadline = time.monotonic() + 15
        while len(got) < 10:
            assert time.monotonic() < deadline, got
            msgs = await client.receive("full", 10, wait_seconds=1)
            results = await client.ack("full", [m.receipt for m in msgs])
            assert all(r.ok for r in results), results
            got.extend(str(m.body) for m in msgs)
        assert sorted(got) == sorted(f"before-{k}" for k in range(10))
        for nid in sorted(c.settings):  # space is freed
            c.fs[nid].clear_faults()
        await asyncio.to_thread(
            wait_for,
            "the disk to have space again",
            lambda: not status(c, leader)["disks"][0]["full"],
        )
        await client.send("full", ["after"])
        msgs = await client.receive("full", 10, wait_seconds=2)
        assert [m.body for m in msgs] == ["after"]
    for nid in sorted(c.settings):
        assert "DiskFailed" not in c.log(nid)  # the reserve kept every WAL out of ENOSPC


# -- slow fsync -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["delay", "hang"])
async def test_a_slow_leader_disk_hands_leadership_away(cluster: DiskCluster, kind: str) -> None:
    """A slow (1.5 s per fsync) or hung WAL fsync on the leader: leadership moves away within
    seconds and stays away; sends go on being confirmed."""
    c = cluster
    await create_queue(c, "slow")
    victim = await asyncio.to_thread(stable_leader, c, "slow")
    load = Producers(c, "slow", sorted(c.settings))
    load.start()
    await asyncio.sleep(1)
    seconds = 1.5 if kind == "delay" else 0.0
    c.fs[victim].inject(Fault("fsync", kind, glob=WAL_FILES, seconds=seconds))
    started = time.monotonic()

    def moved() -> int | None:
        leader = c.leader_node_of_queue("slow")
        return leader if leader != victim else None

    new_leader = await asyncio.to_thread(wait_for, "leadership to move", moved, 10)
    took = time.monotonic() - started
    print(f"leadership moved from {victim} to {new_leader} in {took:.1f} s")
    assert took < 8
    before = len(load.confirmed)
    for _ in range(6):  # it stays away while the disk is slow
        await asyncio.sleep(0.5)
        leader = 0
        with contextlib.suppress(AssertionError):  # no leader known right now
            leader = await asyncio.to_thread(c.leader_node_of_queue, "slow")
        assert leader != victim, "the slow node took leadership back"
    await load.finish()
    assert len(load.confirmed) > before, "sends kept being confirmed"
    st = await asyncio.to_thread(status, c, victim)
    assert st["disks"][0]["state"] == "slow", st["disks"]
    assert "is slow" in c.log(victim)
    c.fs[victim].clear_faults()
    async with Client(c.urls) as client:
        await receive_all(client, "slow", set(load.confirmed))


# -- the planted bug -------------------------------------------------------------------------------
class RetryingWal(Wal):
    """The planted bug (PostgreSQL's "fsyncgate"): an fsync that failed is retried, and the
    retry's success is taken to mean the batch is durable."""

    def _sync(self, fd: int) -> None:
        try:
            os.fdatasync(fd)
        except OSError:
            os.fdatasync(fd)


def acked_but_lost(wal_class: type[Wal], fs: LazyFS, name: str) -> list[int]:
    """Write entries 1..10 (one per submission, each waited for) to a WAL of ``wal_class`` on
    ``fs``; the 6th batch's fsync fails once (EIO). After a power loss, the indexes the WAL
    acknowledged that are not on the disk."""
    directory = fs.mount / name
    wal = wal_class.open(str(directory))
    acked: list[int] = []
    for i in range(1, 11):
        if i == 6:
            fs.inject(Fault("fsync", "eio", glob=f"/{name}/{WAL_FILES}", once=True))
        try:
            wal.submit(1, [EntriesRecord((Entry(1, i, data=b"x" * 100),))]).result(10)
        except DiskFailed:
            continue
        acked.append(i)
    wal.close()
    fs.drop_unsynced()
    reopened = Wal.open(str(directory))
    try:
        rec = reopened.claim_group(1)
        durable = {e.index for e in rec.entries} if rec is not None else set()
    finally:
        reopened.close()
    return [i for i in acked if i not in durable]


def test_a_failed_fsync_is_never_taken_for_durable(tmp_path: Path) -> None:
    with LazyFS(tmp_path / "disk", tmp_path / "mnt") as fs:
        assert acked_but_lost(Wal, fs, "real") == []
        lost = acked_but_lost(RetryingWal, fs, "planted")
    # The check above catches the planted bug: entries it acknowledged are not on the disk.
    assert lost, "the retrying WAL lost nothing: the fault layer does not model fsyncgate"
    assert 6 in lost


async def confirmed_lost_after_fsync_eio_and_power_loss(c: DiskCluster) -> set[str]:
    """Every node's next WAL fsync fails once (EIO); sends go on for a few seconds; then a
    coordinated power loss and a restart. The confirmed messages not received after."""
    queue = "gate"
    await create_queue(c, queue)
    confirmed: set[str] = set()
    async with Client(c.urls, timeout=2) as client:
        for k in range(10):
            await client.send(queue, [f"before-{k}"])
            confirmed.add(f"before-{k}")
        for fs in c.fs.values():
            fs.inject(Fault("fsync", "eio", glob=WAL_FILES, once=True))
        deadline = time.monotonic() + 4
        k = 0
        while time.monotonic() < deadline:
            body = f"after-{k}"
            k += 1
            try:
                async with asyncio.timeout(2):
                    await client.send(queue, [body])
            except (CmqError, TimeoutError):
                await asyncio.sleep(0.1)
            else:
                confirmed.add(body)
    victims = await asyncio.to_thread(c.kill_all_at_once)
    for nid in victims:
        c.fs[nid].clear_faults()
        c.fs[nid].drop_unsynced()
    for nid in victims:
        c.start(nid)
    await wait_ready(c)
    received: set[str] = set()
    async with Client(c.urls) as client:
        empty = 0
        while empty < 2:
            msgs = await client.receive(queue, 50, wait_seconds=1)
            empty = 0 if msgs else empty + 1
            received.update(str(m.body) for m in msgs)
            if msgs:
                await client.ack(queue, [m.receipt for m in msgs])
    print(f"confirmed {len(confirmed)}, received {len(received)}")
    return confirmed - received


async def test_nodes_that_never_retry_a_failed_fsync_lose_nothing_confirmed(
    tmp_path: Path,
) -> None:
    with started(tmp_path) as c:
        assert await confirmed_lost_after_fsync_eio_and_power_loss(c) == set()


async def test_the_planted_fsync_retry_loses_confirmed_sends(tmp_path: Path) -> None:
    """The same run with nodes whose WAL retries a failed fsync: the check above catches it."""
    with started(tmp_path, planted=True) as c:
        lost = await confirmed_lost_after_fsync_eio_and_power_loss(c)
    assert lost, "the planted retry lost nothing: the check would not catch it"
    assert all(body.startswith("after-") for body in lost), lost
