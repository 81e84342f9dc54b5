"""`MultiRaft`: every Raft group of one node on one event loop, one log disk per data
directory, one connection per peer.

The host keeps the registry of the node's groups (open, drop, bind each to a data directory),
routes what arrives from peers to them, and hands its other duties to one part each:

- `raftlog.runtime.outbox`: the groups' outgoing messages, batched per peer and event-loop turn;
- `raftlog.runtime.ticks`: the tick loop, node liveness and quiescence of idle groups
  (`raftlog.runtime.liveness`), clock probes, snapshot requests;
- `raftlog.runtime.calls`: requests forwarded to peers and their replies;
- `raftlog.runtime.group`: each group's Ready contract (`GroupDriver`).

The host is given its I/O (`raftlog.runtime.host`): a `PeerTransport`, the `LogDisks` that open
each data directory, a `Clock`, and an `Offload` that runs blocking calls off the event loop.
By default they are the real ones (TCP connections, WALs, the system clock, worker threads);
the simulators give it in-memory twins on a virtual-time loop and run this same code.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from typing import ClassVar

from raftlog.core import (
    ConfChange,
    ConfChangeKind,
    Config,
    ConfState,
    Message,
    MsgType,
    RawNode,
    Status,
)
from raftlog.errors import NotLeader, is_storage_damage
from raftlog.runtime.calls import CallHandler, Calls
from raftlog.runtime.clocks import ClockReading
from raftlog.runtime.config import (
    RemoteCallError,
    RuntimeConfig,
    SendCounters,
)
from raftlog.runtime.group import GroupDriver
from raftlog.runtime.group_options import Offload
from raftlog.runtime.host import SYSTEM_CLOCK, Clock, LogDisk, LogDisks, PeerTransport
from raftlog.runtime.liveness import PeerLiveness
from raftlog.runtime.outbox import Outbox
from raftlog.runtime.peerwatch import PeerWatch
from raftlog.runtime.repair import ReplicaRepair
from raftlog.runtime.statemachine import StateMachine
from raftlog.runtime.stats import RuntimeStats, SentStats, group_stats, peer_link_stats
from raftlog.runtime.ticks import Ticker
from raftlog.storage import WalDisks
from raftlog.transport.codec import (
    FrameKind,
    decode_beat_acks,
    decode_beats,
    decode_messages,
)
from raftlog.transport.peer import Address, Transport

__all__ = ["CallHandler", "MultiRaft", "RemoteCallError", "RuntimeConfig"]

log = logging.getLogger("raftlog.runtime")


def _expire(fut: asyncio.Future[object], timeout: float) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError(f"not applied within {timeout} s; outcome unknown"))


class MultiRaft:
    """Hosts this node's groups. Use ``async with`` or `start` / `close`.

    ``transport``, ``disks``, ``clock`` and ``offload`` are its I/O (see the module docstring);
    each one left out is the real one built from ``cfg``: a `Transport` on ``cfg.listen`` to
    ``cfg.peers``, `WalDisks` with ``cfg.wal_options``, the system clock, and
    ``asyncio.to_thread``. The transport is bound to this host here; the disks are opened by
    `start` and closed by `close`. ``offload`` runs every blocking call of the host: opening
    and closing a disk, opening a group's log, dropping a group, snapshots."""

    ticker_class: ClassVar[type[Ticker]] = Ticker
    """The tick loop's class (a simulator plants bugs in a subclass)."""

    def __init__(
        self,
        cfg: RuntimeConfig,
        *,
        transport: PeerTransport | None = None,
        disks: LogDisks | None = None,
        clock: Clock | None = None,
        offload: Offload | None = None,
    ) -> None:
        if not cfg.data_dirs:
            raise ValueError("at least one data directory is required")
        self.cfg = cfg
        self.id = cfg.node_id
        self.clock: Clock = clock if clock is not None else SYSTEM_CLOCK
        self._offload: Offload = offload if offload is not None else asyncio.to_thread
        self._disks: LogDisks = disks if disks is not None else WalDisks(cfg.wal_options)
        self.groups: dict[int, GroupDriver] = {}
        self._dir_of: dict[int, int] = {}  # open group -> index of its data directory
        self._halted: dict[int, GroupDriver] = {}  # groups that halted (see `halted`)
        self.wals: list[LogDisk] = []
        """The open disk of each data directory, in ``cfg.data_dirs`` order (after `start`)."""
        self._rng = random.Random(cfg.seed)
        if transport is None:
            transport = Transport(cfg.node_id, cfg.listen, cfg.peers, cfg.secret, cfg=cfg.transport)
        transport.bind(self._on_frame, self._on_peer_down)
        self.transport: PeerTransport = transport
        self.unknown_group_messages = 0
        self.counters = SendCounters()
        self.watch = PeerWatch(self.clock)
        """Peers' liveness and wall-clock readings; ``watch.wall_clock`` is this node's clock
        as probes report it (an application with its own clock source sets it)."""
        self.outbox = Outbox(transport, self.groups, self.counters)
        self.calls = Calls(transport, self.watch)
        self.ticker = self.ticker_class(
            cfg,
            self.groups,
            transport=transport,
            outbox=self.outbox,
            watch=self.watch,
            disks=self.wals,
        )
        self.liveness: PeerLiveness = self.ticker.liveness
        self.repairs = ReplicaRepair(
            self.groups, self.wals, self.dir_for, self._reopen_rejoining, self._offload, self.clock
        )
        """Repairs of damaged replicas (`raftlog.runtime.repair`; off until ``enabled``)."""
        self._repair_task: asyncio.Task[None] | None = None
        self._sms: dict[int, StateMachine] = {}

    async def __aenter__(self) -> MultiRaft:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Open (recover) every data directory's disk, listen for peers, start ticking."""
        for d in self.cfg.data_dirs:
            disk: LogDisk = await self._offload(self._disks, d)
            self.wals.append(disk)
        await self.transport.start()
        self.ticker.start()
        self._repair_task = asyncio.get_running_loop().create_task(
            self.repairs.run(), name="raft-repairs"
        )

    async def close(self) -> None:
        """Stop ticking, stop every group (failing its waiters), fail the calls in flight,
        close the transport and the disks."""
        await self.ticker.stop()
        if self._repair_task is not None:
            self._repair_task.cancel()
            await asyncio.gather(self._repair_task, return_exceptions=True)
            self._repair_task = None
        await self.repairs.close()
        for g in list(self.groups.values()):
            await g.stop("node shutting down")
        await self.calls.close()
        await self.transport.close()
        for w in self.wals:
            await self._offload(w.close)
        self.wals.clear()

    # -- groups -----------------------------------------------------------------------------------
    def dir_for(self, group: int, preferred: int | None = None) -> int:
        """Which data directory ``group`` is bound to: where it is open, else where its state
        was recovered, else ``preferred`` (e.g. the placement's choice) when it is a valid
        index, else by group id."""
        d = self._dir_of.get(group)
        if d is not None:
            return d
        for i, w in enumerate(self.wals):
            if group in w.groups():
                return i
        n = len(self.cfg.data_dirs)
        if preferred is not None and 0 <= preferred < n:
            return preferred
        return group % n

    def stored_groups(self) -> tuple[int, ...]:
        """Every group with state in this node's data directories (open or not), sorted."""
        return tuple(sorted({g for w in self.wals for g in w.groups()}))

    async def open_group(
        self,
        group: int,
        sm: StateMachine,
        *,
        voters: Sequence[int] = (),
        rejoin: bool = False,
        data_dir: int | None = None,
    ) -> GroupDriver:
        """Open ``group`` with its state machine. A group new to this node is bootstrapped with
        ``voters`` when given (a founding member), or starts empty to join as a learner.

        ``rejoin`` (or `RuntimeConfig.rejoin`): the group starts in the core's rejoin mode, as
        a replica added to a running group should (no vote until caught up; a commit index
        beyond its log, e.g. in a late heartbeat meant for an earlier incarnation of this
        replica, makes it ask the leader for the log instead of stopping the group)."""
        if group in self.groups:
            raise ValueError(f"group {group} is already open")
        index = self.dir_for(group, data_dir)
        rejoin = rejoin or self.repairs.marked(group, index)
        try:
            return await self._open(group, sm, index, voters, rejoin)
        except Exception as exc:
            if not (self.repairs.enabled and is_storage_damage(exc)):
                raise
            reason = str(exc)
        # Damage found while opening: reset this replica and catch it up from the others.
        await self.repairs.reset(group, index, reason)
        driver = await self._open(group, sm, index, (), True)
        driver.reset_by_repair = True
        return driver

    async def _reopen_rejoining(self, group: int, index: int) -> None:
        """Open ``group`` again, empty and rejoining, with its state machine (a repair)."""
        driver = await self._open(group, self._sms[group], index, (), True)
        driver.reset_by_repair = True

    async def _open(
        self, group: int, sm: StateMachine, index: int, voters: Sequence[int], rejoin: bool
    ) -> GroupDriver:
        wal = self.wals[index]
        founding = ConfState(tuple(sorted(voters))) if voters else None
        store = await self._offload(wal.open_group, group, founding)
        voters = store.initial_state()[1].voters
        if voters:
            self.repairs.voters[group] = voters
        raw = RawNode(
            Config(
                self.id,
                election_tick=self.cfg.election_tick,
                heartbeat_tick=self.cfg.heartbeat_tick,
                rejoin=self.cfg.rejoin or rejoin,
            ),
            store,
            random.Random(self._rng.getrandbits(64)),
        )
        # Damage may surface here (the snapshot file is read, the state machine restored);
        # the disk's claim on the group then stays until a repair drops the group.
        driver = GroupDriver(
            group,
            raw,
            store,
            sm,
            send=self.outbox.send,
            options=self.cfg.group_options,
            offload=self._offload,
            on_halt=self._on_halt,
        )
        driver.start()
        self.groups[group] = driver
        if driver.stopped is not None:
            self._halted[group] = driver  # halted while starting, before it was in `groups`
        self.ticker.track(driver)
        self._dir_of[group] = index
        self._sms[group] = sm
        return driver

    def _on_halt(self, group: int, exc: BaseException) -> None:
        """A group's driver halted: damage to its stored state is repaired (when enabled)."""
        driver = self.groups.get(group)
        if driver is not None:
            self._halted[group] = driver
        if is_storage_damage(exc):
            self.repairs.repair(group, str(exc))

    def halted(self) -> dict[int, BaseException]:
        """The open groups whose drivers halted on an error (`GroupDriver.halt`), with that
        error, by group: kept as they halt, so asking costs nothing per healthy group."""
        out: dict[int, BaseException] = {}
        for g, d in list(self._halted.items()):
            if self.groups.get(g) is not d or d.stopped is None:
                del self._halted[g]  # dropped or reopened since
            else:
                out[g] = d.stopped
        return out

    async def verify_snapshot(self, group: int) -> int:
        """Re-read and check ``group``'s latest stored snapshot (`DurableLog.verify_snapshot`,
        on a worker thread); damage raises `CorruptRecord`. 0 when the group is not open."""
        driver = self.groups.get(group)
        if driver is None or driver.stopped is not None:
            return 0
        size: int = await self._offload(driver.store.verify_snapshot)
        return size

    def repair_group(self, group: int, reason: str) -> bool:
        """Repair this node's replica of ``group`` from the others, in the background (the
        application found its stored state damaged, e.g. a read or a scrub; see
        `raftlog.runtime.repair`). False when repairs are disabled or the group is not open."""
        return self.repairs.repair(group, reason)

    async def drop_group(self, group: int) -> None:
        """Stop ``group`` here and durably forget its state (this node is no longer one of its
        replicas): its waiters fail, a DROP record voids its WAL history and its snapshot
        files go. Messages for it are counted as `unknown_group_messages` from now on."""
        g = self.groups.pop(group, None)
        if g is None:
            return
        await g.stop(f"group {group} left this node")
        self._sms.pop(group, None)
        index = self._dir_of.pop(group)
        await asyncio.wrap_future(await self._offload(self.wals[index].drop_group, group))

    def add_peer(self, node: int, address: Address) -> None:
        """Know (or re-address) ``node``: a node that joined the cluster at run time."""
        self.transport.add_peer(node, address)

    def remove_peer(self, node: int) -> None:
        """Forget ``node`` (removed from the cluster); a no-op for this node itself."""
        if node != self.id:
            self.transport.remove_peer(node)
            self.watch.forget(node)

    def peers(self) -> tuple[int, ...]:
        """The peers this node knows (itself excluded), sorted."""
        return tuple(sorted(self.transport.peers))

    def group(self, group: int) -> GroupDriver:
        g = self.groups.get(group)
        if g is None:
            raise KeyError(f"group {group} is not open on node {self.id}")
        return g

    async def propose(self, group: int, command: bytes, timeout: float | None = None) -> object:
        """Propose ``command`` to ``group`` (this node must lead it); await the applied result.

        After ``timeout`` seconds the wait fails with ``TimeoutError`` (the outcome is then
        unknown: the entry may still commit).
        """
        driver = self.groups.get(group)
        if driver is None:
            # Left this node (a drain moved it) while the caller was on its way: nothing was
            # proposed, so the caller may try the group's current leader.
            raise NotLeader(0, f"group {group} is not open on node {self.id}")
        fut = driver.propose(command)
        if timeout is None:
            return await fut
        # A timer on the future itself: far cheaper than asyncio.wait_for's extra task.
        handle = asyncio.get_running_loop().call_later(timeout, _expire, fut, timeout)
        try:
            return await fut
        finally:
            handle.cancel()

    async def change_membership(self, group: int, kind: ConfChangeKind, node: int) -> None:
        """One single-server membership step; returns once it is applied on this (leader) node."""
        await self.group(group).propose_conf_change(ConfChange(kind, node))

    def transfer_leader(self, group: int, to: int) -> None:
        self.group(group).transfer_leader(to)

    def status(self, group: int) -> Status:
        return self.group(group).status()

    def stats(self) -> RuntimeStats:
        """A frozen snapshot of the node's counters: per WAL, per group (with term and known
        leader), per peer link, and what was sent. Cheap (copies counters); call at will."""
        groups = tuple(group_stats(gid, g) for gid, g in sorted(self.groups.items()))
        peers = tuple(peer_link_stats(pid, p) for pid, p in self.transport.stats().items())
        c = self.counters
        return RuntimeStats(
            node=self.id,
            wals=tuple(w.stats() for w in self.wals),
            groups=groups,
            peers=peers,
            sent=SentStats(c.appends, c.append_entries, c.append_bytes, c.flushes),
            refused_connections=self.transport.refused,
        )

    def quiesced(self) -> tuple[int, ...]:
        """The groups open here that are quiesced (not ticked), sorted."""
        return tuple(sorted(gid for gid, g in self.groups.items() if g.quiesced))

    def suspects(self) -> tuple[int, ...]:
        """The peers this node has not heard from lately (or whose link is down), sorted."""
        return self.liveness.suspects()

    def conf(self, group: int) -> ConfState:
        """``group``'s current configuration here, without building a `Status`."""
        return self.group(group).raw.raft.conf

    def leader_of(self, group: int) -> int:
        """The leader ``group`` knows of (0: none); cheap enough for every request."""
        return self.group(group).leader()

    def recovering(self, group: int) -> bool:
        """Whether this replica of ``group`` is still out of elections (see `GroupDriver`)."""
        return self.group(group).recovering()

    def require_leader(self, group: int) -> GroupDriver:
        """The driver when this node leads ``group``; otherwise `NotLeader` with a hint."""
        g = self.group(group)
        st = g.raw.raft
        if st.lead != self.id:
            raise NotLeader(st.lead)
        return g

    # -- forwarded calls (raftlog.runtime.calls) -------------------------------------------------
    def set_call_handler(self, handler: CallHandler) -> None:
        """Serve calls that peers forward here (e.g. client requests for groups led here)."""
        self.calls.handler = handler

    @property
    def _call_handler(self) -> CallHandler | None:
        """The handler set by `set_call_handler` (tests wrap it)."""
        return self.calls.handler

    @property
    def max_concurrent_calls(self) -> int:
        """Forwarded calls in flight from here, and served here at once, at most."""
        return self.calls.max_concurrent

    @max_concurrent_calls.setter
    def max_concurrent_calls(self, n: int) -> None:
        self.calls.max_concurrent = n

    async def call(
        self,
        peer: int,
        payload: bytes,
        timeout: float,
        *,
        abandon: Callable[[], str | None] | None = None,
        check_every: float = 0.2,
    ) -> bytes:
        """Send ``payload`` to ``peer``'s call handler over the peer connection; await its reply.

        Raises `RemoteCallError` (the peer's error reply), `PeerUnavailable` (peer unreachable or no
        reply within ``timeout``; the outcome is then unknown) or `Overloaded`. ``abandon``, when
        given, is asked every ``check_every`` seconds while the reply is awaited: a reason (not
        None) ends the wait at once with `PeerUnavailable` (outcome unknown), e.g. the peer went
        silent (`silent_for`) or another node is known to lead now.
        """
        return await self.calls.call(
            peer, payload, timeout, abandon=abandon, check_every=check_every
        )

    def silent_for(self, peer: int) -> float:
        """Seconds since the last frame from ``peer`` (any kind: raft traffic, heartbeats,
        clock probes, replies); since this node started if none came yet."""
        return self.watch.silent_for(peer)

    def clock_readings(self) -> tuple[ClockReading, ...]:
        """The latest wall-clock reading of each peer that answered a probe (judge them with
        `raftlog.runtime.clocks.judge`)."""
        return self.watch.readings()

    # -- receiving --------------------------------------------------------------------------------
    def _on_frame(self, peer: int, kind: FrameKind, body: bytes) -> None:
        self.watch.heard(peer)
        self.ticker.heard(peer)
        if kind is FrameKind.RAFT:
            for group, m in decode_messages(body):
                if m.frm != peer or m.to != self.id:
                    log.warning("dropping a misaddressed message from node %d", peer)
                    continue
                self._deliver(group, m)
        elif kind is FrameKind.BEATS:
            for b in decode_beats(body):
                self._deliver(
                    b.group,
                    Message(MsgType.HEARTBEAT, to=self.id, frm=peer, term=b.term, commit=b.commit),
                )
        elif kind is FrameKind.QUIESCE:
            for b in decode_beats(body):
                self._deliver(
                    b.group,
                    Message(MsgType.HEARTBEAT, to=self.id, frm=peer, term=b.term, commit=b.commit),
                )
                self.ticker.quiesce_follower(b.group, peer, b.term, b.commit)
        elif kind is FrameKind.BEAT_ACKS:
            for a in decode_beat_acks(body):
                self._deliver(
                    a.group, Message(MsgType.HEARTBEAT_RESP, to=self.id, frm=peer, term=a.term)
                )
        elif kind is FrameKind.CALL:
            self.calls.on_call(peer, body)
        elif kind is FrameKind.REPLY:
            self.calls.on_reply(peer, body)
        else:
            log.warning("unexpected %s frame from node %d", kind.name, peer)

    def _deliver(self, group: int, m: Message) -> None:
        g = self.groups.get(group)
        if g is None:
            self.unknown_group_messages += 1
            return
        g.step(m)

    def _on_peer_down(self, peer: int) -> None:
        self.ticker.peer_down(peer)
