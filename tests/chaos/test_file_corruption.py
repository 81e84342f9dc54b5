"""File corruption on one node (a minority) of three real `cmq serve` processes.

With the node stopped, one fault (bit flip, truncation, rollback to an earlier copy) is applied
to one of its WAL, segment or snapshot files; then it restarts. Required: the node never serves
bad data -- it detects the damage and either repairs itself from its peers or stays down with a
clear error in its log -- and the group never loses a confirmed message. Damage that checksums
catch (bit flips, truncation of a WAL, segment or snapshot file) must be repaired from the
peers with no operator action (`raftlog.runtime.repair`, the `self_repair` flag) while the
producers and consumers run; at the end every replica's digest is the same.

`test_faults_on_one_node` walks the fault x file-kind matrix on one cluster and prints what
each case did (the report's table). A node that refused to start is restored from the copy
taken just before the fault (it never ran in between, so that is its exact last state). At the
end the faulted node is made the queue's leader and everything is drained through it.

`test_rollback_of_a_whole_node_with_another_crash_loses_nothing` is the dangerous case: a node
restored from an earlier copy of its data directory has forgotten entries it acknowledged; if
the only other node that holds them is down at that moment, a group that trusted its disk would
elect a leader without them and confirmed messages would be gone. The recovery rule
(`raftlog.core.recovery`) keeps the restarted nodes out of elections until they have heard
from enough peers, so the groups wait for that node instead.
"""

from __future__ import annotations

import asyncio
import random
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.chaos import filefaults
from tests.chaos.diskcluster import (
    LONG,
    DiskCluster,
    caught_up,
    group_of,
    same_digests,
    started,
    wait_caught_up,
)
from tests.chaos.filefaults import FileKind, Where, copy_data_dir, data_files, snapshot_group
from tests.cmq.cluster import Load, Outcome, assert_safe, request

pytestmark = pytest.mark.slow

Damage = Callable[..., str]
"""`filefaults.bitflip` or `filefaults.truncate`."""


@dataclass
class Case:
    fault: str
    kind: FileKind | None
    run: Any
    """``run(data_dir, early_copy, rng) -> description``."""
    long: bool = False
    """Only with ``CHAOS_LONG=1`` (the default run stays short)."""


def _snapshot_of_data_group(d: Path) -> filefaults.DataFile:
    snaps = [f for f in data_files(d, "snapshot") if snapshot_group(f) == 1]
    assert snaps, f"no snapshot of group 1 in {d}"
    return snaps[-1]


def _damage(fault: Damage, kind: FileKind, where: Where, *, long: bool = False) -> Case:
    """``fault`` (`filefaults.bitflip` or `filefaults.truncate`) at ``where`` of a ``kind`` file."""
    return Case(
        f"{fault.__name__} ({where})",
        kind,
        lambda d, e, r: fault(d, r, kind=kind, where=where),
        long=long,
    )


def _damage_snapshot(fault: Damage) -> Case:
    """``fault`` anywhere in data group 1's latest snapshot."""
    return Case(
        fault.__name__, "snapshot", lambda d, e, r: fault(d, r, target=_snapshot_of_data_group(d))
    )


def _rollback_file(kind: FileKind) -> Case:
    """One whole ``kind`` file back to its earlier copy."""
    return Case(
        "rollback (file)",
        kind,
        lambda d, e, r: filefaults.rollback(d, e, r, kind=kind, chunk=False),
    )


CASES = [
    _damage(filefaults.bitflip, "wal", "head"),
    _damage(filefaults.bitflip, "wal", "tail"),
    _damage(filefaults.truncate, "wal", "middle", long=True),
    _damage(filefaults.truncate, "wal", "tail", long=True),
    _rollback_file("wal"),
    _damage(filefaults.bitflip, "segment", "head"),
    _damage(filefaults.bitflip, "segment", "tail", long=True),
    _damage(filefaults.truncate, "segment", "head"),
    _rollback_file("segment"),
    _damage_snapshot(filefaults.bitflip),
    _damage_snapshot(filefaults.truncate),
    _rollback_file("snapshot"),
    Case("rollback (whole dir)", None, lambda d, e, r: filefaults.rollback_all(d, e)),
]

_ERROR = re.compile(r"^.*(CorruptRecord|InvariantBroken|Error:|group \d+ stopped).*$", re.M)


def first_error(log: str) -> str:
    """The line of a node's log that says why it stopped (the exception's last line)."""
    lines = [m.group(0) for m in _ERROR.finditer(log)]
    return lines[-1][:200] if lines else ""


def _under_repair(c: DiskCluster, nid: int) -> dict[str, str] | None:
    """The groups node ``nid`` is repairing (None: no answer)."""
    status, st = request(c.http[nid], "GET", "/v1/status")
    return dict(st.get("repair", {}).get("under_repair", {})) if status == 200 else None


def observe(c: DiskCluster, nid: int, log_from: int, timeout: float = 30.0) -> tuple[str, str]:
    """Start ``nid`` and wait until it exits, stops a group, or serves with its data group
    caught up with the leader's commit and no repair left under way. Returns (behaviour, what
    its log says of the damage)."""
    c.start(nid)
    deadline = time.monotonic() + timeout
    proc = c.procs[nid]
    while time.monotonic() < deadline:
        log = c.log(nid)[log_from:]
        if proc.poll() is not None:
            return f"refuses to start (exit {proc.returncode})", first_error(log)
        if re.search(r"group \d+ stopped", log) and "repairing" not in log:
            return "starts, stops the group", first_error(log)
        if caught_up(c, nid) and _under_repair(c, nid) == {}:
            found = _REPAIRED.search(log)
            if found:
                return "serves (repaired from its replicas)", found.group(0)[:200]
            return "serves (caught up from the leader)", ""
        time.sleep(0.2)
    return "neither serves nor exits within the timeout", first_error(c.log(nid)[log_from:])


_REPAIRED = re.compile(r"^.*(stored state damaged|WAL .*: damage at offset).*$", re.M)


def rejoin(c: DiskCluster, nid: int) -> None:
    """The documented remedy for a node whose disk is lost: empty directory, ``--rejoin``."""
    shutil.rmtree(c.data_dir(nid))
    c.data_dir(nid).mkdir()
    c.configure(nid, rejoin=True)
    try:
        c.start(nid)
    finally:
        c.configure(nid, rejoin=False)
    wait_caught_up(c, nid)


def make_leader(c: DiskCluster, queue: str, nid: int, attempts: int = 20) -> None:
    """Kill the queue's leader until ``nid`` leads it (each killed node restarts at once).

    Before each kill ``nid`` catches up with the leader, so that it can win the election that
    follows (a lagging node is refused by the other, up-to-date voter); it then wins about
    every other election."""
    group = group_of(c, queue)
    for _ in range(attempts):
        leader = c.leader_of(queue)
        if leader == nid:
            return
        wait_caught_up(c, nid, group=group)
        c.kill(leader)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if c.leader_node_of_queue(queue) != leader:
                    break
            except AssertionError:
                pass
            time.sleep(0.1)
        c.start(leader)
        c.wait_ready(30)
    raise AssertionError(f"node {nid} never became the leader of {queue}")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DiskCluster]:
    with started(tmp_path) as c:
        yield c


async def test_faults_on_one_node(cluster: DiskCluster, tmp_path: Path) -> None:
    c = cluster
    q = "fc"
    status, _ = request(
        c.http[1], "PUT", f"/v1/queues/{q}", {"attributes": {"visibility_timeout": 3}}
    )
    assert status == 201
    load = Load(c, q, seed=7)
    await load.start(producers=1, consumers=1)
    await asyncio.sleep(1.5)
    leader = await asyncio.to_thread(c.leader_of, q)
    victim = next(n for n in sorted(c.procs) if n != leader)
    vdir = c.data_dir(victim)
    rng = random.Random(11)

    # The earlier copy for rollbacks: the victim's directory a few snapshots ago.
    await asyncio.to_thread(c.kill, victim)
    early = copy_data_dir(vdir, tmp_path / "early")
    c.start(victim)
    await asyncio.to_thread(c.wait_ready, 30)
    await asyncio.sleep(1.5)

    table: list[tuple[str, str, str, str, str]] = []
    for i, case in enumerate(c for c in CASES if LONG or not c.long):
        await asyncio.to_thread(c.kill, victim)
        backup = copy_data_dir(vdir, tmp_path / f"backup-{i}")
        try:
            what = case.run(vdir, early, rng)
        except filefaults.NoSuchFile as e:
            table.append((case.fault, case.kind or "all", "not applicable", str(e), ""))
            c.start(victim)
            continue
        log_from = len(c.log(victim))
        behaviour, error = await asyncio.to_thread(observe, c, victim, log_from)
        table.append((case.fault, case.kind or "all", behaviour, what, error))
        if not behaviour.startswith("serves"):
            if victim in c.procs:
                await asyncio.to_thread(c.kill, victim)
            if case.kind == "snapshot":
                # Heal as an operator would: wipe the disk, rejoin, catch up from the leader.
                await asyncio.to_thread(rejoin, c, victim)
                table[-1] = (*table[-1][:-1], table[-1][-1] + " [healed by --rejoin]")
            else:
                # Heal: the copy taken just before the fault is the node's exact last state.
                filefaults.rollback_all(vdir, backup)
                c.start(victim)
        await asyncio.to_thread(c.wait_ready, 30)
        await asyncio.sleep(0.5)

    # Whatever the faulted node kept must be right: let it lead the queue, drain through it.
    await asyncio.to_thread(make_leader, c, q, victim)
    load.rng = random.Random(victim)
    out: Outcome = await load.drain()

    rows = ["| " + " | ".join(x.replace(str(tmp_path), "") for x in row) + " |" for row in table]
    report = f"faults on node {victim} (of 3):\n" + "\n".join(rows)
    print("\n" + report)
    assert_safe(out, "file faults on one node")
    await asyncio.to_thread(same_digests, c, (1,))
    for fault, kind, behaviour, _what, error in table:
        assert behaviour.startswith(("serves", "refuses", "starts, stops")), report
        if not behaviour.startswith("serves"):
            assert error, f"{fault} {kind}: no clear error in the log\n{report}"
        if kind in ("wal", "segment", "snapshot") and not fault.startswith("rollback"):
            # Checksums catch it; the replica is repaired with no operator action.
            assert behaviour.startswith("serves"), f"{fault} {kind}: not repaired\n{report}"


async def test_rollback_of_a_whole_node_with_another_crash_loses_nothing(
    cluster: DiskCluster, tmp_path: Path
) -> None:
    c = cluster
    q = "rb"
    assert request(c.http[1], "PUT", f"/v1/queues/{q}")[0] == 201
    a = await asyncio.to_thread(c.leader_of, q)
    b, third = (n for n in sorted(c.procs) if n != a)

    def send(n: int, tag: str) -> set[str]:
        bodies = {f"{tag}-{k}" for k in range(n)}
        for body in sorted(bodies):
            status, res = request(
                c.http[a], "POST", f"/v1/queues/{q}/messages", {"messages": [{"body": body}]}
            )
            assert status == 200, res
        return bodies

    def leaders_among(nodes: tuple[int, ...]) -> list[str]:
        found = []
        for n in nodes:
            status, st = request(c.http[n], "GET", "/v1/status")
            if status == 200:
                found += [g for g, info in st["groups"].items() if info["role"] == "leader"]
        return found

    before = send(10, "before")
    c.kill(b)
    early = copy_data_dir(c.data_dir(b), tmp_path / "early")  # b's "backup"
    c.start(b)
    c.wait_ready(30)
    c.kill(third)
    confirmed = send(30, "acked-by-a-and-b")  # committed on a and b only
    c.kill(b)
    filefaults.rollback_all(c.data_dir(b), early)  # b restored from its backup
    c.kill(a)
    c.start(b)
    c.start(third)
    # Neither restarted node has heard from a, the only one holding the confirmed messages:
    # no group may elect a leader (a disk-trusting node would vote for the other at once).
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:
        assert not leaders_among((b, third)), "a group elected a leader without node a"
        await asyncio.sleep(0.3)
    c.start(a)
    c.wait_ready(30)
    got: set[str] = set()
    for _ in range(20):
        status, res = request(
            c.http[a], "POST", f"/v1/queues/{q}/messages/receive", {"max_messages": 10}
        )
        if status == 200:
            if not res["messages"] and got >= before:
                break
            got |= {m["body"] for m in res["messages"]}
    lost = (before | confirmed) - got
    print(f"rollback with another node down: lost {len(lost)} of {len(before | confirmed)}")
    assert not lost
