"""Disk faults of the chaos runner (category ``disk``), and when they may overlap others.

* ``bitflip`` / ``truncate`` / ``rollback``: file faults on one stopped node's data directory
  (`tests.chaos.filefaults`). The node repairs what checksums catch from its peers by itself
  (`raftlog.runtime.repair`); heal waits until it caught up. One that cannot is a failure of
  the run (`OPERATOR_NEEDED`), then repaired the way an operator would: wiped and restarted with
  ``--rejoin``, so that the run goes on.
* ``io``: a node's disk fails its I/O while the cluster runs (`tests.chaos.iofaults`, on a
  LazyFS mount: ``--lazyfs one|all``): its WAL's fsync fails with EIO (the WAL stops, the
  directory's groups stop), or every write fails with ENOSPC (the same, and sends through it are
  refused), or its WAL fsyncs take 2-3 s (it hands its leadership away). Heal: the failed kinds
  are a restart after the disk was "replaced" (killed, what it had not fsynced dropped — the
  pages a failed fsync lost are gone, as on Linux — faults cleared, restarted, and it must catch
  up by itself); the slow kind is cleared in place.

Disk faults overlap other faults only within what a majority quorum survives
(`disk_overlap_ok`): with f = (n-1)/2, the node a disk fault damages plus the nodes another
fault takes away from the quorum stay at most f. The disk fault is injected first; on 3 nodes
(f = 1) a kill or pause then hits the damaged node itself (`tests.chaos.faults.pick_target`: a
repair interrupted by a crash or a stop must resume), on 5 nodes (f = 2) any one node, and a
power loss of one node may join them. Clock and pinned-client faults are exclusive anyway.
Beyond that (damage on f nodes and another node down) the promise is unavailability, never
loss: `tests/chaos/test_overlap_edge.py` checks it.
"""

from __future__ import annotations

import asyncio
import random
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos.cluster import ChaosCluster
from tests.chaos.faults import (
    FaultKind,
    Injected,
    _minority_ok,
    _short,
    _wait_ready_quietly,
    _wait_started,
    mounts_unavailable,
    optional_module,
)
from tests.chaos.iofaults import Fault

DISK = "disk"
"""The category of file faults (`FileFault`, `Rollback`)."""

_ON_THE_DAMAGED_NODE = frozenset({"kill", "pause"})
"""Fault kinds that, while the quorum has no spare, hit the damaged node itself (`pick_target`)."""
_TAKES_ONE_VOTER = frozenset({"kill", "pause", "power-loss"})
"""Fault kinds that take at most one node away when they overlap a disk fault (`PowerLoss` of
every node at once is refused while a node is damaged)."""


def disk_overlap_ok(a: FaultKind, b: FaultKind, n: int) -> bool:
    """Whether faults ``a`` and ``b`` may run in one episode of an ``n``-node cluster: any two
    when neither is a disk fault; with one, only within the quorum's spare (module docstring)."""
    if DISK not in (a.category, b.category):
        return True
    other = b if a.category == DISK else a
    if other.category == DISK:
        return False
    spare = (n - 1) // 2 - 1  # the disk fault's node takes one
    if spare < 1:
        return other.name in _ON_THE_DAMAGED_NODE
    return other.name in _TAKES_ONE_VOTER


OPERATOR_NEEDED = "OPERATOR NEEDED"
"""Marks a heal after which a node did not repair itself from its peers (a disk fault): the
run fails, and the node is wiped and rejoined so that it goes on."""


def filefaults_unavailable(function: str) -> str | None:
    mod, why = optional_module("tests.chaos.filefaults")
    if mod is None:
        return why
    if not callable(getattr(mod, function, None)):
        return f"tests.chaos.filefaults has no {function}()"
    return None


async def settle_node(cluster: ChaosCluster, nid: int, timeout: float = 45) -> str:
    """Wait for ``nid`` to catch up; if it cannot (it exited, or a group stopped loudly on
    corruption), repair it the documented way: wipe its data, restart with ``--rejoin``."""
    exited = await _wait_started(cluster, nid, timeout)
    if exited is None and await cluster.caught_up(nid, timeout):
        return "caught up"
    exited = cluster.exited().get(nid, exited)
    why = cluster.last_error(nid) or "no error logged"
    cluster.kill(nid)
    cluster.wipe(nid)
    cluster.start_node(nid, rejoin=True)
    await _wait_ready_quietly(cluster, timeout)
    ok = await cluster.caught_up(nid, 2 * timeout)
    return (
        f"{OPERATOR_NEEDED}: did not repair itself (exit code {exited}; {_short(why)}): "
        f"wiped and rejoined, {'caught up' if ok else 'STILL BEHIND'}"
    )


@dataclass
class FileFault:
    """``bitflip`` or ``truncate``: corrupt a stopped node's files, restart it."""

    name: str
    exclusive: bool = False
    category: str = DISK
    weight: int = 1

    def unavailable(self, cluster: ChaosCluster) -> str | None:
        return filefaults_unavailable(self.name)

    async def inject(self, cluster: ChaosCluster, rng: random.Random) -> Injected | None:
        mod, _ = optional_module("tests.chaos.filefaults")
        running = cluster.running()
        if mod is None or not _minority_ok(cluster, 1):
            return None
        nid = rng.choice(running)
        cluster.kill(nid)
        cluster.damaged.add(nid)
        fault_rng = random.Random(rng.getrandbits(64))
        try:
            what = await asyncio.to_thread(
                getattr(mod, self.name), cluster.data_dir(nid), fault_rng
            )
        finally:
            cluster.start_node(nid)

        heal = _settling(cluster, nid)

        return Injected(
            self.name, f"{self.name} node {nid}: {_short(what)}", [nid], 1.0, heal, "disk"
        )


def _settling(cluster: ChaosCluster, nid: int) -> Callable[[], Awaitable[str]]:
    """The heal of a disk fault on ``nid``: wait until it caught up (`settle_node`), then it
    no longer counts as damaged."""

    async def heal() -> str:
        try:
            return await settle_node(cluster, nid)
        finally:
            cluster.damaged.discard(nid)

    return heal


@dataclass
class Rollback:
    """Copy a node's data (paused), let it run on, then kill it and restore the old copy."""

    name: str = "rollback"
    exclusive: bool = False
    category: str = DISK
    weight: int = 1
    workdir: Path | None = None
    _count: int = field(default=0)

    def unavailable(self, cluster: ChaosCluster) -> str | None:
        return filefaults_unavailable("rollback")

    async def inject(self, cluster: ChaosCluster, rng: random.Random) -> Injected | None:
        mod, _ = optional_module("tests.chaos.filefaults")
        running = cluster.running()
        if mod is None or not _minority_ok(cluster, 1):
            return None
        nid = rng.choice(running)
        cluster.damaged.add(nid)
        self._count += 1
        copy = cluster.root / f"rollback-{nid}-{self._count}"
        cluster.pause(nid)
        try:
            await asyncio.to_thread(shutil.copytree, cluster.data_dir(nid), copy)
        finally:
            cluster.resume(nid)
        await asyncio.sleep(rng.uniform(1.0, 4.0))
        cluster.kill(nid)
        fault_rng = random.Random(rng.getrandbits(64))
        try:
            what = await asyncio.to_thread(mod.rollback, cluster.data_dir(nid), copy, fault_rng)
        finally:
            shutil.rmtree(copy, ignore_errors=True)
            cluster.start_node(nid)

        heal = _settling(cluster, nid)

        return Injected(self.name, f"rollback node {nid}: {_short(what)}", [nid], 1.0, heal, "disk")


_WAL = "/wal-*"


@dataclass
class IoFault:
    name: str = "io"
    exclusive: bool = False
    category: str = DISK
    weight: int = 2

    def unavailable(self, cluster: ChaosCluster) -> str | None:
        return mounts_unavailable(cluster)

    async def inject(self, cluster: ChaosCluster, rng: random.Random) -> Injected | None:
        mounted = [n for n in sorted(cluster.mounts) if n in cluster.running()]
        if not mounted or not _minority_ok(cluster, 1):
            return None
        nid = rng.choice(mounted)
        fs = cluster.mounts[nid]
        shape = rng.choice(["fsync-eio", "disk-full", "slow-fsync"])
        if shape == "fsync-eio":
            fault = Fault("fsync", "eio", glob=_WAL)
        elif shape == "disk-full":
            fault = Fault("write", "enospc")
        else:
            fault = Fault("fsync", "delay", glob=_WAL, seconds=rng.uniform(2.0, 3.0))
        cluster.damaged.add(nid)
        await asyncio.to_thread(fs.inject, fault)

        async def heal() -> str:
            try:
                if shape == "slow-fsync":
                    await asyncio.to_thread(fs.clear_faults)
                    return await settle_node(cluster, nid)
                cluster.kill(nid)
                await asyncio.to_thread(fs.drop_unsynced)
                await asyncio.to_thread(fs.clear_faults)
                cluster.start_node(nid)
                return await settle_node(cluster, nid)
            finally:
                cluster.damaged.discard(nid)

        return Injected(
            self.name, f"{shape} on node {nid}", [nid], rng.uniform(2.0, 5.0), heal, DISK
        )


def disk_fault(name: str) -> FaultKind:
    """The disk fault kind called ``name`` (see the module docstring)."""
    if name in ("bitflip", "truncate"):
        return FileFault(name)
    if name == "rollback":
        return Rollback()
    if name == "io":
        return IoFault()
    raise ValueError(f"no disk fault kind {name!r}")
