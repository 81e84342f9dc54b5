"""The calls a node forwards to a group's leader: one frozen msgspec `Struct` per operation, with
the codec of its reply, and the error table that carries a `CmqError` across the hop.

Forwarded calls travel over the authenticated peer connection (`MultiRaft.call`) as MessagePack
arrays whose first item is the call's tag (`decode_call` picks the type from it and checks every
field's type, in C). Message bodies cross the hop as MessagePack binaries, never re-encoded:

* `ProduceCall` carries an encoded `Produce` command: the node that took the send built it
  (message ids, its clock) and the leader proposes those bytes as they are;
* `ReceiveCall`'s reply is the list of `ReceivedMessage`, bodies included.

A local call takes the same typed objects without encoding them
(`cmq.routing.ops.LeaderOps.execute`). A failed call is answered with `encode_failure` (a
`cmq.failure.Failure`: code, message, ``retry_after`` and a leader hint; in JSON until the flag
``peer_failures`` is enabled); the code ``Retry`` means "route it again" (the peer no longer leads
the group).

Decoding never trusts its input: a malformed call or reply raises `InvalidParameter`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, TypeVar

import msgspec
import orjson

from cmq.errors import CmqError, InvalidParameter, Unavailable
from cmq.export_values import ExportPage
from cmq.failure import Failure
from cmq.model import (
    MAX_WAIT_SECONDS,
    PeekedMessage,
    QueueAttributes,
    QueueStats,
    ReceivedMessage,
    SentMessage,
)
from cmq.segment_values import ArchiveResult, ClaimResult

R = TypeVar("R")

_encoder = msgspec.msgpack.Encoder()


def _decoder(kind: Any) -> msgspec.msgpack.Decoder[Any]:
    return msgspec.msgpack.Decoder(kind)


class Call(msgspec.Struct, Generic[R], frozen=True, array_like=True):
    """An operation run at the leader of ``group``, whose result is an ``R``.

    Each subclass has its own tag (the first item of its encoded form) and ``_REPLY``, the
    decoder of its reply. ``retry_unknown`` says whether an attempt whose outcome is unknown may
    be repeated: yes when a repeat is harmless (reads, idempotent admin steps, leases: a lost
    lease only delays its messages; acks: a repeat reports the already-deleted entries as
    stale)."""

    group: int
    _REPLY: ClassVar[msgspec.msgpack.Decoder[Any]]

    def encode(self) -> bytes:
        """The call as forwarded (`decode_call` reads it)."""
        return _encoder.encode(self)

    def retry_unknown(self) -> bool:
        return True

    def wait_budget(self) -> float:
        """Seconds the call may wait at the leader by design (a long poll), beyond the request
        deadline: the caller waits that much longer for the answer, so a long poll forwarded to
        the leader ends in its answer, never in an unknown outcome while the leader still
        polls for it (and leases for a caller that has gone)."""
        return 0.0

    def encode_reply(self, result: R) -> bytes:
        return _encoder.encode(result)

    def decode_reply(self, payload: bytes) -> R:
        """The result in a peer's reply; `InvalidParameter` when malformed."""
        try:
            result: R = self._REPLY.decode(payload)
        except (msgspec.DecodeError, UnicodeDecodeError) as e:  # bad UTF-8 in a str field
            raise InvalidParameter(f"malformed {type(self).__name__} reply: {e}") from None
        return result


_Codes = tuple[str | None, ...]
"""Per-entry outcome codes of a call on leased messages (None: done), in request order."""


# -- messages -------------------------------------------------------------------------------
class ProduceCall(Call[list[SentMessage]], frozen=True, tag=1):
    """Propose ``command`` (an encoded `Produce`, built by the node that took the send)."""

    command: bytes
    dedup_only: bool = False
    """Every message carries a dedup id: only then may an attempt with an unknown outcome be
    repeated, as a repeat cannot store a message twice."""
    _REPLY = _decoder(list[SentMessage])

    def retry_unknown(self) -> bool:
        return self.dedup_only


class ReceiveCall(Call[list[ReceivedMessage]], frozen=True, tag=2):
    """Lease up to ``max_messages``, waiting up to ``wait_seconds`` (None: the queue's default)
    for one; ``visibility_timeout`` None: the queue's."""

    name: str
    max_messages: int
    visibility_timeout: int | None
    wait_seconds: int | None
    attempt_id: str | None = None
    """FIFO queues: the receive request attempt id (`cmq.fsm.commands.Lease`)."""
    _REPLY = _decoder(list[ReceivedMessage])

    def wait_budget(self) -> float:
        """The long poll: ``wait_seconds``, or the longest a queue's default can be."""
        return float(MAX_WAIT_SECONDS if self.wait_seconds is None else self.wait_seconds)


class AckCall(Call[_Codes], frozen=True, tag=3):
    """Delete the messages whose receipts hold current leases."""

    name: str
    receipts: tuple[str, ...]
    _REPLY = _decoder(_Codes)


class ChangeVisibilityCall(Call[_Codes], frozen=True, tag=4):
    """Per (receipt, seconds): the leased message becomes visible at now + seconds."""

    name: str
    entries: tuple[tuple[str, int], ...]
    _REPLY = _decoder(_Codes)


class NackCall(Call[_Codes], frozen=True, tag=5):
    """Release leases: the messages become visible again after ``delay_seconds``."""

    name: str
    receipts: tuple[str, ...]
    delay_seconds: int
    _REPLY = _decoder(_Codes)


# -- queue administration --------------------------------------------------------------------
class CreateQueueCall(Call[bool], frozen=True, tag=6):
    """Create the queue in its data group; True if created, False if it already existed."""

    name: str
    attributes: QueueAttributes
    _REPLY = _decoder(bool)


class DeleteQueueCall(Call[None], frozen=True, tag=7):
    """Delete the queue and its messages from its data group."""

    name: str
    _REPLY = _decoder(None)


class GetQueueCall(Call[tuple[QueueAttributes, QueueStats]], frozen=True, tag=8):
    """The queue's attributes and statistics, read at its leader."""

    name: str
    _REPLY = _decoder(tuple[QueueAttributes, QueueStats])


class PeekCall(Call[list[PeekedMessage]], frozen=True, tag=30):
    """Up to ``limit`` messages at the head of the queue, read at its leader without leasing."""

    name: str
    limit: int
    _REPLY = _decoder(list[PeekedMessage])


class ExportCall(Call[ExportPage], frozen=True, tag=31):
    """A page of the queue's export (`cmq.fsm.export`), read at its leader without changing
    anything: live messages with seq above ``after`` and below ``upto`` (0: the queue's next
    seq now), at most ``limit``."""

    name: str
    after: int
    upto: int
    limit: int
    _REPLY = _decoder(ExportPage)


class SetAttributesCall(Call[QueueAttributes], frozen=True, tag=9):
    """Merge validated attribute ``changes`` (name, value pairs, as `QueueAttributes.merged`
    takes them) into the committed attributes; the reply is the new attributes."""

    name: str
    changes: tuple[tuple[str, bool | int | str | None], ...]
    _REPLY = _decoder(QueueAttributes)


class PurgeCall(Call[int], frozen=True, tag=10):
    """Delete every message of the queue; the reply is how many."""

    name: str
    _REPLY = _decoder(int)


class RewindCall(Call[int], frozen=True, tag=18):
    """Rewind the queue to ``since_ms`` (proposed in parts, `cmq.fsm.rewind`); the reply is
    how many messages came back. A repeat after an unknown outcome finds the copies made
    still live and skips them."""

    name: str
    since_ms: int
    _REPLY = _decoder(int)


class ClaimSegmentsCall(Call[ClaimResult], frozen=True, tag=16):
    """Claim released segments for archive batch ``batch_id`` for ``ttl_ms`` (a repeat renews
    the same claim: safe to retry)."""

    name: str
    batch_id: str
    segments: tuple[int, ...]
    ttl_ms: int
    _REPLY = _decoder(ClaimResult)


class MarkArchivedCall(Call[ArchiveResult], frozen=True, tag=17):
    """Mark released segments archived by batch ``batch_id`` (idempotent: a repeat answers
    them as already archived)."""

    name: str
    batch_id: str
    segments: tuple[int, ...]
    _REPLY = _decoder(ArchiveResult)


# -- the catalog (meta group) ---------------------------------------------------------------
class AssignQueueCall(Call[int], frozen=True, tag=11):
    """Place the queue in a data group (idempotent); the reply is the group."""

    name: str
    _REPLY = _decoder(int)


class RemoveQueueCall(Call[None], frozen=True, tag=12):
    """Forget the queue's placement."""

    name: str
    _REPLY = _decoder(None)


class RegisterNodeCall(Call[None], frozen=True, tag=13):
    """Record a node's peer address (``host:port``) and data directories in the catalog."""

    node: int
    address: str
    data_dirs: tuple[str, ...]
    _REPLY = _decoder(None)


class QueueMetaCall(Call[dict[str, str] | None], frozen=True, tag=14):
    """Set ``changes`` and remove ``unset`` in the queue's catalog metadata; with neither, read
    it at the catalog's leader. The reply is the metadata after the call, None when the queue
    is not placed."""

    name: str
    changes: tuple[tuple[str, str], ...] = ()
    unset: tuple[str, ...] = ()
    _REPLY = _decoder(dict[str, str] | None)


class CatalogCall(Call[Any], frozen=True, tag=15):
    """Propose a catalog command (`cmq.catalog.meta.CatalogMachine`: nodes, moves); the reply is its
    result (a refusal is raised as its error). Run by `cmq.routing.router.Router`."""

    command: bytes
    _REPLY = _decoder(Any)


# -- node to node ---------------------------------------------------------------------------
class ReleaseInfo(msgspec.Struct, frozen=True):
    """A node's release and peer protocol range (`cmq.upgrade.release`). Encoded as a map, so a
    later release may add fields that this one's decoder ignores."""

    release: str
    protocol_min: int
    protocol_max: int
    features: tuple[str, ...] = ()
    """The feature flags the node supports (`cmq.upgrade.features`)."""


class ReleaseCall(Call[ReleaseInfo], frozen=True, tag=32):
    """Ask the node it is sent to for its release (`cmq.admin.peer_releases`): answered by that
    node itself, leader or not (``group`` is 0 and unused). A node older than this call cannot
    decode its tag and answers ``InvalidParameter``, keeping the connection: that answer
    identifies a release that predates release reporting."""

    _REPLY = _decoder(ReleaseInfo)


AnyCall = (
    ProduceCall
    | ReceiveCall
    | AckCall
    | ChangeVisibilityCall
    | NackCall
    | CreateQueueCall
    | DeleteQueueCall
    | GetQueueCall
    | PeekCall
    | ExportCall
    | SetAttributesCall
    | PurgeCall
    | RewindCall
    | AssignQueueCall
    | RemoveQueueCall
    | RegisterNodeCall
    | QueueMetaCall
    | CatalogCall
    | ClaimSegmentsCall
    | MarkArchivedCall
    | ReleaseCall
)

_calls: msgspec.msgpack.Decoder[AnyCall] = msgspec.msgpack.Decoder(AnyCall)


def decode_call(payload: bytes) -> AnyCall:
    """The call ``payload`` encodes (`Call.encode`); `InvalidParameter` when it is unknown,
    malformed or followed by trailing bytes."""
    try:
        return _calls.decode(payload)
    except (msgspec.DecodeError, UnicodeDecodeError) as e:  # bad UTF-8 in a str field
        raise InvalidParameter(f"malformed forwarded call: {e}") from None


# -- errors ------------------------------------------------------------------------------------
RETRY = "Retry"
"""Error code of a forwarded call that should simply be routed again (the peer no longer
leads the group, or its proposal was dropped before reaching the log)."""


def encode_failure(failure: Failure, *, packed: bool) -> bytes:
    """The payload of a failed forwarded call. ``packed`` (once every node reads it, the flag
    ``peer_failures``): the `Failure` in MessagePack, the same form the front-end socket uses,
    carrying ``retry_after``. Otherwise the JSON form every release reads, ``{"error": code,
    "message": ...}`` with ``"leader"`` on a `RETRY` answer, which drops ``retry_after``."""
    if packed:
        return _encoder.encode(failure)
    if failure.code == RETRY:
        return orjson.dumps(
            {"error": failure.code, "message": failure.message, "leader": failure.leader}
        )
    return orjson.dumps({"error": failure.code, "message": failure.message})


_failures: msgspec.msgpack.Decoder[Failure] = msgspec.msgpack.Decoder(Failure)


def decode_failure(payload: bytes) -> Failure:
    """The failure a peer answered with, in either form (`encode_failure`: a JSON object
    starts with ``{``, the packed form is a MessagePack array); a payload that is neither is
    `Unavailable` carrying its text, never mistaken for another error."""
    if payload[:1] == b"{":
        try:
            data = orjson.loads(payload)
            return Failure(
                str(data["error"]), str(data.get("message", "")), None, int(data.get("leader", 0))
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError, ValueError):
            pass
    else:
        try:
            return _failures.decode(payload)
        except (msgspec.DecodeError, UnicodeDecodeError):
            pass
    return Failure(Unavailable.code, payload.decode("utf-8", "replace"))


def leader_hint(payload: bytes) -> int:
    """The leader a failure names (`Failure.leader`), 0 when it names none."""
    return decode_failure(payload).leader


def decode_error(payload: bytes) -> CmqError | None:
    """The error a peer replied with, its ``retry_after`` included; None when the call should
    simply be routed again (`RETRY`)."""
    failure = decode_failure(payload)
    return None if failure.code == RETRY else failure.error()
