"""`RawNode`: the caller-facing handle on one group's Raft state machine.

The caller (the runtime, the simulator, a test) owns all I/O. The loop is:

1. feed inputs: `tick`, `step`, `propose`, `propose_conf_change`, `transfer_leader`, reports;
2. when `has_ready`, take ``rd = ready()`` and carry out its contract (see `Ready`):
   send ``rd.messages`` at once; persist snapshot, entries, hard state (fsync iff
   ``rd.must_sync``); then send ``rd.persisted_messages``; apply ``rd.snapshot`` and
   ``rd.committed``;
3. call ``advance(rd)``.

Between ``ready()`` and ``advance()`` inputs may keep arriving (that is how a leader's disk write
overlaps replication); `take_messages` hands out messages that may leave immediately without
waiting for the outstanding Ready. A second ``ready()`` before ``advance()`` is a bug.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from raftlog.core.config import Config
from raftlog.core.progress import ProgressState
from raftlog.core.raft import Raft
from raftlog.core.storage import Storage
from raftlog.core.types import (
    ConfChange,
    ConfState,
    EntryKind,
    HardState,
    Message,
    Ready,
    Role,
    SoftState,
    must_sync,
)
from raftlog.errors import InvariantViolation

if TYPE_CHECKING:
    import random


@dataclass(frozen=True, slots=True)
class PeerStatus:
    """The leader's view of one peer."""

    match: int
    next: int
    state: ProgressState
    inflight: int
    recent_active: bool
    learner: bool


@dataclass(frozen=True, slots=True)
class Status:
    """A point-in-time description of a node in a group (for status pages and tests)."""

    id: int
    term: int
    vote: int
    role: Role
    leader: int
    commit: int
    applied: int
    last_index: int
    first_index: int
    conf: ConfState
    peers: dict[int, PeerStatus]
    transferee: int
    recovering: bool = False
    """Restarted and still waiting for peers' answers before it may vote
    (`raftlog.core.recovery`), or out of elections until it holds what it lost (rejoining)."""


class RawNode:
    """One node of one Raft group. Not thread-safe: drive it from a single thread/task."""

    __slots__ = ("_in_flight", "_prev_hard", "_prev_soft", "raft")

    def __init__(self, config: Config, storage: Storage, rng: random.Random) -> None:
        self.raft = Raft(config, storage, rng)
        self._prev_hard = storage.initial_state()[0]
        self._prev_soft = SoftState()
        self._in_flight: Ready | None = None

    # -- inputs -------------------------------------------------------------------------------
    def tick(self) -> None:
        """One unit of logical time (the runtime ticks every ~100 ms)."""
        self.raft.tick()

    def step(self, m: Message) -> None:
        """Deliver a message from a peer. Messages for another node are a caller bug."""
        if m.to != self.raft.id:
            raise InvariantViolation(f"message for {m.to} delivered to {self.raft.id}")
        self.raft.step(m)

    def campaign(self) -> None:
        """Start an election now (tests and bootstrapping; normally elections come from ticks)."""
        self.raft.campaign(pre=self.raft.cfg.pre_vote)

    def propose(self, data: bytes) -> int:
        """Propose ``data``; returns the index it will have if committed.

        Raises `NotLeader` (with a leader hint), `Overloaded`: both retriable. The entry is
        committed once it appears in ``Ready.committed`` with this node's current term.
        """
        return self.raft.propose(data)

    def propose_conf_change(self, cc: ConfChange) -> int:
        """Propose a single-server membership step; returns its index.

        Raises `ConfChangeInProgress` while an earlier change is not yet applied.
        """
        return self.raft.propose(cc.encode(), EntryKind.CONF)

    def transfer_leader(self, to: int) -> None:
        """Ask the leader to hand over to ``to`` (see `Raft.transfer_leader`)."""
        self.raft.transfer_leader(to)

    def report_unreachable(self, to: int) -> None:
        self.raft.report_unreachable(to)

    def report_peer_down(self, peer: int) -> None:
        """The connection to ``peer`` dropped: a follower it led campaigns promptly
        (`Raft.report_peer_down`)."""
        self.raft.report_peer_down(peer)

    def report_snapshot(self, to: int, ok: bool) -> None:
        self.raft.report_snapshot(to, ok)

    # -- outputs ------------------------------------------------------------------------------
    def _soft(self) -> SoftState:
        return SoftState(self.raft.lead, self.raft.role)

    def _hard(self) -> HardState:
        return HardState(self.raft.term, self.raft.vote, self.raft.log.committed)

    def has_ready(self) -> bool:
        """Whether `ready` would return something to do (always False while one is in flight)."""
        if self._in_flight is not None:
            return False
        r = self.raft
        log = r.log
        return bool(
            r.msgs
            or r.msgs_after_persist
            or self._soft() != self._prev_soft
            or self._hard() != self._prev_hard
            or log.unpersisted()
            or log.pending_snapshot is not None
            or log.applied < min(log.committed, log.stable_last())
        )

    def take_messages(self) -> list[Message]:
        """Messages that may be sent right now, even while a Ready is in flight."""
        msgs = self.raft.msgs
        self.raft.msgs = []
        return msgs

    def ready(self) -> Ready:
        """Collect the work to do. Must be followed by `advance` with the same object."""
        if self._in_flight is not None:
            raise InvariantViolation("ready() called again before advance()")
        r = self.raft
        log = r.log
        soft = self._soft()
        hard = self._hard()
        entries = tuple(log.unpersisted())
        snapshot = log.pending_snapshot
        committed = tuple(log.next_committed(r.cfg.max_apply_bytes))
        rd = Ready(
            soft_state=soft if soft != self._prev_soft else None,
            hard_state=hard if hard != self._prev_hard else None,
            entries=entries,
            snapshot=snapshot,
            committed=committed,
            messages=tuple(self.take_messages()),
            persisted_messages=tuple(r.msgs_after_persist),
            must_sync=must_sync(self._prev_hard, hard, len(entries)) or snapshot is not None,
        )
        r.msgs_after_persist = []
        log.mark_in_progress(entries)
        self._in_flight = rd
        return rd

    def advance(self, rd: Ready) -> None:
        """The caller has carried out ``rd``: record persistence and application."""
        if rd is not self._in_flight:
            raise InvariantViolation("advance() with a Ready that is not the one in flight")
        self._in_flight = None
        r = self.raft
        log = r.log
        if rd.soft_state is not None:
            self._prev_soft = rd.soft_state
        if rd.hard_state is not None:
            self._prev_hard = rd.hard_state
        if rd.snapshot is not None:
            log.snapshot_persisted(rd.snapshot)
            log.applied = max(log.applied, rd.snapshot.meta.index)
        if rd.entries:
            last = rd.entries[-1]
            log.stable_to(last.index, last.term)
            r.on_persisted(last.index, last.term)
        r.maybe_finish_rejoin()
        if rd.committed:
            for e in rd.committed:
                if e.kind is EntryKind.CONF:
                    r.apply_conf_change(ConfChange.decode(e.data))
            log.applied_to(rd.committed[-1].index)

    # -- inspection ---------------------------------------------------------------------------
    def status(self) -> Status:
        """Role, term, indexes and (on a leader) per-peer progress."""
        r = self.raft
        peers = {
            node: PeerStatus(
                pr.match,
                pr.next,
                pr.state,
                pr.inflights.count(),
                pr.recent_active,
                pr.is_learner,
            )
            for node, pr in sorted(r.progress.items())
        }
        return Status(
            id=r.id,
            term=r.term,
            vote=r.vote,
            role=r.role,
            leader=r.lead,
            commit=r.log.committed,
            applied=r.log.applied,
            last_index=r.log.last_index(),
            first_index=r.log.first_index(),
            conf=r.conf,
            peers=peers,
            transferee=r.lead_transferee,
            recovering=r.out_of_elections(),
        )
