"""`MultiRaft`: every Raft group of one node on one event loop, one WAL per data directory, one
connection per peer.

Outgoing messages are collected per peer during one event-loop iteration and flushed as one
``RAFT`` frame (plus one ``BEATS``/``BEAT_ACKS`` frame with all groups' heartbeats), so many
groups share frames and syscalls. A heartbeat for a group that sent that peer an append since the
last tick is skipped: the append already proved liveness.
Idle groups stop being ticked (quiescence and node liveness: `raftlog.runtime.liveness`).

The host is given its I/O (`raftlog.runtime.host`): a `PeerTransport`, the `LogDisks` that open
each data directory, a `Clock`, and an `Offload` that runs blocking calls off the event loop.
By default they are the real ones (TCP connections, WALs, the system clock, worker threads);
the simulators give it in-memory twins on a virtual-time loop and run this same code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

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
from raftlog.errors import NotLeader, Overloaded, PeerUnavailable, RaftError
from raftlog.runtime.clocks import ClockReading
from raftlog.runtime.config import (
    RemoteCallError,
    RuntimeConfig,
    SendCounters,
)
from raftlog.runtime.group import GroupDriver
from raftlog.runtime.group_options import Offload
from raftlog.runtime.host import SYSTEM_CLOCK, Clock, LogDisk, LogDisks, PeerTransport
from raftlog.runtime.liveness import PeerLiveness, quiesce_idle
from raftlog.runtime.peerwatch import CallWatchdog, PeerWatch
from raftlog.runtime.statemachine import StateMachine
from raftlog.runtime.stats import RuntimeStats, SentStats, group_stats, peer_link_stats
from raftlog.storage import WalDisks
from raftlog.transport.codec import (
    PROBE_CALL_BIT,
    Beat,
    BeatAck,
    FrameKind,
    decode_beat_acks,
    decode_beats,
    decode_call,
    decode_messages,
    encode_beat_acks,
    encode_beats,
    encode_call,
    encode_messages,
    is_clock_probe,
)
from raftlog.transport.peer import Address, Transport

log = logging.getLogger("raftlog.runtime")

CallHandler = Callable[[int, bytes], Awaitable[bytes]]
"""Serves a call forwarded by a peer: (peer id, request payload) → reply payload. Raising
`RemoteCallError` sends its message back as an error reply."""


@dataclass(slots=True)
class _Outbox:
    messages: list[tuple[int, Message]] = field(default_factory=list)
    beats: list[Beat] = field(default_factory=list)
    acks: list[BeatAck] = field(default_factory=list)
    quiet: list[Beat] = field(default_factory=list)


_NO_BEATS = encode_beats([])
"""An empty ``BEATS`` body: the per-tick liveness frame to every peer."""


def _expire(fut: asyncio.Future[object], timeout: float) -> None:
    if not fut.done():
        fut.set_exception(TimeoutError(f"not applied within {timeout} s; outcome unknown"))


def _expire_call(fut: asyncio.Future[bytes], why: str) -> None:
    if not fut.done():
        fut.set_exception(PeerUnavailable(why))


class MultiRaft:
    """Hosts this node's groups. Use ``async with`` or `start` / `close`.

    ``transport``, ``disks``, ``clock`` and ``offload`` are its I/O (see the module docstring);
    each one left out is the real one built from ``cfg``: a `Transport` on ``cfg.listen`` to
    ``cfg.peers``, `WalDisks` with ``cfg.wal_options``, the system clock, and
    ``asyncio.to_thread``. The transport is bound to this host here; the disks are opened by
    `start` and closed by `close`. ``offload`` runs every blocking call of the host: opening
    and closing a disk, opening a group's log, dropping a group, snapshots."""

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
        self.wals: list[LogDisk] = []
        """The open disk of each data directory, in ``cfg.data_dirs`` order (after `start`)."""
        self._rng = random.Random(cfg.seed)
        self._outboxes: dict[int, _Outbox] = {}
        self._flush_scheduled = False
        # (peer, group) pairs that got an append since the last tick: their heartbeat is skipped.
        self._appended: set[tuple[int, int]] = set()
        self._tick_task: asyncio.Task[None] | None = None
        self.liveness = PeerLiveness(cfg.liveness_ticks)
        if transport is None:
            transport = Transport(cfg.node_id, cfg.listen, cfg.peers, cfg.secret, cfg=cfg.transport)
        transport.bind(self._on_frame, self._on_peer_down)
        self.transport: PeerTransport = transport
        self.unknown_group_messages = 0
        self.counters = SendCounters()
        self._call_handler: CallHandler | None = None
        self._calls: dict[int, asyncio.Future[bytes]] = {}
        self._call_ids = 0
        self._serving: dict[asyncio.Task[None], None] = {}  # ordered: runs replay
        self.max_concurrent_calls = 4096
        self.watch = PeerWatch(self.clock)
        """Peers' liveness and wall-clock readings; ``watch.wall_clock`` is this node's clock
        as probes report it (an application with its own clock source sets it)."""

    async def __aenter__(self) -> MultiRaft:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Open (recover) every data directory's disk, listen for peers, start ticking."""
        for d in self.cfg.data_dirs:
            self.wals.append(await self._offload(self._disks, d))
        await self.transport.start()
        self._tick_task = asyncio.get_running_loop().create_task(self._tick_loop(), name="ticks")

    async def close(self) -> None:
        """Stop ticking, stop every group (failing its waiters), close transport and WALs."""
        if self._tick_task is not None:
            self._tick_task.cancel()
            await asyncio.gather(self._tick_task, return_exceptions=True)
            self._tick_task = None
        for g in list(self.groups.values()):
            await g.stop("node shutting down")
        for fut in self._calls.values():
            if not fut.done():
                fut.set_exception(PeerUnavailable("node shutting down"))
        self._calls.clear()
        serving = list(self._serving)
        for t in serving:
            t.cancel()
        await asyncio.gather(*serving, return_exceptions=True)
        await self.transport.close()
        for w in self.wals:
            await self._offload(w.close)
        self.wals = []

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
        wal = self.wals[index]
        founding = ConfState(tuple(sorted(voters))) if voters else None
        store = await self._offload(wal.open_group, group, founding)
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
        driver = GroupDriver(
            group,
            raw,
            store,
            sm,
            send=self._send,
            options=self.cfg.group_options,
            offload=self._offload,
        )
        self.groups[group] = driver
        self._dir_of[group] = index
        driver.start()
        return driver

    async def drop_group(self, group: int) -> None:
        """Stop ``group`` here and durably forget its state (this node is no longer one of its
        replicas): its waiters fail, a DROP record voids its WAL history and its snapshot
        files go. Messages for it are counted as `unknown_group_messages` from now on."""
        g = self.groups.pop(group, None)
        if g is None:
            return
        await g.stop(f"group {group} left this node")
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

    # -- forwarded calls --------------------------------------------------------------------------
    def set_call_handler(self, handler: CallHandler) -> None:
        """Serve calls that peers forward here (e.g. client requests for groups led here)."""
        self._call_handler = handler

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
        if len(self._calls) >= self.max_concurrent_calls:
            raise Overloaded("too many forwarded calls in flight")
        self._call_ids += 1
        rid = self._call_ids
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._calls[rid] = fut
        try:
            if not self.transport.send(peer, FrameKind.CALL, encode_call(rid, False, payload)):
                raise PeerUnavailable(f"node {peer} is unreachable", outcome_unknown=False)
            handle = asyncio.get_running_loop().call_later(
                timeout, _expire_call, fut, f"node {peer} did not answer within {timeout} s"
            )
            dog = CallWatchdog(fut, peer, abandon, check_every) if abandon else None
            try:
                return await fut
            finally:
                handle.cancel()
                if dog is not None:
                    dog.cancel()
        finally:
            self._calls.pop(rid, None)

    def silent_for(self, peer: int) -> float:
        """Seconds since the last frame from ``peer`` (any kind: raft traffic, heartbeats,
        clock probes, replies); since this node started if none came yet."""
        return self.watch.silent_for(peer)

    def clock_readings(self) -> tuple[ClockReading, ...]:
        """The latest wall-clock reading of each peer that answered a probe (judge them with
        `raftlog.runtime.clocks.judge`)."""
        return self.watch.readings()

    async def _serve_call(self, peer: int, rid: int, payload: bytes) -> None:
        handler = self._call_handler
        try:
            if handler is None:
                raise RemoteCallError(b"no call handler on this node")
            reply, is_error = await handler(peer, payload), False
        except RemoteCallError as e:
            reply, is_error = e.payload, True
        except Exception as e:  # reported to the caller, never swallowed silently
            log.exception("forwarded call from node %d failed", peer)
            reply, is_error = f"internal error: {type(e).__name__}".encode(), True
        self.transport.send(peer, FrameKind.REPLY, encode_call(rid, is_error, reply))

    # -- ticking ----------------------------------------------------------------------------------
    async def _tick_loop(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.cfg.tick_interval
        next_at = loop.time()
        ticks = 0
        while True:
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            if loop.time() - next_at > interval * 5:
                next_at = loop.time()  # we fell far behind (paused process): do not burst ticks
            self._appended.clear()
            self._check_liveness()
            for g in list(self.groups.values()):
                if not g.quiesced:
                    g.tick()
            if self.cfg.quiesce:
                self._quiesce_idle()
            ticks += 1
            if ticks % self.cfg.clock_probe_ticks == 0:
                peers = [p for p in self.transport.peers if p != self.id]
                self.watch.probe(self.transport.send, peers)
            if ticks % self.cfg.pin_check_ticks == 0:
                self._snapshot_pinning_groups()
            if ticks % self.cfg.snapshot_every_ticks == 0:
                for g in list(self.groups.values()):
                    g.request_snapshot()

    # -- quiescence and node liveness (raftlog.runtime.liveness) ------------------------------
    def _check_liveness(self) -> None:
        """Send every peer this tick's liveness frame; peers newly silent wake every group."""
        for peer in self.transport.peers:
            self.transport.send(peer, FrameKind.BEATS, _NO_BEATS)
        catch_up = self.liveness.tick(self.transport.peers)
        if catch_up:
            self._wake_all(catch_up)

    def _wake_all(self, catch_up: int) -> None:
        for g in list(self.groups.values()):
            g.wake(catch_up)

    def _quiesce_idle(self) -> None:
        def live(p: int) -> bool:
            return self.liveness.is_live(p) and self.transport.is_connected(p)

        for q in quiesce_idle(self.groups, self.id, live):
            for p in q.followers:
                box = self._outboxes.get(p)
                if box is None:
                    box = self._outboxes[p] = _Outbox()
                box.quiet.append(Beat(q.group, q.term, q.commit))
        if self._outboxes and not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _snapshot_pinning_groups(self) -> None:
        """Ask groups that keep old WAL segments alive to snapshot, so the segments can go."""
        for wal in self.wals:
            if len(wal.segments()) <= self.cfg.max_wal_segments:
                continue
            for gid in wal.pinning_groups():
                g = self.groups.get(gid)
                if g is not None:
                    g.request_snapshot()

    # -- sending ----------------------------------------------------------------------------------
    def _send(self, group: int, msgs: Sequence[Message]) -> None:
        for m in msgs:
            box = self._outboxes.get(m.to)
            if box is None:
                box = self._outboxes[m.to] = _Outbox()
            if m.type is MsgType.HEARTBEAT:
                if (m.to, group) in self._appended:
                    continue
                box.beats.append(Beat(group, m.term, m.commit))
            elif m.type is MsgType.HEARTBEAT_RESP:
                box.acks.append(BeatAck(group, m.term))
            else:
                if m.type is MsgType.APP:
                    self._appended.add((m.to, group))
                    self.counters.appends += 1
                    self.counters.append_entries += len(m.entries)
                    self.counters.append_bytes += sum(len(e.data) for e in m.entries)
                box.messages.append((group, m))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        boxes, self._outboxes = self._outboxes, {}
        self.counters.flushes += 1
        for peer, box in sorted(boxes.items()):
            # Snapshots travel in frames of their own: a large one is sent in chunks
            # between the other traffic instead of holding the small messages back.
            small = [(g, m) for g, m in box.messages if m.type is not MsgType.SNAP]
            batches = [small] if small else []
            batches += [[(g, m)] for g, m in box.messages if m.type is MsgType.SNAP]
            for batch in batches:
                if self.transport.send(peer, FrameKind.RAFT, encode_messages(batch)):
                    continue
                for group, m in batch:
                    g = self.groups.get(group)
                    if g is None:
                        continue
                    if m.type is MsgType.SNAP:
                        g.report_snapshot(peer, False)
                    g.report_unreachable(peer)
            if box.beats:
                self.transport.send(peer, FrameKind.BEATS, encode_beats(box.beats))
            if box.acks:
                self.transport.send(peer, FrameKind.BEAT_ACKS, encode_beat_acks(box.acks))
            # A group woken since it quiesced (a proposal in the same turn) says nothing.
            quiet = [b for b in box.quiet if (g := self.groups.get(b.group)) and g.quiesced]
            if quiet:
                self.transport.send(peer, FrameKind.QUIESCE, encode_beats(quiet))

    # -- receiving --------------------------------------------------------------------------------
    def _on_frame(self, peer: int, kind: FrameKind, body: bytes) -> None:
        self.watch.heard(peer)
        self.liveness.heard(peer)
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
                g = self.groups.get(b.group)
                if g is not None:
                    g.quiesce_follower(peer, b.term, b.commit)
        elif kind is FrameKind.BEAT_ACKS:
            for a in decode_beat_acks(body):
                self._deliver(
                    a.group, Message(MsgType.HEARTBEAT_RESP, to=self.id, frm=peer, term=a.term)
                )
        elif kind is FrameKind.CALL:
            rid, _, payload = decode_call(body)
            if is_clock_probe(payload):
                self.transport.send(peer, FrameKind.REPLY, self.watch.pong(rid, payload))
                return
            if len(self._serving) >= self.max_concurrent_calls:
                err = b"overloaded: too many forwarded calls"
                self.transport.send(peer, FrameKind.REPLY, encode_call(rid, True, err))
                return
            task = asyncio.get_running_loop().create_task(self._serve_call(peer, rid, payload))
            self._serving[task] = None
            task.add_done_callback(lambda t: self._serving.pop(t, None))
        elif kind is FrameKind.REPLY:
            rid, is_error, payload = decode_call(body)
            if rid & PROBE_CALL_BIT:
                if not is_error:  # an error: a peer without probes (alive, no reading)
                    self.watch.on_pong(peer, payload)
                return
            fut = self._calls.get(rid)
            if fut is not None and not fut.done():
                if is_error:
                    fut.set_exception(RemoteCallError(payload))
                else:
                    fut.set_result(payload)
        else:
            log.warning("unexpected %s frame from node %d", kind.name, peer)

    def _deliver(self, group: int, m: Message) -> None:
        g = self.groups.get(group)
        if g is None:
            self.unknown_group_messages += 1
            return
        g.step(m)

    def _on_peer_down(self, peer: int) -> None:
        self._wake_all(self.liveness.down(peer))
        for g in self.groups.values():
            with contextlib.suppress(RaftError):
                g.report_unreachable(peer)
