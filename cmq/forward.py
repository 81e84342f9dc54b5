"""Binary forms of the hot requests a node forwards to a group's leader, and of their replies.

Forwarded calls travel over the authenticated peer connection (`MultiRaft.call`). Most of them
are small JSON documents; the two that carry message bodies are binary so bodies cross the hop as
raw bytes (no base64, no JSON escaping):

* a produce call is ``[u8 PRODUCE_CALL][u32 group][encoded Produce command]``: the receiving node
  built the command (ids, clock) and the leader proposes those bytes as they are;
* a receive reply is ``[u32 count]`` then per message its id, seq, body, binary flag, receipt,
  receive count, sent-at time and attributes, in `cmq.fsm.wire` encoding.

A JSON call starts with ``{``, so the leading byte tells the two apart.
"""

from __future__ import annotations

import struct

from cmq.errors import InvalidParameter
from cmq.fsm.wire import Reader, Writer
from cmq.model import ReceivedMessage

PRODUCE_CALL = 0x01
"""Leading byte of a binary produce call (JSON calls start with ``{``, 0x7b)."""

_HEAD = struct.Struct("<BI")


def encode_produce_call(group: int, command: bytes) -> bytes:
    """A produce call for ``group`` carrying an encoded `Produce` command."""
    return _HEAD.pack(PRODUCE_CALL, group) + command


def decode_produce_call(payload: bytes) -> tuple[int, bytes]:
    """``(group, command bytes)`` of a produce call; `InvalidParameter` when malformed."""
    if len(payload) <= _HEAD.size or payload[0] != PRODUCE_CALL:
        raise InvalidParameter("malformed produce call")
    _, group = _HEAD.unpack_from(payload)
    return group, payload[_HEAD.size :]


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
