"""WAL record framing and payload codecs. Pure: no I/O, no clocks.

A frame on disk is::

    [u32 length][u32 crc32][u8 type][u64 group][payload]

all big endian. ``length`` counts the bytes after the two u32 fields (type + group + payload);
``crc32`` is ``zlib.crc32`` over those same bytes. The length field itself is not covered by the
checksum: a damaged length makes the checksum run over the wrong bytes, which fails it (or runs
past the end of the file, which recovery then has to tell apart from a torn write).

Payloads are fixed-layout ``struct`` encodings; entry data travels as raw bytes. Nothing here
ever unpickles. Decoders raise ``ValueError`` with a reason; the I/O layer turns that into
`raftlog.errors.CorruptRecord` naming the file and offset.

Versions: the frame has no version field; this layout is version 1 (`RECORD_LAYOUT_VERSION`,
implicit, written unchanged since release 0.1.0). What a later release adds is recognisable in
a frame whose checksum holds: a record type beyond `RecordType` (this release knows 1-5), a
snapshot flag bit other than "installed", or an entry kind beyond `EntryKind`. Those raise
`NewerRecord` (a ``ValueError``), which recovery reports as `raftlog.errors.NewerFormat`, never
as a torn tail: the record is intact and truncating it would lose data.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from enum import IntEnum
from typing import ClassVar

from raftlog.core.types import ConfState, Entry, EntryKind, HardState, SnapshotMeta

_FRAME = struct.Struct(">II")  # length, crc32
_BODY_HEAD = struct.Struct(">BQ")  # type, group
_U64 = (1 << 64) - 1

FRAME_PREFIX_SIZE = _FRAME.size
"""Bytes before the checksummed body: the length and checksum fields."""
BODY_HEADER_SIZE = _BODY_HEAD.size
"""Smallest legal ``length`` value: a body with an empty payload."""
HEADER_SIZE = FRAME_PREFIX_SIZE + BODY_HEADER_SIZE
DEFAULT_MAX_BODY = 64 << 20
"""Default upper bound on a frame's body; larger lengths are rejected by encoder and decoder."""

_ENTRIES_HEAD = struct.Struct(">QI")  # first index, count
_ENTRY_HEAD = struct.Struct(">QBI")  # term, kind, data length
_HARD_STATE = struct.Struct(">QQQ")  # term, vote, commit
_SNAPSHOT_HEAD = struct.Struct(">QQB")  # index, term, flags
_CONF_HEAD = struct.Struct(">II")  # number of voters, number of learners
_SNAP_INSTALLED = 0x01


RECORD_LAYOUT_VERSION = 1
"""The frame layout above; implicit (no byte carries it). A later layout is told apart by a
record type, snapshot flag or entry kind this release does not know (see the module docstring)."""


class NewerRecord(ValueError):
    """An intact record in a layout of a newer release (an unknown type, flag or entry kind)."""

    def __init__(self, found: str, known: str) -> None:
        super().__init__(f"unknown {found}: a newer release's record (this release reads {known})")
        self.found = found
        self.known = known


class RecordType(IntEnum):
    """What a frame's payload holds."""

    ENTRIES = 1
    HARD_STATE = 2
    SNAPSHOT = 3
    CONF = 4
    DROP = 5


@dataclass(frozen=True, slots=True)
class EntriesRecord:
    """A non-empty batch of consecutive entries of one group.

    Replay semantics are those of ``MemoryStorage.append``: the first entry replaces the stored
    entry at its index and everything after it.
    """

    entries: tuple[Entry, ...]
    record_type: ClassVar[RecordType] = RecordType.ENTRIES


@dataclass(frozen=True, slots=True)
class HardStateRecord:
    """The group's hard state from this point on."""

    hard_state: HardState
    record_type: ClassVar[RecordType] = RecordType.HARD_STATE


@dataclass(frozen=True, slots=True)
class SnapshotRecord:
    """The group has a snapshot at ``meta`` (its data lives in a separate, already durable file).

    ``installed`` snapshots (received from a leader) discard the whole log, like
    ``MemoryStorage.apply_snapshot``; created ones (taken locally) keep the entries after
    ``meta.index`` when the log holds ``meta.index`` with ``meta.term``.
    """

    meta: SnapshotMeta
    installed: bool
    record_type: ClassVar[RecordType] = RecordType.SNAPSHOT


@dataclass(frozen=True, slots=True)
class ConfRecord:
    """The group's membership configuration from this point on (a segment head restates the
    latest snapshot's; a later snapshot marker replaces it, and on recovery a snapshot's
    configuration wins, see `raftlog.storage.recovery`)."""

    conf: ConfState
    record_type: ClassVar[RecordType] = RecordType.CONF


@dataclass(frozen=True, slots=True)
class DropRecord:
    """The group left this directory: everything recorded for it before is void."""

    record_type: ClassVar[RecordType] = RecordType.DROP


Record = EntriesRecord | HardStateRecord | SnapshotRecord | ConfRecord | DropRecord


class FrameStatus(IntEnum):
    """Outcome of checking the frame at an offset without decoding its payload."""

    OK = 0
    SHORT = 1
    """The header or the body runs past the end of the buffer."""
    BAD_LENGTH = 2
    """The length field is below the minimum or above the limit."""
    BAD_CHECKSUM = 3


# -- encoding -------------------------------------------------------------------------------------


def _check_u64(value: int, what: str) -> None:
    if not 0 <= value <= _U64:
        raise ValueError(f"{what} {value} does not fit in a u64")


def _conf_parts(conf: ConfState) -> list[bytes]:
    for node in conf.members():
        _check_u64(node, "node id")
    ids = conf.voters + conf.learners
    return [
        _CONF_HEAD.pack(len(conf.voters), len(conf.learners)),
        struct.pack(f">{len(ids)}Q", *ids),
    ]


def _payload_parts(record: Record) -> list[bytes]:
    if isinstance(record, EntriesRecord):
        entries = record.entries
        if not entries:
            raise ValueError("an ENTRIES record needs at least one entry")
        first = entries[0].index
        parts = [_ENTRIES_HEAD.pack(first, len(entries))]
        for i, e in enumerate(entries):
            if e.index != first + i:
                raise ValueError(f"entries are not consecutive: {e.index} at position {i}")
            if e.index < 1 or e.term < 1:
                raise ValueError(f"entry index and term must be >= 1: {e.index}/{e.term}")
            _check_u64(e.index, "entry index")
            _check_u64(e.term, "entry term")
            parts.append(_ENTRY_HEAD.pack(e.term, int(e.kind), len(e.data)))
            parts.append(e.data)
        return parts
    if isinstance(record, HardStateRecord):
        hs = record.hard_state
        for v, what in ((hs.term, "term"), (hs.vote, "vote"), (hs.commit, "commit")):
            _check_u64(v, what)
        return [_HARD_STATE.pack(hs.term, hs.vote, hs.commit)]
    if isinstance(record, SnapshotRecord):
        m = record.meta
        _check_u64(m.index, "snapshot index")
        _check_u64(m.term, "snapshot term")
        flags = _SNAP_INSTALLED if record.installed else 0
        return [_SNAPSHOT_HEAD.pack(m.index, m.term, flags), *_conf_parts(m.conf)]
    if isinstance(record, ConfRecord):
        return _conf_parts(record.conf)
    return []


def encode_record(group: int, record: Record, max_body: int = DEFAULT_MAX_BODY) -> bytes:
    """The framed bytes of ``record`` for ``group``.

    Raises ``ValueError`` for a malformed record (empty or non-consecutive entries, values that
    do not fit their fields) or a body larger than ``max_body``.
    """
    _check_u64(group, "group id")
    parts = [_BODY_HEAD.pack(int(record.record_type), group), *_payload_parts(record)]
    length = sum(len(p) for p in parts)
    if length > max_body:
        raise ValueError(f"record body of {length} bytes exceeds the limit of {max_body}")
    crc = 0
    for p in parts:
        crc = zlib.crc32(p, crc)
    return b"".join([_FRAME.pack(length, crc), *parts])


# -- decoding -------------------------------------------------------------------------------------


def check_frame(buf: bytes | memoryview, offset: int, max_body: int) -> tuple[FrameStatus, int]:
    """Check the frame starting at ``offset``: ``(status, end offset)``; the end is 0 unless OK."""
    size = len(buf)
    body_start = offset + FRAME_PREFIX_SIZE
    if body_start > size:
        return FrameStatus.SHORT, 0
    length, crc = _FRAME.unpack_from(buf, offset)
    if length < BODY_HEADER_SIZE or length > max_body:
        return FrameStatus.BAD_LENGTH, 0
    end = body_start + length
    if end > size:
        return FrameStatus.SHORT, 0
    if zlib.crc32(memoryview(buf)[body_start:end]) != crc:
        return FrameStatus.BAD_CHECKSUM, 0
    return FrameStatus.OK, end


def find_valid_frame(buf: bytes | memoryview, start: int, max_body: int) -> int | None:
    """The first offset ``>= start`` holding a frame that passes `check_frame`, or ``None``.

    Used by recovery to tell a torn tail (nothing valid follows) from damage in the middle.
    """
    last = len(buf) - HEADER_SIZE
    for offset in range(start, last + 1):
        status, _ = check_frame(buf, offset, max_body)
        if status is FrameStatus.OK:
            return offset
    return None


def _decode_conf(view: memoryview, pos: int, end: int) -> tuple[ConfState, int]:
    if pos + _CONF_HEAD.size > end:
        raise ValueError("conf state truncated")
    n_voters, n_learners = _CONF_HEAD.unpack_from(view, pos)
    pos += _CONF_HEAD.size
    n = n_voters + n_learners
    if pos + 8 * n > end:
        raise ValueError(f"conf state claims {n} nodes but the payload is too short")
    ids = struct.unpack_from(f">{n}Q", view, pos)
    pos += 8 * n
    voters, learners = ids[:n_voters], ids[n_voters:]
    if list(voters) != sorted(set(voters)) or list(learners) != sorted(set(learners)):
        raise ValueError("conf state node lists are not sorted and unique")
    if set(voters) & set(learners):
        raise ValueError("conf state voters and learners overlap")
    return ConfState(tuple(voters), tuple(learners)), pos


def _decode_entries(view: memoryview, pos: int, end: int) -> tuple[Entry, ...]:
    if pos + _ENTRIES_HEAD.size > end:
        raise ValueError("entries header truncated")
    first, count = _ENTRIES_HEAD.unpack_from(view, pos)
    pos += _ENTRIES_HEAD.size
    if count == 0 or first == 0:
        raise ValueError(f"bad entries header: first index {first}, count {count}")
    out: list[Entry] = []
    for i in range(count):
        if pos + _ENTRY_HEAD.size > end:
            raise ValueError(f"entry {i} header truncated")
        term, kind, n = _ENTRY_HEAD.unpack_from(view, pos)
        pos += _ENTRY_HEAD.size
        if term == 0:
            raise ValueError(f"entry {first + i} has term 0")
        try:
            entry_kind = EntryKind(kind)
        except ValueError:
            known = ", ".join(str(int(k)) for k in EntryKind)
            raise NewerRecord(f"kind {kind} of entry {first + i}", f"entry kinds {known}") from None
        if pos + n > end:
            raise ValueError(f"entry {first + i} data truncated")
        out.append(Entry(term, first + i, entry_kind, bytes(view[pos : pos + n])))
        pos += n
    if pos != end:
        raise ValueError(f"{end - pos} trailing bytes after {count} entries")
    return tuple(out)


def decode_body(buf: bytes | memoryview, start: int, end: int) -> tuple[int, Record]:
    """Decode the checksummed body ``buf[start:end]`` of a frame into ``(group, record)``.

    Raises ``ValueError`` when the body does not decode to exactly one valid record:
    `NewerRecord` when it is a later release's record (see the module docstring).
    """
    view = memoryview(buf)
    if end - start < BODY_HEADER_SIZE:
        raise ValueError("record body shorter than its header")
    rtype, group = _BODY_HEAD.unpack_from(view, start)
    pos = start + BODY_HEADER_SIZE
    try:
        kind = RecordType(rtype)
    except ValueError:
        raise NewerRecord(
            f"record type {rtype}", f"record types {min(RecordType)}-{max(RecordType)}"
        ) from None
    record: Record
    if kind is RecordType.ENTRIES:
        return group, EntriesRecord(_decode_entries(view, pos, end))
    if kind is RecordType.HARD_STATE:
        if end - pos != _HARD_STATE.size:
            raise ValueError(f"hard state payload is {end - pos} bytes, expected 24")
        record = HardStateRecord(HardState(*_HARD_STATE.unpack_from(view, pos)))
    elif kind is RecordType.SNAPSHOT:
        if pos + _SNAPSHOT_HEAD.size > end:
            raise ValueError("snapshot payload truncated")
        index, term, flags = _SNAPSHOT_HEAD.unpack_from(view, pos)
        if flags & ~_SNAP_INSTALLED:
            raise NewerRecord(f"snapshot flags {flags:#x}", f"flag {_SNAP_INSTALLED:#x}")
        conf, pos = _decode_conf(view, pos + _SNAPSHOT_HEAD.size, end)
        if pos != end:
            raise ValueError("trailing bytes after snapshot record")
        record = SnapshotRecord(SnapshotMeta(index, term, conf), bool(flags & _SNAP_INSTALLED))
    elif kind is RecordType.CONF:
        conf, pos = _decode_conf(view, pos, end)
        if pos != end:
            raise ValueError("trailing bytes after conf record")
        record = ConfRecord(conf)
    else:
        if pos != end:
            raise ValueError("a DROP record has no payload")
        record = DropRecord()
    return group, record


def decode_record(
    buf: bytes | memoryview, offset: int = 0, max_body: int = DEFAULT_MAX_BODY
) -> tuple[int, Record, int]:
    """Check and decode the frame at ``offset``: ``(group, record, end offset)``.

    Raises ``ValueError`` naming the problem when the frame is short, damaged or undecodable.
    """
    status, end = check_frame(buf, offset, max_body)
    if status is not FrameStatus.OK:
        raise ValueError(f"frame at offset {offset}: {status.name.lower()}")
    group, record = decode_body(buf, offset + FRAME_PREFIX_SIZE, end)
    return group, record, end
