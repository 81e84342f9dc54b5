"""Fault kinds for the chaos runner: a small `FaultKind` protocol and a registry.

A fault kind says whether it can run here (`unavailable` returns a reason to skip it), and
`inject` applies one instance to the cluster and returns an `Injected` whose ``heal`` undoes
it. Kinds:

* ``kill``: SIGKILL a node (often a group leader), restart it on its data after a while;
* ``pause``: SIGSTOP a node for 1-3 s (longer than the election timeout), then SIGCONT;
* ``partition``: through the peer proxy — isolate a leader, split majority/minority, one-way
  links, a bridge (5 nodes); each direction paused (lossless, TCP-like) or dropped;
* ``power-loss``: SIGKILL nodes whose data directory is a LazyFS mount and forget what they had
  not fsynced (one node, or all mounted nodes at once), then restart (`tests.chaos.lazyfs`);
* ``membership``: drain a node (4 nodes or more) so its replicas move away, half of the time
  killing the leader of a group in the middle of its move; heal restarts it and undoes the
  drain (the replicas move back);
* ``bitflip`` / ``truncate`` / ``rollback`` / ``io``: disk faults, with the rule for when
  they overlap other faults (`tests.chaos.diskfaults`).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Protocol

from cmq.errors import CmqError
from tests.chaos.cluster import ChaosCluster
from tests.chaos.proxy import Mode

Heal = Callable[[], Awaitable[str]]


async def _nothing() -> str:
    return ""


@dataclass
class Injected:
    """One applied fault: what was done, to which nodes, how long to hold it, how to undo it."""

    kind: str
    description: str
    nodes: list[int]
    hold: float
    heal: Heal = _nothing
    category: str = "process"
    """Faults of one category never overlap (one partition layout, one process fault...)."""
    at: float = 0.0
    """When the fault took effect (the runner's monotonic clock; 0: when ``inject`` returned)."""


class FaultKind(Protocol):
    name: str
    exclusive: bool
    category: str
    weight: int
    """Relative frequency in the schedule."""

    def unavailable(self, cluster: ChaosCluster) -> str | None:
        """Why this kind cannot run against ``cluster`` (None: it can)."""
        ...

    async def inject(self, cluster: ChaosCluster, rng: random.Random) -> Injected | None:
        """Apply one instance (None: no suitable target right now)."""
        ...


async def pick_target(cluster: ChaosCluster, rng: random.Random) -> int | None:
    """A running node: half of the time the leader of a random group. While a node is damaged
    and the quorum has no other spare (3 nodes), that node itself
    (`tests.chaos.diskfaults.disk_overlap_ok`)."""
    running = cluster.running()
    if not running:
        return None
    if cluster.damaged and (cluster.n - 1) // 2 < 2:
        hit = [n for n in sorted(cluster.damaged) if n in running]
        return hit[0] if hit else None
    if rng.random() < 0.5:
        leaders = await cluster.leaders()
        if leaders:
            g = rng.choice(sorted(leaders))
            if leaders[g] in running:
                return leaders[g]
    return rng.choice(running)


def _minority_ok(cluster: ChaosCluster, extra_down: int) -> bool:
    """Whether taking ``extra_down`` more nodes away still leaves a majority running."""
    return len(cluster.running()) - extra_down > cluster.n // 2


def undo(action: Callable[[], object]) -> Heal:
    """A heal that runs ``action`` and reports nothing."""

    async def heal() -> str:
        action()
        return ""

    return heal


@dataclass(frozen=True)
class Act:
    """What `NodeFault.act` did to its node: the kind reported (its own name when empty),
    the description, how long to hold it and how to undo it."""

    description: str
    hold: float
    heal: Heal
    kind: str = ""


@dataclass
class NodeFault:
    """The skeleton of a fault on one running node (kill, pause, clock): the target from
    `pick_target`, refused when taking it away (``takes_node_away``) would leave no majority
    running, then `act`, timed from the moment it starts. Draws from ``rng`` in that order:
    the target, then whatever `act` draws."""

    name: str = ""
    exclusive: bool = False
    category: str = "process"
    weight: int = 1
    takes_node_away: bool = True

    def unavailable(self, cluster: ChaosCluster) -> str | None:
        return None

    async def inject(self, cluster: ChaosCluster, rng: random.Random) -> Injected | None:
        nid = await pick_target(cluster, rng)
        if nid is None or (self.takes_node_away and not _minority_ok(cluster, 1)):
            return None
        at = time.monotonic()
        done = self.act(cluster, nid, rng)
        kind = done.kind or self.name
        return Injected(kind, done.description, [nid], done.hold, done.heal, self.category, at)

    def act(self, cluster: ChaosCluster, nid: int, rng: random.Random) -> Act:
        """Apply the fault to node ``nid``."""
        raise NotImplementedError


@dataclass
class Kill(NodeFault):
    name: str = "kill"
    weight: int = 3

    def act(self, cluster: ChaosCluster, nid: int, rng: random.Random) -> Act:
        cluster.kill(nid)

        async def heal() -> str:
            return await restart_checked(cluster, [nid])

        return Act(f"SIGKILL node {nid}", rng.uniform(0.5, 4.0), heal)


@dataclass
class Pause(NodeFault):
    name: str = "pause"
    weight: int = 2

    def act(self, cluster: ChaosCluster, nid: int, rng: random.Random) -> Act:
        cluster.pause(nid)
        return Act(f"SIGSTOP node {nid}", rng.uniform(1.0, 3.0), undo(lambda: cluster.resume(nid)))


def split_blocks(side_a: list[int], side_b: list[int], mode: Mode) -> dict[tuple[int, int], Mode]:
    """Both directions between every node of ``side_a`` and every node of ``side_b``."""
    out: dict[tuple[int, int], Mode] = {}
    for a in side_a:
        for b in side_b:
            out[(a, b)] = mode
            out[(b, a)] = mode
    return out


@dataclass
class Partition:
    name: str = "partition"
    exclusive: bool = False
    category: str = "network"
    weight: int = 4

    def unavailable(self, cluster: ChaosCluster) -> str | None:
        return None

    async def inject(self, cluster: ChaosCluster, rng: random.Random) -> Injected | None:
        ids = cluster.ids
        mode: Mode = rng.choice(["pause", "drop"])
        shapes = ["isolate-leader", "majority-minority", "one-way", "leader-one-way"]
        if cluster.n >= 5:
            shapes.append("bridge")
        shape = rng.choice(shapes)
        leaders = await cluster.leaders()
        leader = leaders[rng.choice(sorted(leaders))] if leaders else rng.choice(ids)
        blocks: dict[tuple[int, int], Mode]
        if shape == "isolate-leader":
            blocks = split_blocks([leader], [n for n in ids if n != leader], mode)
            what = f"isolate leader {leader}"
        elif shape == "majority-minority":
            minority = rng.sample(ids, rng.randint(1, (cluster.n - 1) // 2))
            blocks = split_blocks(minority, [n for n in ids if n not in minority], mode)
            what = f"split {sorted(minority)} | rest"
        elif shape == "one-way":
            a, b = rng.sample(ids, 2)
            blocks = {(a, b): mode}
            what = f"one-way {a}->{b} cut"
        elif shape == "leader-one-way":
            others = [n for n in ids if n != leader]
            outbound = rng.random() < 0.5
            blocks = {((leader, o) if outbound else (o, leader)): mode for o in others}
            what = f"leader {leader} {'cannot send' if outbound else 'cannot hear'}"
        else:
            shuffled = rng.sample(ids, len(ids))
            bridge, half = shuffled[0], (len(ids) - 1) // 2
            left, right = shuffled[1 : 1 + half], shuffled[1 + half :]
            blocks = split_blocks(left, right, mode)
            what = f"bridge {bridge} between {sorted(left)} and {sorted(right)}"
        await cluster.set_blocks(blocks)

        async def heal() -> str:
            await cluster.heal_network()
            return ""

        nodes = sorted({n for pair in blocks for n in pair})
        return Injected(
            self.name, f"{what} ({mode})", nodes, rng.uniform(1.0, 6.0), heal, "network"
        )


# -- power loss (LazyFS) -------------------------------------------------------------------------
def optional_module(name: str) -> tuple[ModuleType | None, str | None]:
    """Import ``name``; (None, reason) when it is missing or broken."""
    try:
        return importlib.import_module(name), None
    except Exception as e:  # any import-time failure means "unavailable", with the reason
        return None, f"{name} not importable: {type(e).__name__}: {e}"


def lazyfs_unavailable() -> str | None:
    mod, why = optional_module("tests.chaos.lazyfs")
    if mod is None:
        return why
    probe = getattr(mod, "unavailable_reason", None)
    return probe() if callable(probe) else None


def mounts_unavailable(cluster: ChaosCluster) -> str | None:
    """Why no fault can act on a node's LazyFS mount here (None: one can)."""
    why = lazyfs_unavailable()
    if why is not None:
        return why
    if not cluster.mounts:
        return "no node runs on a LazyFS mount (see --lazyfs)"
    return None


@dataclass
class PowerLoss:
    name: str = "power-loss"
    exclusive: bool = False
    category: str = "process"
    weight: int = 2

    def unavailable(self, cluster: ChaosCluster) -> str | None:
        return mounts_unavailable(cluster)

    async def inject(self, cluster: ChaosCluster, rng: random.Random) -> Injected | None:
        mounted = [n for n in sorted(cluster.mounts) if n in cluster.procs]
        if not mounted:
            return None
        everyone = len(mounted) == cluster.n and not cluster.damaged and rng.random() < 0.3
        victims = mounted if everyone else [rng.choice(mounted)]
        if not everyone and not _minority_ok(cluster, 1):
            return None
        at = time.monotonic()
        for nid in victims:
            cluster.kill(nid)
        dropped = []
        for nid in victims:
            report = await asyncio.to_thread(cluster.mounts[nid].drop_unsynced)
            dropped.append(f"{nid}:{_short(report)}")

        async def heal() -> str:
            return await restart_checked(cluster, victims)

        what = "all nodes" if everyone else f"node {victims[0]}"
        return Injected(
            self.name,
            f"power loss of {what} (dropped {', '.join(dropped)})",
            victims,
            rng.uniform(0.5, 2.0),
            heal,
            at=at,
        )


def _short(report: object) -> str:
    text = str(report)
    return text if len(text) <= 120 else text[:117] + "..."


# -- file faults -----------------------------------------------------------------------------------
RESTART_FAILED = "RESTART FAILED"
"""Marks a heal after which a node could not start on its own data (kill, power loss)."""


async def restart_checked(cluster: ChaosCluster, nodes: list[int], timeout: float = 60) -> str:
    """Restart ``nodes`` on their data; each must come up by itself. One that exits instead is
    reported (`RESTART_FAILED`) and, if the others still form a majority, repaired the
    documented way (wipe + ``--rejoin``) so that the run goes on."""
    cluster.exited()
    for nid in nodes:
        if nid not in cluster.procs:
            cluster.start_node(nid)
    failed = {}
    for nid in nodes:
        code = await _wait_started(cluster, nid, timeout)
        if code is not None:
            failed[nid] = code
    if not failed:
        return ""
    cluster.exited()
    lines = [
        f"{nid}: {cluster.last_error(nid) or 'no error logged'} (exit code {code})"
        for nid, code in sorted(failed.items())
    ]
    text = (
        f"{RESTART_FAILED}: node(s) {sorted(failed)} could not restart on their data: "
        + "; ".join(lines)
    )
    if cluster.n - len(failed) > cluster.n // 2:
        for nid in failed:
            cluster.kill(nid)
            cluster.wipe(nid)
            cluster.start_node(nid, rejoin=True)
        text += "; wiped and rejoined"
    return text


async def _wait_started(cluster: ChaosCluster, nid: int, timeout: float) -> int | None:
    """Wait until ``nid`` answers /readyz; its exit code if it exited first (None otherwise)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        p = cluster.procs.get(nid)
        if p is None:
            return -1
        code = p.poll()
        if code is not None:
            return code
        if (await cluster.get(nid, "/readyz", 2))[0] == 200:
            return None
        await asyncio.sleep(0.2)
    return None


async def _wait_ready_quietly(cluster: ChaosCluster, timeout: float) -> None:
    with contextlib.suppress(TimeoutError):
        await cluster.wait_ready(timeout)


@dataclass
class MembershipChange:
    name: str = "membership"
    exclusive: bool = False
    category: str = "process"
    weight: int = 2

    def unavailable(self, cluster: ChaosCluster) -> str | None:
        if cluster.n < 4:
            return "needs 4 nodes or more (a drained node's replicas need somewhere to go)"
        return None

    async def inject(self, cluster: ChaosCluster, rng: random.Random) -> Injected | None:
        running = cluster.running()
        nid = await pick_target(cluster, rng)
        others = [n for n in running if n != nid]
        if nid is None or not others:
            return None
        try:
            await cluster.node(rng.choice(others), 5).drain_node(nid)
        except CmqError:
            return None  # refused (too few active nodes) or no catalog leader right now
        description = f"drain node {nid}"
        killed: list[int] = []
        if rng.random() < 0.5 and _minority_ok(cluster, 1):
            target = await _moving_leader(cluster, timeout=3.0)
            if target is not None:
                group, leader = target
                cluster.kill(leader)
                killed.append(leader)
                description += f"; SIGKILL node {leader} leading group {group} mid-move"

        async def heal() -> str:
            extra = await restart_checked(cluster, killed) if killed else ""
            deadline = time.monotonic() + 20
            while True:
                try:
                    via = rng.choice(cluster.running())
                    await cluster.node(via, 5).activate_node(nid)
                    return extra
                except (CmqError, IndexError) as e:
                    if time.monotonic() > deadline:
                        return f"{extra}; node {nid} left draining: {e}".lstrip("; ")
                    await asyncio.sleep(0.5)

        return Injected(
            self.name, description, [nid, *killed], rng.uniform(2.0, 6.0), heal, self.category
        )


async def _moving_leader(cluster: ChaosCluster, timeout: float) -> tuple[int, int] | None:
    """(group, its leader) for a data group with a move in flight, within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        statuses = await cluster.statuses(cluster.running())
        catalog: dict[str, dict[str, object]] = {}
        for st in statuses.values():
            catalog = st.get("data_groups") or catalog
        leaders = await cluster.leaders()
        for g, info in sorted(catalog.items()):
            if info.get("move") is not None and int(g) in leaders:
                return int(g), leaders[int(g)]
        await asyncio.sleep(0.1)
    return None


def _pinned() -> FaultKind:
    from tests.chaos.pinned import PinnedClients

    return PinnedClients()


def _io() -> FaultKind:
    return _disk("io")


def _disk(name: str) -> FaultKind:
    from tests.chaos.diskfaults import disk_fault  # it imports this module

    return disk_fault(name)


def _clock() -> FaultKind:
    from tests.chaos.clock import ClockFault  # it imports this module

    return ClockFault()


REGISTRY: dict[str, Callable[[], FaultKind]] = {
    "kill": Kill,
    "pause": Pause,
    "partition": Partition,
    "power-loss": PowerLoss,
    "bitflip": lambda: _disk("bitflip"),
    "truncate": lambda: _disk("truncate"),
    "rollback": lambda: _disk("rollback"),
    "membership": MembershipChange,
    "pinned": _pinned,
    "clock": _clock,
    "io": _io,
}


def resolve(names: list[str], cluster: ChaosCluster, say: Callable[[str], None]) -> list[FaultKind]:
    """The requested kinds that can run here; the others are skipped with a printed reason."""
    kinds = []
    for name in names:
        if name not in REGISTRY:
            raise SystemExit(f"unknown fault kind {name!r}; known: {', '.join(REGISTRY)}")
        kind = REGISTRY[name]()
        why = kind.unavailable(cluster)
        if why is None:
            kinds.append(kind)
        else:
            say(f"skipping fault kind {name}: {why}")
    return kinds


def now() -> float:
    return time.monotonic()
