"""The byte layout of the queue machine's commands (`cmq.fsm.commands.definitions`):
`encode_command` turns a command into the bytes of a Raft proposal, `decode_command` parses them
back. No pickle: a malformed payload raises `InvalidParameter`.

Format: a leading `CommandType` byte, then the fields in declaration order, little-endian: ints
as i64 (counts as u32), strings and bodies as ``[u32 len][bytes]`` (UTF-8 for text, raw for
bodies), optionals as a presence byte then the value, tuples as ``[u32 count][items]``. FIFO
fields added later trail their command and are present only when set (a Lease's attempt id, an
import's expected sent count), so earlier logs still decode. A `Produce` is encoded as
`PRODUCE_RECORDS`: each message as its segment record tail (`cmq.fsm.store.record_tail`) and a
byte of options, so apply frames records by copying; the older `PRODUCE` is decoded only
(`cmq.fsm.commands.produce`). A queue's attributes have their own layout
(`cmq.fsm.commands.attributes`); the leader's edits of encoded sends are
`cmq.fsm.commands.sends`'.

Versions: the command type byte is the version marker (no other byte carries one). This release
reads the types of `CommandType` (1-18); a later release's command has a type beyond them, or a
message option bit this release does not know (a `PRODUCE_RECORDS` message), or a record flag
(`cmq.fsm.store`): `decode_command` raises `NewerLayout` naming it, and the state machine stops
the group with `cmq.errors.NewerFormat` naming the entry, never skipping it.
"""

from __future__ import annotations

from enum import IntEnum

from cmq.errors import InvalidParameter, NewerLayout
from cmq.fsm.commands.attributes import read_attributes, write_attributes
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
    Produce,
    Purge,
    Retime,
    Rewind,
    SetAttributes,
    Tidy,
)
from cmq.fsm.commands.produce import (
    read_legacy_produce,
    read_produce,
    write_produce,
)
from cmq.fsm.commands.runs import MAX_RUN_ENTRIES, read_ack_runs, runs_of, write_ack_runs
from cmq.fsm.wire import Reader, Writer

__all__ = [
    "CommandType",
    "decode_command",
    "encode_command",
    "read_attributes",
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
            _head(w, CommandType.CREATE_QUEUE, name)
            write_attributes(w, attributes)
            w.i64(now_ms)
            w.i64(segment_bytes)
            w.i64(segment_age_ms)
        case DeleteQueue(name):
            _head(w, CommandType.DELETE_QUEUE, name)
        case SetAttributes(name, attributes):
            _head(w, CommandType.SET_ATTRIBUTES, name)
            write_attributes(w, attributes)
        case Purge(name, now_ms):
            _head(w, CommandType.PURGE, name, now_ms)
        case Produce():
            w.u8(CommandType.PRODUCE_RECORDS)
            write_produce(w, cmd)
        case Lease(queue, now_ms, max_messages, visibility_ms, attempt_id):
            _head(w, CommandType.LEASE, queue, now_ms)
            w.u32(max_messages)
            w.opt_i64(visibility_ms)
            if attempt_id is not None:  # trailing and optional, as the group ids above
                w.opt_text(attempt_id)
        case Ack(queue, now_ms, entries):
            _head(w, CommandType.ACK, queue, now_ms)
            _write_pairs(w, entries)
        case ChangeVisibility(queue, now_ms, cv_entries):
            _head(w, CommandType.CHANGE_VISIBILITY, queue, now_ms)
            w.u32(len(cv_entries))
            for seq, lease_id, visibility_ms in cv_entries:
                w.i64(seq)
                w.i64(lease_id)
                w.i64(visibility_ms)
        case Nack(queue, now_ms, entries, delay_ms):
            _head(w, CommandType.NACK, queue, now_ms)
            _write_pairs(w, entries)
            w.i64(delay_ms)
        case DeadLetter(queue, seqs):
            _head(w, CommandType.DEAD_LETTER, queue)
            _write_seqs(w, seqs)
        case Expire(queue, now_ms):
            _head(w, CommandType.EXPIRE, queue, now_ms)
        case ClaimSegments(queue, now_ms, batch_id, segments, ttl_ms):
            _head(w, CommandType.CLAIM_SEGMENTS, queue, now_ms)
            w.text(batch_id)
            _write_seqs(w, segments)
            w.i64(ttl_ms)
        case MarkArchived(queue, now_ms, batch_id, segments):
            _head(w, CommandType.MARK_ARCHIVED, queue, now_ms)
            w.text(batch_id)
            _write_seqs(w, segments)
        case Tidy(queue, now_ms):
            _head(w, CommandType.TIDY, queue, now_ms)
        case Retime(queue, now_ms):
            _head(w, CommandType.RETIME, queue, now_ms)
        case Rewind(queue, now_ms, since_ms, from_seq, limit):
            _head(w, CommandType.REWIND, queue, now_ms)
            w.i64(since_ms)
            w.i64(from_seq)
            w.u32(limit)
    return w.getvalue()


def _head(w: Writer, kind: CommandType, name: str, now_ms: int | None = None) -> None:
    """The fields every command starts with: its type byte, its queue, and the time when it
    carries one."""
    w.u8(kind)
    w.text(name)
    if now_ms is not None:
        w.i64(now_ms)


def _write_seqs(w: Writer, seqs: tuple[int, ...]) -> None:
    w.u32(len(seqs))
    for seq in seqs:
        w.i64(seq)


def _read_seqs(r: Reader) -> tuple[int, ...]:
    return tuple(r.i64() for _ in range(r.count(8)))


def _write_pairs(w: Writer, entries: tuple[tuple[int, int], ...]) -> None:
    """(sequence, lease id) entries: a u32 count, then two i64 each."""
    w.u32(len(entries))
    for seq, lease_id in entries:
        w.i64(seq)
        w.i64(lease_id)


def _read_pairs(r: Reader) -> tuple[tuple[int, int], ...]:
    return tuple((r.i64(), r.i64()) for _ in range(r.count(16)))


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
            cmd = read_produce(r)
        case CommandType.CREATE_QUEUE:
            cmd = CreateQueue(r.text(), read_attributes(r), r.i64(), r.i64(), r.i64())
        case CommandType.DELETE_QUEUE:
            cmd = DeleteQueue(r.text())
        case CommandType.SET_ATTRIBUTES:
            cmd = SetAttributes(r.text(), read_attributes(r))
        case CommandType.PURGE:
            cmd = Purge(r.text(), r.i64())
        case CommandType.PRODUCE:
            cmd = read_legacy_produce(r)
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
            cmd = Ack(queue, now_ms, _read_pairs(r))
        case CommandType.CHANGE_VISIBILITY:
            queue, now_ms = r.text(), r.i64()
            triples = tuple((r.i64(), r.i64(), r.i64()) for _ in range(r.count(24)))
            cmd = ChangeVisibility(queue, now_ms, triples)
        case CommandType.NACK:
            queue, now_ms = r.text(), r.i64()
            cmd = Nack(queue, now_ms, _read_pairs(r), r.i64())
        case CommandType.DEAD_LETTER:
            queue = r.text()
            cmd = DeadLetter(queue, _read_seqs(r))
        case CommandType.EXPIRE:
            cmd = Expire(r.text(), r.i64())
        case CommandType.CLAIM_SEGMENTS:
            queue, now_ms, batch = r.text(), r.i64(), r.text()
            cmd = ClaimSegments(queue, now_ms, batch, _read_seqs(r), r.i64())
        case CommandType.MARK_ARCHIVED:
            queue, now_ms, batch = r.text(), r.i64(), r.text()
            cmd = MarkArchived(queue, now_ms, batch, _read_seqs(r))
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
