"""The byte layout of the queue machine's commands (`cmq.fsm.commands.definitions`):
`encode_command` turns a command into the bytes of a Raft proposal, `decode_command` parses them
back. No pickle: a malformed payload raises `InvalidParameter`.

Format: a leading `CommandType` byte, then the fields in declaration order, little-endian: ints
as i64 (counts as u32), strings and bodies as ``[u32 len][bytes]`` (UTF-8 for text, raw for
bodies), optionals as a presence byte then the value, tuples as ``[u32 count][items]``. FIFO
fields added later trail their command and are present only when set (a Lease's attempt id, an
import's expected sent count), so earlier logs still decode. A `Produce` is encoded as
`PRODUCE_RECORDS`: each message as its segment record tail (`cmq.fsm.store.record_tail`) and a
byte of options, so apply frames records by copying; the older `PRODUCE` is decoded only.

Versions: the command type byte is the version marker (no other byte carries one). This release
reads the types of `CommandType` (1-18); a later release's command has a type beyond them, or a
message option bit this release does not know (a `PRODUCE_RECORDS` message), or a record flag
(`cmq.fsm.store`): `decode_command` raises `NewerLayout` naming it, and the state machine stops
the group with `cmq.errors.NewerFormat` naming the entry, never skipping it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from enum import IntEnum

from cmq.errors import InvalidParameter, NewerLayout
from cmq.fsm.commands.definitions import (
    Ack,
    ChangeVisibility,
    ClaimSegments,
    Command,
    CreateQueue,
    DeadLetter,
    DeleteQueue,
    Expire,
    Lease,
    MarkArchived,
    Nack,
    NewMessage,
    Produce,
    Purge,
    Retime,
    Rewind,
    SetAttributes,
    Tidy,
)
from cmq.fsm.commands.runs import MAX_RUN_ENTRIES, read_ack_runs, runs_of, write_ack_runs
from cmq.fsm.store import decode_tail, record_tail
from cmq.fsm.wire import Reader, Writer
from cmq.model import DEFAULT_MAX_DELAY_SECONDS, QueueAttributes, RetryPolicy

__all__ = [
    "CommandType",
    "SendParts",
    "decode_command",
    "encode_command",
    "merge_produce",
    "produce_parts",
    "read_attributes",
    "restamp_produce",
    "write_attributes",
]


class CommandType(IntEnum):
    """The leading byte of an encoded command. Values are stored in Raft logs: never reuse."""

    CREATE_QUEUE = 1
    DELETE_QUEUE = 2
    SET_ATTRIBUTES = 3
    PURGE = 4
    PRODUCE = 5
    LEASE = 6
    ACK = 7
    CHANGE_VISIBILITY = 8
    NACK = 9
    DEAD_LETTER = 10
    EXPIRE = 11
    CLAIM_SEGMENTS = 12
    MARK_ARCHIVED = 13
    TIDY = 14
    PRODUCE_RECORDS = 15
    """A `Produce` whose messages are carried as segment record tails (`PRODUCE` is only
    decoded: logs written before it)."""
    RETIME = 16
    REWIND = 17
    """Flag ``rewind``."""
    ACK_RUNS = 18
    """An `Ack` whose entries are carried as runs (`cmq.fsm.commands.runs`; flag
    ``batch_receipts``, written only by `encode_ack` when asked)."""


_COMMAND_TYPES = {t.value: t for t in CommandType}

_ARCHIVE, _FIFO, _CONTENT_DEDUP, _RETRY, _MAX_DELAY, _PRIORITIES, _RETAIN = 1, 2, 4, 8, 16, 32, 64
_KNOWN_FLAGS = _ARCHIVE | _FIFO | _CONTENT_DEDUP | _RETRY | _MAX_DELAY | _PRIORITIES | _RETAIN
"""Bits of the attributes' flags byte."""


def _write_attributes(w: Writer, a: QueueAttributes) -> None:
    w.i64(a.visibility_timeout)
    w.i64(a.delay_seconds)
    w.i64(a.message_retention_seconds)
    w.i64(a.max_message_size)
    w.i64(a.receive_wait_seconds)
    w.opt_text(a.dead_letter_queue)
    w.i64(a.max_receive_count)
    # One flags byte (was the archive boolean: standard queues encode as before).
    w.u8(
        (_ARCHIVE if a.archive else 0)
        | (_FIFO if a.fifo else 0)
        | (_CONTENT_DEDUP if a.content_based_deduplication else 0)
        | (_RETRY if a.retry is not None else 0)
        | (_MAX_DELAY if a.max_delay_seconds != DEFAULT_MAX_DELAY_SECONDS else 0)
        | (_PRIORITIES if a.priorities != 1 else 0)
        | (_RETAIN if a.retain_acked_seconds else 0)
    )
    if a.retry is not None:  # flag retry_backoff: a queue without a policy encodes as before
        w.u32(a.retry.initial_seconds)
        w.u16(a.retry.multiplier_pct)
        w.u32(a.retry.max_seconds)
    if a.max_delay_seconds != DEFAULT_MAX_DELAY_SECONDS:  # flag long_delays
        w.u32(a.max_delay_seconds)
    if a.priorities != 1:  # flag message_priorities
        w.u8(a.priorities)
    if a.retain_acked_seconds:  # flag rewind
        w.u32(a.retain_acked_seconds)


def _read_attributes(r: Reader) -> QueueAttributes:
    values = (r.i64(), r.i64(), r.i64(), r.i64(), r.i64(), r.opt_text(), r.i64())
    flags = r.u8()
    if flags & ~_KNOWN_FLAGS:
        raise NewerLayout(
            f"unknown queue attribute flags {flags:#x}: from a newer release than this one, "
            f"which reads the flags {_KNOWN_FLAGS:#x}"
        )
    retry = None
    if flags & _RETRY:
        initial, pct, most = r.u32(), r.u16(), r.u32()
        retry = RetryPolicy(initial, pct / 100, most)
    max_delay = r.u32() if flags & _MAX_DELAY else DEFAULT_MAX_DELAY_SECONDS
    priorities = r.u8() if flags & _PRIORITIES else 1
    retain = r.u32() if flags & _RETAIN else 0
    return QueueAttributes(
        visibility_timeout=values[0],
        delay_seconds=values[1],
        message_retention_seconds=values[2],
        max_message_size=values[3],
        receive_wait_seconds=values[4],
        dead_letter_queue=values[5],
        max_receive_count=values[6],
        archive=bool(flags & _ARCHIVE),
        fifo=bool(flags & _FIFO),
        content_based_deduplication=bool(flags & _CONTENT_DEDUP),
        retry=retry,
        max_delay_seconds=max_delay,
        priorities=priorities,
        retain_acked_seconds=retain,
    )


def write_attributes(w: Writer, a: QueueAttributes) -> None:
    """Encode ``a`` (shared with the snapshot image)."""
    _write_attributes(w, a)


def read_attributes(r: Reader) -> QueueAttributes:
    """Inverse of `write_attributes`."""
    return _read_attributes(r)


def encode_ack(cmd: Ack, *, runs_ok: bool) -> bytes:
    """The proposal bytes of ``cmd``: as `ACK_RUNS` when ``runs_ok`` (flag ``batch_receipts``
    is enabled) and its entries' runs are smaller than its pairs, else as `encode_command`
    does (also when it has more entries than `ACK_RUNS` may decode to). Both decode to
    ``cmd``."""
    if runs_ok and len(cmd.entries) <= MAX_RUN_ENTRIES:
        runs = runs_of(cmd.entries)
        if len(runs) * 20 < len(cmd.entries) * 16:
            w = Writer()
            w.u8(CommandType.ACK_RUNS)
            write_ack_runs(w, cmd, runs)
            return w.getvalue()
    return encode_command(cmd)


def encode_command(cmd: Command) -> bytes:
    """The proposal bytes of ``cmd`` (see the module docstring for the layout)."""
    w = Writer()
    match cmd:
        case CreateQueue(name, attributes, now_ms, segment_bytes, segment_age_ms):
            w.u8(CommandType.CREATE_QUEUE)
            w.text(name)
            _write_attributes(w, attributes)
            w.i64(now_ms)
            w.i64(segment_bytes)
            w.i64(segment_age_ms)
        case DeleteQueue(name):
            w.u8(CommandType.DELETE_QUEUE)
            w.text(name)
        case SetAttributes(name, attributes):
            w.u8(CommandType.SET_ATTRIBUTES)
            w.text(name)
            _write_attributes(w, attributes)
        case Purge(name, now_ms):
            w.u8(CommandType.PURGE)
            w.text(name)
            w.i64(now_ms)
        case Produce(queue, now_ms, messages, _, expect_sent):
            w.u8(CommandType.PRODUCE_RECORDS)
            w.text(queue)
            w.i64(now_ms)
            w.u32(len(messages))
            for m in messages:
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
            if expect_sent is not None:  # trailing and optional: plain sends encode as before
                w.i64(expect_sent)
        case Lease(queue, now_ms, max_messages, visibility_ms, attempt_id):
            w.u8(CommandType.LEASE)
            w.text(queue)
            w.i64(now_ms)
            w.u32(max_messages)
            w.opt_i64(visibility_ms)
            if attempt_id is not None:  # trailing and optional, as the group ids above
                w.opt_text(attempt_id)
        case Ack(queue, now_ms, entries):
            w.u8(CommandType.ACK)
            w.text(queue)
            w.i64(now_ms)
            w.u32(len(entries))
            for seq, lease_id in entries:
                w.i64(seq)
                w.i64(lease_id)
        case ChangeVisibility(queue, now_ms, cv_entries):
            w.u8(CommandType.CHANGE_VISIBILITY)
            w.text(queue)
            w.i64(now_ms)
            w.u32(len(cv_entries))
            for seq, lease_id, visibility_ms in cv_entries:
                w.i64(seq)
                w.i64(lease_id)
                w.i64(visibility_ms)
        case Nack(queue, now_ms, entries, delay_ms):
            w.u8(CommandType.NACK)
            w.text(queue)
            w.i64(now_ms)
            w.u32(len(entries))
            for seq, lease_id in entries:
                w.i64(seq)
                w.i64(lease_id)
            w.i64(delay_ms)
        case DeadLetter(queue, seqs):
            w.u8(CommandType.DEAD_LETTER)
            w.text(queue)
            w.u32(len(seqs))
            for seq in seqs:
                w.i64(seq)
        case Expire(queue, now_ms):
            w.u8(CommandType.EXPIRE)
            w.text(queue)
            w.i64(now_ms)
        case ClaimSegments(queue, now_ms, batch_id, segments, ttl_ms):
            w.u8(CommandType.CLAIM_SEGMENTS)
            w.text(queue)
            w.i64(now_ms)
            w.text(batch_id)
            _write_seqs(w, segments)
            w.i64(ttl_ms)
        case MarkArchived(queue, now_ms, batch_id, segments):
            w.u8(CommandType.MARK_ARCHIVED)
            w.text(queue)
            w.i64(now_ms)
            w.text(batch_id)
            _write_seqs(w, segments)
        case Tidy(queue, now_ms):
            w.u8(CommandType.TIDY)
            w.text(queue)
            w.i64(now_ms)
        case Retime(queue, now_ms):
            w.u8(CommandType.RETIME)
            w.text(queue)
            w.i64(now_ms)
        case Rewind(queue, now_ms, since_ms, from_seq, limit):
            w.u8(CommandType.REWIND)
            w.text(queue)
            w.i64(now_ms)
            w.i64(since_ms)
            w.i64(from_seq)
            w.u32(limit)
    return w.getvalue()


_I64 = struct.Struct("<q")


def restamp_produce(command: bytes, now_ms: int) -> bytes:
    """The encoded `Produce` ``command`` carrying ``now_ms`` instead of the time it was built
    with (the group leader stamps every send with its own clock). A copy with 8 bytes replaced;
    anything that is not an encoded `Produce` raises `InvalidParameter`."""
    if command[:1] not in (bytes((CommandType.PRODUCE_RECORDS,)), bytes((CommandType.PRODUCE,))):
        raise InvalidParameter(f"not an encoded send: command type {command[:1]!r}")
    if len(command) < 5:
        raise InvalidParameter("truncated send")
    at = 5 + _U32.unpack_from(command, 1)[0]
    if at + 8 > len(command):
        raise InvalidParameter("truncated send")
    return b"".join((command[:at], _I64.pack(now_ms), command[at + 8 :]))


@dataclass(frozen=True, slots=True)
class SendParts:
    """An encoded plain send taken apart for merging (`produce_parts`): its queue, how many
    messages it carries and their bytes exactly as encoded."""

    queue: str
    count: int
    messages: bytes


def produce_parts(command: bytes) -> SendParts | None:
    """``command`` (an encoded `Produce`) as `SendParts`, or None when it is not to be merged:
    not a `PRODUCE_RECORDS`, an import (its trailing expected count), or message options this
    release does not know (a newer release's: apply decides, `NewerLayout`). Walks the
    message framing only (lengths and option fields), never decoding a message."""
    if command[:1] != bytes((CommandType.PRODUCE_RECORDS,)) or len(command) < 5:
        return None
    size = len(command)
    at = 5 + _U32.unpack_from(command, 1)[0]
    if at + 12 > size:
        return None
    count = _U32.unpack_from(command, at + 8)[0]
    start = at + 12
    try:
        _, end = _message_frames(command, start, count)
    except (InvalidParameter, NewerLayout):
        return None
    if end != size:  # an import's expected count trails the messages
        return None
    try:
        queue = command[5:at].decode()
    except UnicodeDecodeError:
        return None
    return SendParts(queue, count, command[start:])


def merge_produce(queue: str, now_ms: int, parts: list[SendParts]) -> bytes:
    """One encoded `Produce` of ``parts``' messages in order, stamped ``now_ms``: the bytes
    `encode_command` gives for a `Produce` of them all (the layout is unchanged: a merged send
    is an ordinary `PRODUCE_RECORDS`)."""
    name = queue.encode()
    head = b"".join(
        (
            bytes((CommandType.PRODUCE_RECORDS,)),
            _U32.pack(len(name)),
            name,
            _I64.pack(now_ms),
            _U32.pack(sum(p.count for p in parts)),
        )
    )
    return b"".join([head, *(p.messages for p in parts)])


def _write_seqs(w: Writer, seqs: tuple[int, ...]) -> None:
    w.u32(len(seqs))
    for seq in seqs:
        w.i64(seq)


def _count(r: Reader, item_size: int) -> int:
    """A u32 item count, rejected early if the remaining bytes cannot hold that many items
    (so a forged count cannot make the decoder loop or allocate for nothing)."""
    n = r.u32()
    if n * item_size > r.remaining():
        raise InvalidParameter(f"count {n} exceeds the remaining {r.remaining()} bytes")
    return n


def decode_command(data: bytes) -> Command:
    """Parse `encode_command` output; anything malformed raises `InvalidParameter`, a newer
    release's command `NewerLayout` (see the module docstring)."""
    r = Reader(data)
    code = r.u8()
    kind = _COMMAND_TYPES.get(code)
    if kind is None and code < min(CommandType):
        raise InvalidParameter(f"unknown command type {code}")
    if kind is None:
        raise NewerLayout(
            f"unknown command type {code}: a command of a newer release than this one, "
            f"which reads command types {min(CommandType)}-{max(CommandType)}"
        )
    cmd: Command
    match kind:  # the commands of the data path first
        case CommandType.PRODUCE_RECORDS:
            cmd = _read_produce(r)
        case CommandType.CREATE_QUEUE:
            cmd = CreateQueue(r.text(), _read_attributes(r), r.i64(), r.i64(), r.i64())
        case CommandType.DELETE_QUEUE:
            cmd = DeleteQueue(r.text())
        case CommandType.SET_ATTRIBUTES:
            cmd = SetAttributes(r.text(), _read_attributes(r))
        case CommandType.PURGE:
            cmd = Purge(r.text(), r.i64())
        case CommandType.PRODUCE:
            cmd = _read_legacy_produce(r)
        case CommandType.LEASE:
            queue, now_ms, count, visibility = r.text(), r.i64(), r.u32(), r.opt_i64()
            attempt = None
            if r.remaining():
                attempt = r.opt_text()
                if attempt is None:
                    raise InvalidParameter("an absent attempt id is not encoded")
            cmd = Lease(queue, now_ms, count, visibility, attempt)
        case CommandType.ACK:
            queue, now_ms = r.text(), r.i64()
            pairs = tuple((r.i64(), r.i64()) for _ in range(_count(r, 16)))
            cmd = Ack(queue, now_ms, pairs)
        case CommandType.CHANGE_VISIBILITY:
            queue, now_ms = r.text(), r.i64()
            triples = tuple((r.i64(), r.i64(), r.i64()) for _ in range(_count(r, 24)))
            cmd = ChangeVisibility(queue, now_ms, triples)
        case CommandType.NACK:
            queue, now_ms = r.text(), r.i64()
            pairs = tuple((r.i64(), r.i64()) for _ in range(_count(r, 16)))
            cmd = Nack(queue, now_ms, pairs, r.i64())
        case CommandType.DEAD_LETTER:
            queue = r.text()
            cmd = DeadLetter(queue, tuple(r.i64() for _ in range(_count(r, 8))))
        case CommandType.EXPIRE:
            cmd = Expire(r.text(), r.i64())
        case CommandType.CLAIM_SEGMENTS:
            queue, now_ms, batch = r.text(), r.i64(), r.text()
            firsts = tuple(r.i64() for _ in range(_count(r, 8)))
            cmd = ClaimSegments(queue, now_ms, batch, firsts, r.i64())
        case CommandType.MARK_ARCHIVED:
            queue, now_ms, batch = r.text(), r.i64(), r.text()
            cmd = MarkArchived(queue, now_ms, batch, tuple(r.i64() for _ in range(_count(r, 8))))
        case CommandType.TIDY:
            cmd = Tidy(r.text(), r.i64())
        case CommandType.RETIME:
            cmd = Retime(r.text(), r.i64())
        case CommandType.REWIND:
            cmd = Rewind(r.text(), r.i64(), r.i64(), r.i64(), r.u32())
        case CommandType.ACK_RUNS:
            cmd = read_ack_runs(r)
    r.end()
    return cmd


_U32 = struct.Struct("<I")
_HAS_DELAY, _HAS_DEDUP, _HAS_GROUP, _HAS_TTL, _HAS_PRIORITY = 1, 2, 4, 8, 16
"""Per message of a `PRODUCE_RECORDS`: which optional fields follow its tail (``_HAS_PRIORITY``,
a u8 level above 0: flag ``message_priorities``; ``_HAS_TTL``:
flag ``message_ttl``)."""
_KNOWN_OPTIONS = _HAS_DELAY | _HAS_DEDUP | _HAS_GROUP | _HAS_TTL | _HAS_PRIORITY


def _read_produce(r: Reader) -> Produce:
    """The body of a `PRODUCE_RECORDS`: fields walked in place (this decodes every message of
    every replica's apply), each tail checked by `decode_tail` and kept as is."""
    queue, now_ms = r.text(), r.i64()
    count = _count(r, 14)  # u32 tail length, a tail of at least 9 bytes, u8 options
    data = r.data
    frames, after = _message_frames(data, r.pos, count)
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


def _message_frames(
    data: bytes | memoryview, pos: int, count: int
) -> tuple[list[tuple[int, int, int]], int]:
    """The framing of the ``count`` messages of a `PRODUCE_RECORDS` from byte ``pos``, the one
    walk of that layout (`_read_produce` decodes along it, `produce_parts` only measures): per
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


def _read_legacy_produce(r: Reader) -> Produce:
    queue, now_ms = r.text(), r.i64()
    messages = []
    for _ in range(_count(r, 13)):
        mid, body, binary = r.text(), r.blob(), r.boolean()
        attrs = tuple((r.text(), r.text()) for _ in range(_count(r, 8)))
        messages.append(NewMessage(mid, body, binary, attrs, r.opt_i64(), r.opt_text()))
    if r.remaining():
        if _count(r, 1) != len(messages):
            raise InvalidParameter("group ids do not match the messages")
        messages = [replace(m, group_id=r.opt_text()) for m in messages]
    return Produce(queue, now_ms, tuple(messages))
