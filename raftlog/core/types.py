"""Value types of the Raft core: entries, hard state, configuration, snapshots, messages, Ready.

Every type here is a frozen, slotted dataclass or an IntEnum: messages and entries are values that
can be shared between the core, the storage layer and the network codec without defensive copies.
Node ids are positive ints; ``0`` means "none" (no vote, no known leader).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

NONE = 0
"""The node id that means "nobody" (no vote cast, no leader known)."""


class EntryKind(IntEnum):
    """What an entry carries. ``NORMAL`` data is opaque to Raft; ``CONF`` is a `ConfChange`."""

    NORMAL = 0
    CONF = 1


@dataclass(frozen=True, slots=True)
class Entry:
    """One log entry. Invariant: ``index >= 1`` and ``term >= 1``.

    An entry with ``kind == NORMAL`` and empty ``data`` is the no-op a new leader appends to
    commit entries of earlier terms; state machines see it and must treat it as a no-op.
    """

    term: int
    index: int
    kind: EntryKind = EntryKind.NORMAL
    data: bytes = b""

    def size(self) -> int:
        """Bytes this entry counts for in size-bounded windows (payload plus a fixed header)."""
        return len(self.data) + 24


@dataclass(frozen=True, slots=True)
class HardState:
    """The state that must be durable before any message that depends on it is sent.

    ``commit`` is persisted opportunistically: losing it costs re-discovery, never safety, so a
    change of ``commit`` alone never requires an fsync (see `must_sync`).
    """

    term: int = 0
    vote: int = NONE
    commit: int = 0


EMPTY_HARD_STATE = HardState()


class ConfChangeKind(IntEnum):
    """Single-server membership steps. Learners replicate but neither vote nor count for quorum."""

    ADD_LEARNER = 0
    PROMOTE = 1
    REMOVE = 2


@dataclass(frozen=True, slots=True)
class ConfChange:
    """One membership step, carried in an ``EntryKind.CONF`` entry."""

    kind: ConfChangeKind
    node: int

    def encode(self) -> bytes:
        """Fixed 9-byte encoding: kind (1 byte) + node id (8 bytes, big endian)."""
        return bytes([int(self.kind)]) + self.node.to_bytes(8, "big")

    @staticmethod
    def decode(data: bytes) -> ConfChange:
        """Inverse of `encode`; raises ``ValueError`` on malformed input."""
        if len(data) != 9:
            raise ValueError(f"conf change must be 9 bytes, got {len(data)}")
        return ConfChange(ConfChangeKind(data[0]), int.from_bytes(data[1:], "big"))


@dataclass(frozen=True, slots=True)
class ConfState:
    """A membership configuration.

    Invariant: ``voters`` and ``learners`` are disjoint and each is sorted.
    """

    voters: tuple[int, ...] = ()
    learners: tuple[int, ...] = ()

    def apply(self, change: ConfChange) -> ConfState:
        """The configuration after ``change``; idempotent for repeated or no-op steps."""
        voters = set(self.voters)
        learners = set(self.learners)
        if change.kind is ConfChangeKind.ADD_LEARNER:
            if change.node not in voters:
                learners.add(change.node)
        elif change.kind is ConfChangeKind.PROMOTE:
            if change.node in learners:
                learners.discard(change.node)
                voters.add(change.node)
        else:
            voters.discard(change.node)
            learners.discard(change.node)
        return ConfState(tuple(sorted(voters)), tuple(sorted(learners)))

    def members(self) -> tuple[int, ...]:
        """Every node that receives replication: voters then learners, sorted within each."""
        return self.voters + self.learners


@dataclass(frozen=True, slots=True)
class SnapshotMeta:
    """Where a snapshot sits in the log and the configuration in force at that point."""

    index: int = 0
    term: int = 0
    conf: ConfState = field(default_factory=ConfState)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A state machine image covering every entry up to ``meta.index``. ``data`` is opaque."""

    meta: SnapshotMeta = field(default_factory=SnapshotMeta)
    data: bytes = b""


class MsgType(IntEnum):
    """Network message types. Responses are the request type + 1 where there is one."""

    APP = 1
    APP_RESP = 2
    VOTE = 3
    VOTE_RESP = 4
    PRE_VOTE = 5
    PRE_VOTE_RESP = 6
    HEARTBEAT = 7
    HEARTBEAT_RESP = 8
    SNAP = 9
    TIMEOUT_NOW = 10
    LOG_LOST = 11
    """A rejoining follower tells the leader its log ends at ``index`` although the leader
    believed it held more (its disk was lost): the leader probes it again from there."""
    RECOVER = 12
    """A restarted node asks for the answerer's term and last log position (``term``,
    ``log_term``/``index`` describe the asker's own); see `raftlog.core.recovery`."""
    RECOVER_RESP = 13
    """The answer: the answerer's ``term`` and last log position (``log_term``, ``index``)."""


@dataclass(frozen=True, slots=True)
class Message:
    """A Raft message between two nodes of one group.

    Field use by type:
    - ``APP``: ``index``/``log_term`` locate the entry before ``entries``; ``commit`` is the
      leader's commit index.
    - ``APP_RESP``: ``index`` is the last index the follower now durably matches (or, with
      ``reject``, the rejected ``index``); ``reject_hint``/``log_term`` point the leader at a
      probable match (fast back-off).
    - ``VOTE``/``PRE_VOTE``: ``index``/``log_term`` describe the candidate's last entry;
      ``transfer`` marks a campaign started by leadership transfer (bypasses the leader lease).
    - ``HEARTBEAT``: ``commit`` is ``min(leader commit, follower match)``.
    - ``SNAP``: ``snapshot`` is the image to install.

    ``epoch`` (``APP``, ``SNAP``, and echoed by their ``APP_RESP``) names the leader's progress
    record for the follower: a new one is made whenever the leader starts tracking the node
    (it takes office, or the node is added again). The leader ignores an answer to another
    epoch, such as one from a node's earlier incarnation that was removed, wiped and re-added
    under the same id: that answer speaks for a log the node no longer has, and counting it
    would claim entries the new incarnation lacks.
    """

    type: MsgType
    to: int
    frm: int
    term: int
    log_term: int = 0
    index: int = 0
    entries: tuple[Entry, ...] = ()
    commit: int = 0
    reject: bool = False
    reject_hint: int = 0
    snapshot: Snapshot | None = None
    transfer: bool = False
    epoch: int = 0


class Role(IntEnum):
    """A node's role in its group."""

    FOLLOWER = 0
    PRE_CANDIDATE = 1
    CANDIDATE = 2
    LEADER = 3


@dataclass(frozen=True, slots=True)
class SoftState:
    """Volatile state worth reporting: who leads and what this node is. Never persisted."""

    leader: int = NONE
    role: Role = Role.FOLLOWER


@dataclass(frozen=True, slots=True)
class Ready:
    """Everything the caller must do before calling `RawNode.advance` with this object.

    The contract, in order:
    1. Send ``messages`` now: they depend only on state that is already durable (a leader's
       appends and heartbeats; the leader persists its own new entries in parallel).
    2. Persist ``snapshot`` (if any), then ``entries`` (an entry at index *i* replaces any stored
       entry at *i* and everything after it), then ``hard_state`` (if any). Fsync when
       ``must_sync`` is true.
    3. Only after that, send ``persisted_messages`` (votes, append responses: they promise
       durability).
    4. Apply ``snapshot`` (if any) and then ``committed`` to the state machine, in order.
       ``committed`` only holds entries that are already durable here (never this Ready's
       ``entries``), so without a ``snapshot`` it may be applied while step 2 is still under
       way (the runtime overlaps apply with the fsync).
    5. Call ``advance(ready)``. Until then, ``ready()`` must not be called again; ``step``,
       ``tick`` and ``propose`` may be.
    """

    soft_state: SoftState | None = None
    hard_state: HardState | None = None
    entries: tuple[Entry, ...] = ()
    snapshot: Snapshot | None = None
    committed: tuple[Entry, ...] = ()
    messages: tuple[Message, ...] = ()
    persisted_messages: tuple[Message, ...] = ()
    must_sync: bool = False

    def empty(self) -> bool:
        """True when there is nothing to do (the caller may skip ``advance``)."""
        return (
            self.soft_state is None
            and self.hard_state is None
            and not self.entries
            and self.snapshot is None
            and not self.committed
            and not self.messages
            and not self.persisted_messages
        )


def must_sync(prev: HardState, current: HardState, n_entries: int) -> bool:
    """Whether persisting a Ready requires an fsync.

    New entries, or a changed term or vote, must be durable before dependent messages go out.
    A change of the commit index alone never costs an fsync: it is re-learned from the leader.
    """
    return n_entries != 0 or prev.term != current.term or prev.vote != current.vote
