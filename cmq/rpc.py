"""The calls a node forwards to a group's leader: one frozen dataclass per operation, each with
its own codec for the call and for its reply, and the error table that carries a `CmqError`
across the hop.

Forwarded calls travel over the authenticated peer connection (`MultiRaft.call`) in binary
(`cmq.fsm.wire` encoding): ``[u8 CallType][u32 group][body]``. The two that carry message bodies
cross the hop without any per-message re-encoding:

* `ProduceCall`'s body is an encoded `Produce` command: the node that took the request built it
  (message ids, its clock) and the leader proposes those bytes as they are;
* `ReceiveCall`'s reply is ``[u32 count]`` then per message its id, seq, body, binary flag,
  receipt, receive count, sent-at time and attributes.

A local call takes the same typed objects without encoding them (`cmq.ops.LeaderOps.execute`).
A failed call is answered with `encode_error` (JSON ``{"error": code, "message": ...}``); the
code ``Retry`` means "route again" (the peer no longer leads the group).

Decoding never trusts its input: a malformed call or reply raises `InvalidParameter`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar, Generic, Self, TypeVar

import orjson

from cmq.errors import (
    CmqError,
    InvalidParameter,
    InvariantBroken,
    MessageTooLarge,
    OutcomeUnknown,
    Overloaded,
    QueueAlreadyExists,
    QueueNotFound,
    ReceiptInvalid,
    Unavailable,
)
from cmq.fsm.commands import read_attributes, write_attributes
from cmq.fsm.wire import Reader, Writer
from cmq.model import QueueAttributes, QueueStats, ReceivedMessage, SentMessage

R = TypeVar("R")

_HEAD = struct.Struct("<BI")
_STATS = struct.Struct("<8q")


class CallType(IntEnum):
    """Leading byte of a forwarded call."""

    PRODUCE = 1
    RECEIVE = 2
    ACK = 3
    CHANGE_VISIBILITY = 4
    NACK = 5
    CREATE_QUEUE = 6
    DELETE_QUEUE = 7
    GET_QUEUE = 8
    SET_ATTRIBUTES = 9
    PURGE = 10
    ASSIGN_QUEUE = 11
    REMOVE_QUEUE = 12
    REGISTER_NODE = 13


class Call(Generic[R]):
    """An operation run at the leader of ``group``, whose result is an ``R``.

    Subclasses are frozen slotted dataclasses with a ``group`` field; they define ``TYPE``,
    ``_write``/``_read`` (the body) and ``encode_reply``/``decode_reply``. ``retry_unknown``
    says whether an attempt whose outcome is unknown may be repeated: yes when a repeat is
    harmless (reads, idempotent admin steps, leases: a lost lease only delays its messages;
    acks: a repeat reports the already-deleted entries as stale)."""

    __slots__ = ()
    TYPE: ClassVar[CallType]
    group: int

    def encode(self) -> bytes:
        w = Writer()
        w.raw(_HEAD.pack(self.TYPE, self.group))
        self._write(w)
        return w.getvalue()

    def _write(self, w: Writer) -> None:
        raise NotImplementedError

    @classmethod
    def _read(cls, group: int, r: Reader) -> Self:
        raise NotImplementedError

    def retry_unknown(self) -> bool:
        return True

    def encode_reply(self, result: R) -> bytes:
        raise NotImplementedError

    def decode_reply(self, payload: bytes) -> R:
        raise NotImplementedError


# -- replies shared by several calls -----------------------------------------------------------
def _encode_codes(codes: tuple[str | None, ...]) -> bytes:
    w = Writer()
    w.u32(len(codes))
    for c in codes:
        w.opt_text(c)
    return w.getvalue()


def _decode_codes(payload: bytes) -> tuple[str | None, ...]:
    r = Reader(payload)
    out = tuple(r.opt_text() for _ in range(r.u32()))
    r.end()
    return out


class _NoReply:
    """Reply codec of a call whose result is None (an empty reply)."""

    __slots__ = ()

    def encode_reply(self, result: None) -> bytes:
        return b""

    def decode_reply(self, payload: bytes) -> None:
        Reader(payload).end()


class _IntReply:
    """Reply codec of a call whose result is an int."""

    __slots__ = ()

    def encode_reply(self, result: int) -> bytes:
        w = Writer()
        w.i64(result)
        return w.getvalue()

    def decode_reply(self, payload: bytes) -> int:
        r = Reader(payload)
        value = r.i64()
        r.end()
        return value


def _read_receipts(r: Reader) -> tuple[str, ...]:
    return tuple(r.text() for _ in range(r.u32()))


def _write_receipts(w: Writer, receipts: tuple[str, ...]) -> None:
    w.u32(len(receipts))
    for receipt in receipts:
        w.text(receipt)


# -- the hot calls ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ProduceCall(Call[list[SentMessage]]):
    """Propose ``command`` (an encoded `Produce`, built by the node that took the send)."""

    TYPE: ClassVar[CallType] = CallType.PRODUCE
    group: int
    command: bytes
    dedup_only: bool = False
    """Every message carries a dedup id (origin side only: not encoded): only then may an
    attempt with an unknown outcome be repeated, as a repeat cannot store a message twice."""

    def encode(self) -> bytes:
        return _HEAD.pack(self.TYPE, self.group) + self.command

    @classmethod
    def _read(cls, group: int, r: Reader) -> Self:
        if not r.remaining():
            raise InvalidParameter("malformed produce call: no command")
        return cls(group, r.raw(r.remaining()))

    def retry_unknown(self) -> bool:
        return self.dedup_only

    def encode_reply(self, result: list[SentMessage]) -> bytes:
        w = Writer()
        w.u32(len(result))
        for m in result:
            w.text(m.id)
            w.i64(m.seq)
        return w.getvalue()

    def decode_reply(self, payload: bytes) -> list[SentMessage]:
        r = Reader(payload)
        out = [SentMessage(r.text(), r.i64()) for _ in range(r.u32())]
        r.end()
        return out


@dataclass(frozen=True, slots=True)
class ReceiveCall(Call[list[ReceivedMessage]]):
    """Lease up to ``max_messages``, waiting up to ``wait_seconds`` (None: the queue's default)
    for one; ``visibility_timeout`` None: the queue's."""

    TYPE: ClassVar[CallType] = CallType.RECEIVE
    group: int
    name: str
    max_messages: int
    visibility_timeout: int | None
    wait_seconds: int | None

    def _write(self, w: Writer) -> None:
        w.text(self.name)
        w.u32(self.max_messages)
        w.opt_i64(self.visibility_timeout)
        w.opt_i64(self.wait_seconds)

    @classmethod
    def _read(cls, group: int, r: Reader) -> Self:
        return cls(group, r.text(), r.u32(), r.opt_i64(), r.opt_i64())

    def encode_reply(self, result: list[ReceivedMessage]) -> bytes:
        return encode_received(result)

    def decode_reply(self, payload: bytes) -> list[ReceivedMessage]:
        return decode_received(payload)


def encode_received(messages: list[ReceivedMessage]) -> bytes:
    """The reply to a forwarded receive."""
    w = Writer()
    w.u32(len(messages))
    for m in messages:
        w.text(m.id)
        w.i64(m.seq)
        w.blob(m.body)
        w.u8(1 if m.binary else 0)
        w.text(m.receipt)
        w.u32(m.receive_count)
        w.i64(m.sent_at_ms)
        w.u32(len(m.attributes))
        for k, v in m.attributes:
            w.text(k)
            w.text(v)
    return w.getvalue()


def decode_received(payload: bytes) -> list[ReceivedMessage]:
    """Inverse of `encode_received`; `InvalidParameter` when malformed or with trailing bytes."""
    r = Reader(payload)
    out = []
    for _ in range(r.u32()):
        mid = r.text()
        seq = r.i64()
        body = r.blob()
        binary = r.boolean()
        receipt = r.text()
        receive_count = r.u32()
        sent_at = r.i64()
        attributes = tuple((r.text(), r.text()) for _ in range(r.u32()))
        out.append(
            ReceivedMessage(mid, seq, body, binary, receipt, receive_count, sent_at, attributes)
        )
    if r.pos != len(payload):
        raise InvalidParameter("trailing bytes after a receive reply")
    return out


@dataclass(frozen=True, slots=True)
class _EntriesCall(Call[tuple[str | None, ...]]):
    """A call on leased messages; its reply is one code per entry (None: done), in order."""

    def encode_reply(self, result: tuple[str | None, ...]) -> bytes:
        return _encode_codes(result)

    def decode_reply(self, payload: bytes) -> tuple[str | None, ...]:
        return _decode_codes(payload)


@dataclass(frozen=True, slots=True)
class AckCall(_EntriesCall):
    """Delete the messages whose receipts hold current leases."""

    TYPE: ClassVar[CallType] = CallType.ACK
    group: int
    name: str
    receipts: tuple[str, ...]

    def _write(self, w: Writer) -> None:
        w.text(self.name)
        _write_receipts(w, self.receipts)

    @classmethod
    def _read(cls, group: int, r: Reader) -> Self:
        return cls(group, r.text(), _read_receipts(r))


@dataclass(frozen=True, slots=True)
class ChangeVisibilityCall(_EntriesCall):
    """Per (receipt, seconds): the leased message becomes visible at now + seconds."""

    TYPE: ClassVar[CallType] = CallType.CHANGE_VISIBILITY
    group: int
    name: str
    entries: tuple[tuple[str, int], ...]

    def _write(self, w: Writer) -> None:
        w.text(self.name)
        w.u32(len(self.entries))
        for receipt, seconds in self.entries:
            w.text(receipt)
            w.i64(seconds)

    @classmethod
    def _read(cls, group: int, r: Reader) -> Self:
        name = r.text()
        return cls(group, name, tuple((r.text(), r.i64()) for _ in range(r.u32())))


@dataclass(frozen=True, slots=True)
class NackCall(_EntriesCall):
    """Release leases: the messages become visible again after ``delay_seconds``."""

    TYPE: ClassVar[CallType] = CallType.NACK
    group: int
    name: str
    receipts: tuple[str, ...]
    delay_seconds: int

    def _write(self, w: Writer) -> None:
        w.text(self.name)
        _write_receipts(w, self.receipts)
        w.i64(self.delay_seconds)

    @classmethod
    def _read(cls, group: int, r: Reader) -> Self:
        name = r.text()
        return cls(group, name, _read_receipts(r), r.i64())


# -- queue administration --------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CreateQueueCall(Call[bool]):
    """Create the queue in its data group; True if created, False if it already existed."""

    TYPE: ClassVar[CallType] = CallType.CREATE_QUEUE
    group: int
    name: str
    attributes: QueueAttributes

    def _write(self, w: Writer) -> None:
        w.text(self.name)
        write_attributes(w, self.attributes)

    @classmethod
    def _read(cls, group: int, r: Reader) -> Self:
        return cls(group, r.text(), read_attributes(r))

    def encode_reply(self, result: bool) -> bytes:
        return b"\x01" if result else b"\x00"

    def decode_reply(self, payload: bytes) -> bool:
        r = Reader(payload)
        created = r.boolean()
        r.end()
        return created


@dataclass(frozen=True, slots=True)
class _NamedCall(Call[R]):
    """A call whose body is the queue name only."""

    group: int
    name: str

    def _write(self, w: Writer) -> None:
        w.text(self.name)

    @classmethod
    def _read(cls, group: int, r: Reader) -> Self:
        return cls(group, r.text())


@dataclass(frozen=True, slots=True)
class DeleteQueueCall(_NoReply, _NamedCall[None]):
    """Delete the queue and its messages from its data group."""

    TYPE: ClassVar[CallType] = CallType.DELETE_QUEUE


@dataclass(frozen=True, slots=True)
class GetQueueCall(_NamedCall[tuple[QueueAttributes, QueueStats]]):
    """The queue's attributes and statistics, read at its leader."""

    TYPE: ClassVar[CallType] = CallType.GET_QUEUE

    def encode_reply(self, result: tuple[QueueAttributes, QueueStats]) -> bytes:
        attrs, s = result
        w = Writer()
        write_attributes(w, attrs)
        w.raw(
            _STATS.pack(
                s.visible,
                s.in_flight,
                s.delayed,
                s.sent_total,
                s.acked_total,
                s.dead_lettered_total,
                s.expired_total,
                s.oldest_age_ms,
            )
        )
        return w.getvalue()

    def decode_reply(self, payload: bytes) -> tuple[QueueAttributes, QueueStats]:
        r = Reader(payload)
        attrs = read_attributes(r)
        stats = QueueStats(*_STATS.unpack(r.raw(_STATS.size)))
        r.end()
        return attrs, stats


@dataclass(frozen=True, slots=True)
class PurgeCall(_IntReply, _NamedCall[int]):
    """Delete every message of the queue; the reply is how many."""

    TYPE: ClassVar[CallType] = CallType.PURGE


@dataclass(frozen=True, slots=True)
class SetAttributesCall(Call[QueueAttributes]):
    """Merge validated attribute ``changes`` (name -> value, as `QueueAttributes.merged` takes
    them) into the committed attributes; the reply is the new attributes."""

    TYPE: ClassVar[CallType] = CallType.SET_ATTRIBUTES
    group: int
    name: str
    changes: tuple[tuple[str, Any], ...]

    def _write(self, w: Writer) -> None:
        w.text(self.name)
        w.blob(orjson.dumps(dict(self.changes)))

    @classmethod
    def _read(cls, group: int, r: Reader) -> Self:
        name = r.text()
        try:
            changes = orjson.loads(r.blob())
        except orjson.JSONDecodeError as e:
            raise InvalidParameter(f"malformed attribute changes: {e}") from None
        if not isinstance(changes, dict):
            raise InvalidParameter("malformed attribute changes")
        return cls(group, name, tuple(changes.items()))

    def encode_reply(self, result: QueueAttributes) -> bytes:
        w = Writer()
        write_attributes(w, result)
        return w.getvalue()

    def decode_reply(self, payload: bytes) -> QueueAttributes:
        r = Reader(payload)
        attributes = read_attributes(r)
        r.end()
        return attributes


# -- the catalog (meta group) ---------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class AssignQueueCall(_IntReply, _NamedCall[int]):
    """Place the queue in a data group (idempotent); the reply is the group."""

    TYPE: ClassVar[CallType] = CallType.ASSIGN_QUEUE


@dataclass(frozen=True, slots=True)
class RemoveQueueCall(_NoReply, _NamedCall[None]):
    """Forget the queue's placement."""

    TYPE: ClassVar[CallType] = CallType.REMOVE_QUEUE


@dataclass(frozen=True, slots=True)
class RegisterNodeCall(_NoReply, Call[None]):
    """Record a node's peer address (``host:port``) and data directories in the catalog."""

    TYPE: ClassVar[CallType] = CallType.REGISTER_NODE
    group: int
    node: int
    address: str
    data_dirs: tuple[str, ...]

    def _write(self, w: Writer) -> None:
        w.u32(self.node)
        w.text(self.address)
        w.u32(len(self.data_dirs))
        for d in self.data_dirs:
            w.text(d)

    @classmethod
    def _read(cls, group: int, r: Reader) -> Self:
        node, address = r.u32(), r.text()
        return cls(group, node, address, tuple(r.text() for _ in range(r.u32())))


AnyCall = (
    ProduceCall
    | ReceiveCall
    | AckCall
    | ChangeVisibilityCall
    | NackCall
    | CreateQueueCall
    | DeleteQueueCall
    | GetQueueCall
    | SetAttributesCall
    | PurgeCall
    | AssignQueueCall
    | RemoveQueueCall
    | RegisterNodeCall
)

_CALLS: dict[int, type[AnyCall]] = {
    cls.TYPE: cls
    for cls in (
        ProduceCall,
        ReceiveCall,
        AckCall,
        ChangeVisibilityCall,
        NackCall,
        CreateQueueCall,
        DeleteQueueCall,
        GetQueueCall,
        SetAttributesCall,
        PurgeCall,
        AssignQueueCall,
        RemoveQueueCall,
        RegisterNodeCall,
    )
}


def decode_call(payload: bytes) -> AnyCall:
    """The call ``payload`` encodes (`Call.encode`); `InvalidParameter` when it is unknown,
    malformed or followed by trailing bytes."""
    if len(payload) < _HEAD.size:
        raise InvalidParameter("malformed forwarded call")
    kind, group = _HEAD.unpack_from(payload)
    cls = _CALLS.get(kind)
    if cls is None:
        raise InvalidParameter(f"unknown forwarded call type {kind}")
    r = Reader(payload, _HEAD.size)
    call = cls._read(group, r)
    r.end()
    return call


# -- errors ------------------------------------------------------------------------------------
RETRY = "Retry"
"""Error code of a forwarded call that should simply be routed again (the peer no longer
leads the group, or its proposal was dropped before reaching the log)."""

ERRORS: dict[str, type[CmqError]] = {
    cls.code: cls
    for cls in (
        InvalidParameter,
        QueueNotFound,
        QueueAlreadyExists,
        MessageTooLarge,
        Overloaded,
        Unavailable,
        OutcomeUnknown,
        ReceiptInvalid,
        InvariantBroken,
    )
}
"""Error code -> the `CmqError` class raised for it (any other code: `CmqError`)."""


def error_for(code: str, message: str) -> CmqError:
    """The `CmqError` for ``code`` (from a forwarded reply or a `CommandFailed`)."""
    return ERRORS.get(code, CmqError)(message)


def encode_error(code: str, message: str) -> bytes:
    """The payload of a failed forwarded call."""
    return orjson.dumps({"error": code, "message": message})


def decode_error(payload: bytes) -> CmqError | None:
    """The error a peer replied with; None when the call should simply be routed again
    (`RETRY`); `Unavailable` carrying the text when the payload is not an error reply."""
    try:
        data = orjson.loads(payload)
        code, message = str(data["error"]), str(data.get("message", ""))
    except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
        return Unavailable(payload.decode("utf-8", "replace"))
    if code == RETRY:
        return None
    return error_for(code, message)
