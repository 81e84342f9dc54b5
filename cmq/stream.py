"""The streaming protocol's frames and codec (pure: no I/O), shared by the server
(`api.stream`) and the client (`cmq.client.stream`).

A stream is one WebSocket on ``GET /v1/stream`` carrying binary messages. Each WebSocket
message is a MessagePack array of one or more *frames* (a sender coalesces what it has ready
into one message); a frame is a MessagePack array whose first element is its tag. Requests carry
a client-chosen correlation ``id`` (an unsigned integer, unique among the connection's requests
in flight) that the answer repeats, so any number of requests can be outstanding on one
connection and answers come back in completion order, not request order.

Client to server:

* `Send` ``(id, queue, messages)``: append messages (1..100) in order, as one batch: all or
  nothing (one Raft entry; a message the queue refuses refuses the frame and nothing of it is
  stored). Answered by `Sent` once they are committed (fsynced on a majority), exactly as
  ``POST .../messages``, or `Failed`.
* `Subscribe` ``(id, queue, credit, visibility_timeout, max_batch)``: start pushing leased
  messages of ``queue`` as `Deliver` frames tagged with ``id`` (the subscription's id), never
  more than ``credit`` messages beyond what `Credit` frames grant. Each delivered message is
  leased (committed) exactly as a receive leases it; an unacknowledged message comes back after
  its visibility timeout. A subscription that cannot go on (the queue is deleted) ends with a
  `Failed` frame carrying its id.
* `Credit` ``(id, credit)``: grant a subscription ``credit`` more messages (prefetch, as AMQP's
  ``basic.qos`` and NATS's pull batches).
* `Unsubscribe` ``(id)``: stop a subscription; its messages in flight keep their leases.
* `Ack` ``(id, queue, receipts)``, `Nack` ``(id, queue, receipts, delay_seconds)``: answered by
  `Results`, one entry per receipt, as the HTTP calls.

Server to client: `Sent` ``(id, [(message id, seq), ...])``, `Deliver` ``(id, messages)``,
`Results` ``(id, [(receipt, ok, error), ...])``, `Failed` ``(id, status, code, message,
retry_after)`` with the HTTP status and error code the same failure gets over HTTP.

A body is MessagePack ``bin`` with a flag saying whether it is binary (else UTF-8 text,
which the client hands back as text). Limits are the HTTP API's (`cmq.model`). A frame that
does not decode, or breaks a limit, is answered by `Failed` with code ``InvalidParameter``
when its id can be read, else the connection is closed with WebSocket status 1007 (invalid
payload data); nothing is stored.

Leader hint: `Sent`, `Results` and `Deliver` end with an optional ``leader``, the HTTP address
(``host:port``, as the ``Cmq-Leader`` header of the HTTP API names it) of the node leading the
frame's queue, present only when the answering node does not lead it and knows which node does.
A server that predates it sends none and a client that predates it ignores it (answer frames
allow trailing elements), so it needs no new version; a frame without a hint is encoded exactly
as before (`PlainSent`, `PlainDeliver`, `PlainResults`).

Versions: the protocol is version 1 (`STREAM_PROTOCOL_VERSION`), implicit: the upgrade carries
no version header or subprotocol, and a frame's tag is its version marker. This release reads
request tags 1-6 and answer tags 16-19; a later release adds tags. A request frame with a tag
the server does not know is answered `Failed` (code ``InvalidParameter``) saying it is a newer
release's frame and which tags the server reads (the connection and the other frames go on); an
answer the client cannot read ends the connection with that reason given to the pending calls.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final, cast

import msgspec
from msgspec import Meta, Struct

from cmq.errors import InvalidParameter
from cmq.model import (
    FIFO_ID,
    LIMITS,
    MAX_ACK_BATCH,
    MAX_ATTRIBUTE_NAME,
    MAX_DEDUP_ID,
    MAX_DELAY_SECONDS,
    MAX_MESSAGE_ATTRIBUTES,
    MAX_PRIORITY,
    MAX_RECEIVE_BATCH,
    MAX_SEND_BATCH,
    OutgoingMessage,
    ReceivedMessage,
)
from cmq.rfc3339 import epoch_ms

STREAM_PATH: Final = "/v1/stream"
"""Where a node accepts stream connections (a WebSocket upgrade of a GET)."""
MAX_CREDIT: Final = 100_000
"""The most messages a subscription may have granted and not yet delivered."""
MAX_FRAMES: Final = 1024
"""The most frames in one WebSocket message."""

_Id = Annotated[int, Meta(ge=0, le=2**63 - 1)]
_Queue = Annotated[str, Meta(min_length=1, max_length=80)]
_Receipts = Annotated[list[Annotated[str, Meta(min_length=1)]], Meta(min_length=1)]
_Attributes = Annotated[
    dict[Annotated[str, Meta(min_length=1, max_length=MAX_ATTRIBUTE_NAME)], str],
    Meta(max_length=MAX_MESSAGE_ATTRIBUTES),
]


def _bounded(name: str) -> Meta:
    lo, hi, _ = LIMITS[name]
    return Meta(ge=lo, le=hi)


class Message(Struct, array_like=True, forbid_unknown_fields=True):
    """One message of a `Send`: its body, whether it is binary (False: UTF-8 text, returned as
    text), and an optional delay (None: the queue's), attributes and deduplication id."""

    body: bytes
    binary: bool = False
    delay_seconds: Annotated[int, Meta(ge=0, le=MAX_DELAY_SECONDS)] | None = None
    attributes: _Attributes | None = None
    dedup_id: Annotated[str, Meta(min_length=1, max_length=MAX_DEDUP_ID)] | None = None
    group_id: Annotated[str, Meta(pattern=FIFO_ID.pattern)] | None = None
    """FIFO queues: the message group (required there; refused on standard queues)."""
    deliver_at: Annotated[str, Meta(max_length=64)] | None = None
    """Deliver no earlier than this RFC 3339 time (with a zone), instead of a delay: at most
    the queue's ``max_delay_seconds`` ahead; in the past: at once. Trailing and optional, so
    frames of clients that predate it decode as before."""
    ttl_seconds: Annotated[int, Meta(ge=1)] | None = None
    """Time to live (at most the queue's retention): never delivered once this long has passed
    since the send. Trailing and optional, like ``deliver_at``."""
    priority: Annotated[int, Meta(ge=0, le=MAX_PRIORITY)] = 0
    """Priority level, 0 (the lowest) .. the queue's ``priorities`` - 1. Trailing and optional,
    like ``deliver_at``."""

    def to_model(self) -> OutgoingMessage:
        return OutgoingMessage(
            body=self.body,
            binary=self.binary,
            delay_seconds=self.delay_seconds,
            attributes=() if not self.attributes else tuple(self.attributes.items()),
            dedup_id=self.dedup_id,
            group_id=self.group_id,
            deliver_at_ms=None if self.deliver_at is None else deliver_at_ms(self.deliver_at),
            ttl_seconds=self.ttl_seconds,
            priority=self.priority,
        )


_ZONED = Annotated[datetime, Meta(tz=True)]


RFC3339 = r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
"""An RFC 3339 date-time with its zone (what ``deliver_at`` takes on every surface)."""


def deliver_at_ms(text: str) -> int:
    """The ``deliver_at`` of a send (RFC 3339 with a zone) as Unix ms, rounded up;
    `InvalidParameter` otherwise. Shared by the stream and the HTTP API."""
    return rfc3339_ms(text, "deliver_at")


def rfc3339_ms(text: str, what: str) -> int:
    """``text`` (RFC 3339 with a zone; the field ``what``) as Unix ms, rounded up;
    `InvalidParameter` naming ``what`` otherwise."""
    try:
        return epoch_ms(msgspec.convert(text, _ZONED))
    except msgspec.ValidationError:
        raise InvalidParameter(
            f"{what} must be an RFC 3339 time with a zone; got {text!r}"
        ) from None


class PlainMessage(Struct, array_like=True, forbid_unknown_fields=True):
    """A `Message` without ``deliver_at`` and ``ttl_seconds``, as clients send it: the six
    fields every server reads (a server that predates them refuses a longer message)."""

    body: bytes
    binary: bool = False
    delay_seconds: int | None = None
    attributes: dict[str, str] | None = None
    dedup_id: str | None = None
    group_id: str | None = None


class Send(Struct, tag=1, array_like=True, forbid_unknown_fields=True):
    id: _Id
    queue: _Queue
    messages: Annotated[list[Message], Meta(min_length=1, max_length=MAX_SEND_BATCH)]


class Subscribe(Struct, tag=2, array_like=True, forbid_unknown_fields=True):
    id: _Id
    queue: _Queue
    credit: Annotated[int, Meta(ge=0, le=MAX_CREDIT)]
    visibility_timeout: Annotated[int, _bounded("visibility_timeout")] | None = None
    max_batch: Annotated[int, Meta(ge=1, le=MAX_RECEIVE_BATCH)] = 32


class Credit(Struct, tag=3, array_like=True, forbid_unknown_fields=True):
    id: _Id
    credit: Annotated[int, Meta(ge=1, le=MAX_CREDIT)]


class Unsubscribe(Struct, tag=4, array_like=True, forbid_unknown_fields=True):
    id: _Id


class Ack(Struct, tag=5, array_like=True, forbid_unknown_fields=True):
    id: _Id
    queue: _Queue
    receipts: Annotated[_Receipts, Meta(max_length=MAX_ACK_BATCH)]


class Nack(Struct, tag=6, array_like=True, forbid_unknown_fields=True):
    id: _Id
    queue: _Queue
    receipts: Annotated[_Receipts, Meta(max_length=MAX_ACK_BATCH)]
    delay_seconds: Annotated[int, _bounded("delay_seconds")] = 0


class Sent(Struct, tag=16, array_like=True):
    id: int
    messages: list[tuple[str, int]]
    leader: str | None = None
    """The leader hint (see "Leader hint" above); trailing and optional."""


class Delivered(Struct, array_like=True):
    """One leased message of a `Deliver` frame."""

    id: str
    seq: int
    body: bytes
    binary: bool
    receipt: str
    receive_count: int
    sent_at_ms: int
    attributes: dict[str, str]
    group_id: str | None = None
    """FIFO queues: the message's group and deduplication id (its seq is its sequence number)."""
    dedup_id: str | None = None
    priority: int = 0
    """Its priority level (trailing: clients that predate it ignore it)."""

    @classmethod
    def of(cls, m: ReceivedMessage) -> Delivered:
        return cls(
            m.id,
            m.seq,
            m.body,
            m.binary,
            m.receipt,
            m.receive_count,
            m.sent_at_ms,
            dict(m.attributes),
            m.group_id,
            m.dedup_id,
            m.priority,
        )

    def to_model(self) -> ReceivedMessage:
        return ReceivedMessage(
            id=self.id,
            seq=self.seq,
            body=self.body,
            binary=self.binary,
            receipt=self.receipt,
            receive_count=self.receive_count,
            sent_at_ms=self.sent_at_ms,
            attributes=tuple(self.attributes.items()),
            group_id=self.group_id,
            dedup_id=self.dedup_id,
            priority=self.priority,
        )


class Deliver(Struct, tag=17, array_like=True):
    id: int
    messages: list[Delivered]
    leader: str | None = None
    """The leader hint (see "Leader hint" above); trailing and optional."""


class Results(Struct, tag=18, array_like=True):
    id: int
    results: list[tuple[str, bool, str | None]]
    leader: str | None = None
    """The leader hint (see "Leader hint" above); trailing and optional."""


class PlainSent(Struct, tag=16, array_like=True):
    """A `Sent` without a leader hint, as a server encodes it (the bytes of every release)."""

    id: int
    messages: list[tuple[str, int]]


class PlainDeliver(Struct, tag=17, array_like=True):
    """A `Deliver` without a leader hint, as a server encodes it."""

    id: int
    messages: list[Delivered]


class PlainResults(Struct, tag=18, array_like=True):
    """A `Results` without a leader hint, as a server encodes it."""

    id: int
    results: list[tuple[str, bool, str | None]]


def sent(fid: int, messages: list[tuple[str, int]], leader: str) -> Sent:
    """The `Sent` answer, carrying ``leader`` when it is not empty (else the frame every
    release sends: msgspec encodes a struct by its runtime type)."""
    if leader:
        return Sent(fid, messages, leader)
    return cast("Sent", PlainSent(fid, messages))


def deliver(sid: int, messages: list[Delivered], leader: str) -> Deliver:
    """The `Deliver` frame, carrying ``leader`` when it is not empty (as `sent`)."""
    if leader:
        return Deliver(sid, messages, leader)
    return cast("Deliver", PlainDeliver(sid, messages))


def results(fid: int, entries: list[tuple[str, bool, str | None]], leader: str) -> Results:
    """The `Results` answer, carrying ``leader`` when it is not empty (as `sent`)."""
    if leader:
        return Results(fid, entries, leader)
    return cast("Results", PlainResults(fid, entries))


class Failed(Struct, tag=19, array_like=True):
    id: int
    status: int
    code: str
    message: str
    retry_after: float | None = None


Request = Send | Subscribe | Credit | Unsubscribe | Ack | Nack
"""What a client sends."""
Answer = Sent | Deliver | Results | Failed
"""What a server sends."""

STREAM_PROTOCOL_VERSION: Final = 1
"""The protocol described above; implicit (see "Versions" in the module docstring)."""
REQUEST_TAGS: Final = frozenset(range(1, 7))
"""The tags of `Request` frames this release reads (a test checks them against the structs)."""
ANSWER_TAGS: Final = frozenset(range(16, 20))
"""The tags of `Answer` frames this release reads (a test checks them against the structs)."""

_encoder = msgspec.msgpack.Encoder()
_requests = msgspec.msgpack.Decoder(
    Annotated[list[Request], Meta(min_length=1, max_length=MAX_FRAMES)]
)
_answers = msgspec.msgpack.Decoder(list[Answer])
_one_request = msgspec.msgpack.Decoder(Request)
_raw_frames = msgspec.msgpack.Decoder(
    Annotated[list[msgspec.Raw], Meta(min_length=1, max_length=MAX_FRAMES)]
)


def encode(frames: list[Request] | list[Answer]) -> bytes:
    """One WebSocket message carrying ``frames`` in order."""
    return _encoder.encode(frames)


def decode_answers(data: bytes) -> list[Answer]:
    """The frames of a server's message; `InvalidParameter` if it does not decode."""
    try:
        return _answers.decode(data)
    except msgspec.DecodeError as e:
        tags = _unknown_tags(data, ANSWER_TAGS)
        if tags:
            raise InvalidParameter(
                f"answer frame tag {tags[0]} is unknown: a frame of a newer release than this "
                f"client, which reads answer tags {_tag_list(ANSWER_TAGS)} (stream protocol "
                f"{STREAM_PROTOCOL_VERSION})"
            ) from None
        raise InvalidParameter(f"undecodable stream message: {e}") from None


class BadFrame(InvalidParameter):
    """A request frame that does not decode or breaks a limit. ``id`` is its correlation id
    when that much could be read (answer with `Failed`), else None (close the connection)."""

    def __init__(self, message: str, id: int | None) -> None:
        super().__init__(message)
        self.id = id


def decode_requests(data: bytes) -> list[Request | BadFrame]:
    """The frames of a client's message, in order; a frame that does not decode is returned
    as its `BadFrame` (the others are still served). Raises `BadFrame` (id None) when the
    message itself is not an array of frames."""
    try:
        return list(_requests.decode(data))
    except msgspec.DecodeError:
        pass
    try:
        raws = _raw_frames.decode(data)
    except msgspec.DecodeError as e:
        raise BadFrame(
            f"a stream message is an array of 1..{MAX_FRAMES} frames: {e}", None
        ) from None
    out: list[Request | BadFrame] = []
    for raw in raws:
        try:
            out.append(_one_request.decode(raw))
        except msgspec.DecodeError as e:
            tag = _frame_tag(raw)
            if tag is not None and tag not in REQUEST_TAGS:
                why = (
                    f"frame tag {tag} is unknown: a frame of a newer release than this server, "
                    f"which reads request tags {_tag_list(REQUEST_TAGS)} (stream protocol "
                    f"{STREAM_PROTOCOL_VERSION})"
                )
                out.append(BadFrame(why, _frame_id(raw)))
            else:
                out.append(BadFrame(f"bad frame: {e}", _frame_id(raw)))
    return out


def _tag_list(tags: frozenset[int]) -> str:
    return ", ".join(map(str, sorted(tags)))


def _frame_tag(raw: msgspec.Raw | bytes) -> int | None:
    """The tag of a frame (its first element) if it is an integer, else None."""
    try:
        items = msgspec.msgpack.decode(raw)
    except msgspec.DecodeError:
        return None
    if isinstance(items, list) and items:
        tag = items[0]
        if isinstance(tag, int) and not isinstance(tag, bool):
            return tag
    return None


def _unknown_tags(data: bytes, known: frozenset[int]) -> list[int]:
    """The integer tags of the frames of a message that are not in ``known``, in order."""
    try:
        raws = _raw_frames.decode(data)
    except msgspec.DecodeError:
        return []
    tags = (_frame_tag(raw) for raw in raws)
    return [t for t in tags if t is not None and t not in known]


def _frame_id(raw: msgspec.Raw) -> int | None:
    """The correlation id of an undecodable frame: its second element, if the frame is an
    array whose second element is a valid id."""
    try:
        items = msgspec.msgpack.decode(raw)
    except msgspec.DecodeError:
        return None
    if isinstance(items, list) and len(items) >= 2:
        fid = items[1]
        if isinstance(fid, int) and not isinstance(fid, bool) and 0 <= fid < 2**63:
            return fid
    return None
