"""The byte layout of a `Produce` (`cmq.fsm.commands.codec` frames it with its command type
byte): `PRODUCE_RECORDS`, written, and the older `PRODUCE`, decoded only.

`PRODUCE_RECORDS` body, little-endian: the queue (``[u32 len][UTF-8]``), the time (i64), the
message count (u32), then per message its segment record tail (``[u32 len][tail]``,
`cmq.fsm.store.record_tail`, so apply frames records by copying), an options byte and the
optional fields it announces in bit order (delay i64, dedup id text, group id text, time to live
i64, priority u8); an import's expected sent count (i64) trails the messages, only when set.

Versions: an option bit this release does not know is a newer release's: `message_frames` (so
`read_produce`) raises `NewerLayout` naming it.
"""

from __future__ import annotations

import struct
from dataclasses import replace

from cmq.errors import InvalidParameter, NewerLayout
from cmq.fsm.commands.definitions import NewMessage, Produce
from cmq.fsm.store import decode_tail, record_tail
from cmq.fsm.wire import Reader, Writer

__all__ = ["message_frames", "read_legacy_produce", "read_produce", "write_produce"]

_U32 = struct.Struct("<I")
_HAS_DELAY, _HAS_DEDUP, _HAS_GROUP, _HAS_TTL, _HAS_PRIORITY = 1, 2, 4, 8, 16
"""Per message of a `PRODUCE_RECORDS`: which optional fields follow its tail (``_HAS_PRIORITY``,
a u8 level above 0: flag ``message_priorities``; ``_HAS_TTL``:
flag ``message_ttl``)."""
_KNOWN_OPTIONS = _HAS_DELAY | _HAS_DEDUP | _HAS_GROUP | _HAS_TTL | _HAS_PRIORITY


def write_produce(w: Writer, cmd: Produce) -> None:
    """The body of ``cmd`` as a `PRODUCE_RECORDS` (after its command type byte): the queue, the
    time, the message count, per message its record tail, its options byte and the option
    fields, then the expected sent count of an import (trailing, only when set)."""
    w.text(cmd.queue)
    w.i64(cmd.now_ms)
    w.u32(len(cmd.messages))
    for m in cmd.messages:
        w.blob(record_tail(m.id, m.binary, m.attributes, m.body))
        opts = (
            (_HAS_DELAY if m.delay_ms is not None else 0)
            | (_HAS_DEDUP if m.dedup_id is not None else 0)
            | (_HAS_GROUP if m.group_id is not None else 0)
            | (_HAS_TTL if m.ttl_ms is not None else 0)
            | (_HAS_PRIORITY if m.priority else 0)
        )
        w.u8(opts)
        if m.delay_ms is not None:
            w.i64(m.delay_ms)
        if m.dedup_id is not None:
            w.text(m.dedup_id)
        if m.group_id is not None:
            w.text(m.group_id)
        if m.ttl_ms is not None:  # flag message_ttl
            w.i64(m.ttl_ms)
        if m.priority:  # flag message_priorities
            w.u8(m.priority)
    if cmd.expect_sent is not None:  # trailing and optional: plain sends encode as before
        w.i64(cmd.expect_sent)


def read_produce(r: Reader) -> Produce:
    """The body of a `PRODUCE_RECORDS`: fields walked in place (this decodes every message of
    every replica's apply), each tail checked by `decode_tail` and kept as is."""
    queue, now_ms = r.text(), r.i64()
    count = r.count(14)  # u32 tail length, a tail of at least 9 bytes, u8 options
    data = r.data
    frames, after = message_frames(data, r.pos, count)
    messages: list[NewMessage] = []
    tails: list[bytes] = []
    for start, end, opts in frames:
        mid, binary, attrs, in_tail, body_at = decode_tail(data, start, end)
        if in_tail:  # a command's tail has no level: the options byte carries it
            raise InvalidParameter("a produced message's record tail carries a priority level")
        tail = bytes(data[start:end])
        delay = dedup = group = ttl = None
        priority = 0
        if opts:
            r.seek(end + 1)
            delay = r.i64() if opts & _HAS_DELAY else None
            dedup = r.text() if opts & _HAS_DEDUP else None
            group = r.text() if opts & _HAS_GROUP else None
            ttl = r.i64() if opts & _HAS_TTL else None
            priority = r.u8() if opts & _HAS_PRIORITY else 0
        body = tail[body_at - start :]
        messages.append(NewMessage(mid, body, binary, attrs, delay, dedup, group, ttl, priority))
        tails.append(tail)
    r.seek(after)
    expect = r.i64() if r.remaining() else None
    return Produce(queue, now_ms, tuple(messages), tuple(tails), expect)


def message_frames(
    data: bytes | memoryview, pos: int, count: int
) -> tuple[list[tuple[int, int, int]], int]:
    """The framing of the ``count`` messages of a `PRODUCE_RECORDS` from byte ``pos``, the one
    walk of that layout (`read_produce` decodes along it, `produce_parts` only measures): per
    message its tail's start and end and its options byte (its option fields follow that
    byte), and the byte after the last message. A truncated frame raises `InvalidParameter`,
    options this release does not know `NewerLayout`; nothing is decoded."""
    size = len(data)
    frames: list[tuple[int, int, int]] = []
    for _ in range(count):
        if pos + 4 > size:
            raise InvalidParameter(f"truncated data at byte {pos}")
        start = pos + 4
        end = start + _U32.unpack_from(data, pos)[0]
        if end >= size:  # the options byte follows the tail
            raise InvalidParameter(f"truncated data at byte {pos}")
        opts = data[end]
        pos = end + 1
        if opts:
            if opts & ~_KNOWN_OPTIONS:
                raise NewerLayout(
                    f"unknown message options {opts:#x}: from a newer release than this one, which "
                    f"reads the options {_KNOWN_OPTIONS:#x}"
                )
            if opts & _HAS_DELAY:
                pos += 8
            for bit in (_HAS_DEDUP, _HAS_GROUP):
                if opts & bit:
                    if pos + 4 > size:
                        raise InvalidParameter(f"truncated data at byte {pos}")
                    pos += 4 + _U32.unpack_from(data, pos)[0]
            if opts & _HAS_TTL:
                pos += 8
            if opts & _HAS_PRIORITY:
                pos += 1
            if pos > size:
                raise InvalidParameter(f"truncated data at byte {size}")
        frames.append((start, end, opts))
    return frames, pos


def read_legacy_produce(r: Reader) -> Produce:
    """The body of a `PRODUCE` (logs written before `PRODUCE_RECORDS`): decoded only."""
    queue, now_ms = r.text(), r.i64()
    messages = []
    for _ in range(r.count(13)):
        mid, body, binary = r.text(), r.blob(), r.boolean()
        attrs = tuple((r.text(), r.text()) for _ in range(r.count(8)))
        messages.append(NewMessage(mid, body, binary, attrs, r.opt_i64(), r.opt_text()))
    if r.remaining():
        if r.count(1) != len(messages):
            raise InvalidParameter("group ids do not match the messages")
        messages = [replace(m, group_id=r.opt_text()) for m in messages]
    return Produce(queue, now_ms, tuple(messages))
