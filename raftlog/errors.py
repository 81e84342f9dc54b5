"""Every error raftlog raises. Each says whether retrying (possibly elsewhere) can succeed.

Retriable errors describe a transient situation (no leader here, window full); the caller may try
again, following ``leader_hint`` where one is given. Non-retriable errors mean a bug or damaged
storage: the affected group stops and the error is reported, never swallowed.
"""

from __future__ import annotations


class RaftError(Exception):
    """Base of all raftlog errors."""

    retriable: bool = False
    code: str = "RaftError"
    outcome_unknown: bool = False
    """True when the change the caller asked for may or may not take effect (it reached a
    log, or a peer, before the failure): a retry must then be idempotent."""


class NotLeader(RaftError):
    """This node cannot accept the proposal now; ``leader_hint`` is the leader it knows (or 0)."""

    retriable = True
    code = "NotLeader"

    def __init__(
        self, leader_hint: int, reason: str = "not the leader", *, outcome_unknown: bool = False
    ) -> None:
        super().__init__(f"{reason} (leader hint: {leader_hint or 'unknown'})")
        self.leader_hint = leader_hint
        self.outcome_unknown = outcome_unknown


class Overloaded(RaftError):
    """A bounded queue or window is full; retry after a short back-off."""

    retriable = True
    code = "Overloaded"


class ProposalDropped(RaftError):
    """The proposal will not be reported applied (leadership lost, group stopped).

    Retriable. ``outcome_unknown`` (the default) when the entry may still be committed, so a
    retry must be idempotent; False when it provably was not (its log index holds another
    entry, or it was never appended).
    """

    retriable = True
    code = "ProposalDropped"

    def __init__(self, reason: str, *, outcome_unknown: bool = True) -> None:
        super().__init__(reason)
        self.outcome_unknown = outcome_unknown


class ConfChangeInProgress(RaftError):
    """Another membership change is not yet applied; only one may be pending at a time."""

    retriable = True
    code = "ConfChangeInProgress"


class LearnerNotReady(RaftError):
    """A learner may be promoted only once it has caught up to the leader's commit index."""

    retriable = True
    code = "LearnerNotReady"


class Compacted(RaftError):
    """The requested log index is below the first index still held (it is in a snapshot)."""

    code = "Compacted"


class Unavailable(RaftError):
    """The requested log index is beyond the last index held."""

    code = "Unavailable"


class InvariantViolation(RaftError):
    """A Raft invariant was broken: a bug or corrupt input. The group must stop."""

    code = "InvariantViolation"


def is_storage_damage(exc: BaseException) -> bool:
    """Whether ``exc`` reports damaged stored data of one group's replica (a checksum that
    fails, a file that is missing or shorter than recorded) rather than a bug or an I/O error:
    the host may then repair that replica from a healthy one (`MultiRaft.repair_group`). An
    exception says so with a class attribute ``storage_damage = True`` (`CorruptRecord` here;
    a state machine's own errors, e.g. for its segment files, without importing raftlog)."""
    return getattr(exc, "storage_damage", False) is True


class CorruptRecord(RaftError):
    """Stored data failed its checksum before the tail of a file: damage, not a torn write."""

    code = "CorruptRecord"
    storage_damage = True

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"corrupt record in {path} at offset {offset}: {reason}")
        self.path = path
        self.offset = offset


class NewerFormat(RaftError):
    """Stored data or a peer's frame is in a layout of a newer release than this one: it is
    intact (its checksum, where it has one, holds) but this release cannot read it. Distinct
    from `CorruptRecord`: nothing is truncated or skipped, the node stops and names ``where``
    (a file and offset, a group and entry, or a peer), what it found and what it reads; running
    the newer release (or the release that wrote the data) on it is the way out."""

    code = "NewerFormat"

    def __init__(self, where: str, found: str, known: str) -> None:
        super().__init__(
            f"{where}: {found} is from a newer release than this one, which reads {known}"
        )
        self.where = where


class WalClosed(RaftError):
    """The write-ahead log is closed, or stopped for good after an I/O error (the cause is
    chained). The write is not known to be durable and no later write will be accepted: the
    groups on that directory must stop. Not retriable on this node."""

    code = "WalClosed"


class DiskFailed(WalClosed):
    """A write or fsync of a data directory's WAL failed (``errno``: EIO, ENOSPC, ...). The WAL
    of that directory stopped for good: after a failed fsync the kernel may have dropped the
    dirty pages, so nothing written since the last good fsync is known to be on the disk and a
    retry that "succeeds" would prove nothing. Every pending and later write there fails with
    this error and the groups on the directory stop; other directories are not affected. The
    way out is a restart of the process (recovery trusts only what it reads back with valid
    checksums), after the disk is fixed or has space again."""

    code = "DiskFailed"

    def __init__(self, directory: str, errno: int, reason: str) -> None:
        super().__init__(f"data directory {directory}: WAL I/O failed ({reason}); restart the node")
        self.directory = directory
        self.errno = errno
        self.reason = reason


class PeerUnavailable(RaftError):
    """A peer could not be reached or did not answer in time. ``outcome_unknown`` unless the
    request provably never left this node."""

    retriable = True
    code = "PeerUnavailable"

    def __init__(self, reason: str, *, outcome_unknown: bool = True) -> None:
        super().__init__(reason)
        self.outcome_unknown = outcome_unknown
