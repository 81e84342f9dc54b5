"""Every error the queue reports, with its machine-readable code, message and retriability.

The errors carry no transport detail: an HTTP surface maps each class to its status (the native
API's table is `api.errors.HTTP_STATUS`) and renders any `CmqError` as ``{"error": {"code": ...,
"message": ...}}`` (plus ``Retry-After`` when ``retry_after`` is set). Per-entry results (acks,
visibility changes) carry the same codes without raising.
"""

from __future__ import annotations


class CmqError(Exception):
    """Base of all queue errors."""

    code: str = "InternalError"
    retriable: bool = False
    retry_after: float | None = None

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.code)
        self.message = message or self.code


class InvalidParameter(CmqError):
    """A request field is missing, of the wrong type, out of range, or unknown."""

    code = "InvalidParameter"


class MissingParameter(InvalidParameter):
    """A parameter the operation needs on this queue is absent (a FIFO send's group id)."""

    code = "MissingParameter"


class InvalidQueueName(InvalidParameter):
    code = "InvalidQueueName"


class InvalidTraceContext(InvalidParameter):
    """A message's reserved trace attribute (``traceparent`` / ``tracestate``,
    `cmq.tracecontext`) is not valid W3C trace context: the send is refused, nothing stored."""

    code = "InvalidTraceContext"


class QueueNotFound(CmqError):
    code = "QueueNotFound"


class QueueAlreadyExists(CmqError):
    """A queue of that name exists with different attributes (creation is idempotent otherwise)."""

    code = "QueueAlreadyExists"


class MessageTooLarge(CmqError):
    code = "MessageTooLarge"


class RequestTooLarge(CmqError):
    code = "RequestTooLarge"


class TooManyEntries(InvalidParameter):
    """A batch exceeds its limit."""

    code = "TooManyEntries"


class Overloaded(CmqError):
    """A bounded queue or window is full; retry after ``retry_after`` seconds."""

    code = "Overloaded"
    retriable = True
    retry_after = 1.0


class Unavailable(CmqError):
    """No leader could be reached within the request deadline (election in progress, no
    quorum); retry."""

    code = "Unavailable"
    retriable = True
    retry_after = 1.0


class DiskFull(CmqError):
    """The leader of the queue's group is short of disk space (below its reserve,
    ``--disk-reserve-bytes``): the send was refused before anything was proposed, so nothing
    changed. Receives, acks and deletes still work (they use the reserve); sends are taken again
    once space is freed. Not retried by the client: it takes an operator."""

    code = "DiskFull"


class OutcomeUnknown(Unavailable):
    """A change reached the Raft log (or the leader) but no outcome came back before a leader
    change or the deadline: it may or may not have been applied. Sends are not retried on this
    node after it (a retry could store the messages twice); a client that resends should use
    ``dedup_id``."""

    code = "OutcomeUnknown"


class ReceiptInvalid(CmqError):
    """A receipt handle is malformed, tampered with, or belongs to another queue."""

    code = "ReceiptHandleIsInvalid"


class SegmentNotFound(CmqError):
    """No such segment of the queue, or it is already archived."""

    code = "segment_not_found"


class SegmentNotReleased(CmqError):
    """The segment still holds live messages (or takes appends): it cannot be read for the
    archive yet."""

    code = "segment_not_released"


class CorruptSegment(CmqError):
    """This replica's copy of a segment fails its checksum; read it from another replica."""

    code = "corrupt_segment"
    retriable = True


class InvariantBroken(CmqError):
    """A state machine invariant does not hold: a bug or damaged data. The group stops."""

    code = "InternalError"


class SegmentDamaged(InvariantBroken):
    """This replica's copy of a segment file is damaged (a checksum, a torn or missing record, a
    size or count that disagrees with the snapshot): bytes the state machine relies on are not
    what was written. The group's replica here is repaired from a healthy one
    (`cmq.node.repair`); a read never returns the damaged bytes. ``where`` names the file,
    ``offset`` the byte where the damage was found (``-1``: the file as a whole)."""

    storage_damage = True
    """Read by `raftlog.errors.is_storage_damage`: the host repairs the replica."""

    def __init__(self, where: str, offset: int, reason: str) -> None:
        at = f" at offset {offset}" if offset >= 0 else ""
        super().__init__(f"{where}{at}: {reason}")
        self.where = where
        self.offset = offset
        self.reason = reason


class NewerLayout(InvalidParameter):
    """Bytes in a layout of a newer release than this one (a command type, a flag, a version
    this release does not know): raised by the pure decoders, with what was found and what
    this release reads. Distinct from malformed input: the bytes may be intact. Where a file
    or a log entry is known, the caller re-raises it as `NewerFormat` naming it."""


class NewerFormat(InvariantBroken):
    """Stored or replicated data (named in the message: a file and offset, a group's entry, a
    snapshot) was written by a newer release than this one, in a layout it does not read: not
    damage, but this node cannot go on with it. Run the newer release (downgrades past a
    format change are refused, docs/operations.md "Upgrades")."""


class UnreadableFrame(CmqError):
    """A frame on the front-end socket (`cmq.frontend.proxy`) that does not decode to the shape
    its side expects: the connection is dropped, with this error naming the frame, logged."""


class NodeNotFound(CmqError):
    """No node with that id is registered in the catalog."""

    code = "NodeNotFound"


class GroupNotFound(CmqError):
    """This node hosts no replica of that Raft group (or it is not a data group)."""

    code = "GroupNotFound"


class NodeBusy(CmqError):
    """The node change is refused as it stands: the node still holds replicas (drain it
    first), or draining it would leave fewer active nodes than replicas per group."""

    code = "NodeBusy"


class AccessKeyNotFound(CmqError):
    """No access key has this id (`cmq.catalog.keys`)."""

    code = "AccessKeyNotFound"


class ImportConflict(CmqError):
    """A message import's expectation failed: the queue has had a different number of messages
    sent than the import assumed (someone else wrote to it, or a part was already imported).
    Nothing was stored."""

    code = "ImportConflict"


class FeatureUnsupported(CmqError):
    """A feature flag cannot be enabled: a registered node did not answer, or runs a release
    without it (`cmq.admin.feature_admin`). Nothing was enabled."""

    code = "FeatureUnsupported"


class FeatureNotEnabled(CmqError):
    """What was asked for writes a format gated by a feature flag that is not enabled yet
    (``cmq cluster enable-feature NAME``, once every node runs a release that has it)."""

    code = "FeatureNotEnabled"


BY_CODE: dict[str, type[CmqError]] = {
    cls.code: cls
    for cls in (
        InvalidParameter,
        MissingParameter,
        InvalidQueueName,
        InvalidTraceContext,
        TooManyEntries,
        QueueNotFound,
        QueueAlreadyExists,
        MessageTooLarge,
        RequestTooLarge,
        Overloaded,
        Unavailable,
        OutcomeUnknown,
        DiskFull,
        ReceiptInvalid,
        SegmentNotFound,
        SegmentNotReleased,
        CorruptSegment,
        InvariantBroken,
        NodeNotFound,
        NodeBusy,
        AccessKeyNotFound,
        ImportConflict,
        FeatureUnsupported,
        FeatureNotEnabled,
    )
}
"""Every error code of the queue -> the class raised for it (forwarded replies, failed
commands, a client reading an error answer)."""


def error_for(code: str, message: str) -> CmqError:
    """The error for ``code`` carrying ``message`` (`CmqError` for a code not in `BY_CODE`)."""
    return BY_CODE.get(code, CmqError)(message)


# Per-entry result codes (acks, visibility changes, nacks).
RECEIPT_INVALID = "ReceiptHandleIsInvalid"
"""The receipt is malformed, forged, or for another queue."""
LEASE_STALE = "LeaseStale"
"""The message was re-leased since (this receipt's lease expired) or is already deleted."""
MESSAGE_NOT_INFLIGHT = "MessageNotInflight"
"""The message exists but holds no unexpired lease matching the receipt."""
