"""Rebuild every group's durable state from the WAL segments of one directory.

Rules (record framing: `raftlog.storage.record`):

- Segments are replayed in sequence order; every record is checked (length, crc32) and decoded.
- The first bad frame of the **last** segment is a torn tail when nothing valid follows it
  (its length runs past the end of the file, its checksum fails, or only zeros/garbage remain):
  the file is truncated there and fsynced. Nothing acknowledged can be lost that way, because an
  acknowledged record is followed only by records written after its fsync.
- A bad frame followed by a valid one, a bad frame in any other segment, or a frame with a valid
  checksum that does not decode is corruption: `CorruptRecord` names the file and the offset of
  the damaged frame. Nothing is ever skipped silently.
- A frame with a valid checksum holding a newer release's record (a type, flag or entry kind
  this release does not know, `raftlog.storage.record.NewerRecord`) is neither: `NewerFormat`
  names the file, the offset and what was found. It is never truncated (that would lose data a
  newer release wrote and may have acknowledged).

With ``salvage`` (`recover`'s callback; the host passes one when it can repair groups from
their other replicas), damage that is not a torn tail is not raised: the callback is told where
it is and which groups had records before it (each may have lost records after it), then the
damaged segment is cut at the damaged frame and every later segment deleted. What remains is
the directory as it was before the damaged write: a consistent older state, like a disk rolled
back, which the groups' recovery guard and rejoin mode are built for. A record of a newer
release is never salvaged.

Known limit: an entry whose data contains a complete, valid WAL frame inside a torn last record
would be mistaken for "valid data follows" and reported as corruption (loud, never silent loss).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from raftlog.core.types import ConfState, Entry, HardState, SnapshotMeta
from raftlog.errors import CorruptRecord, NewerFormat
from raftlog.storage.files import WAL_NAME, fsync_dir, wal_name
from raftlog.storage.record import (
    FRAME_PREFIX_SIZE,
    ConfRecord,
    DropRecord,
    EntriesRecord,
    FrameStatus,
    HardStateRecord,
    NewerRecord,
    Record,
    check_frame,
    decode_body,
    find_valid_frame,
)
from raftlog.storage.segments import SegmentIndex


@dataclass(frozen=True, slots=True)
class RecoveredGroup:
    """One group's durable state. ``entries`` are consecutive and start at ``snapshot.index+1``."""

    hard_state: HardState
    conf: ConfState
    snapshot: SnapshotMeta
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class TornTail:
    """Where recovery cut the last segment, and why."""

    path: str
    offset: int
    dropped_bytes: int
    reason: str


@dataclass(frozen=True, slots=True)
class Damage:
    """Damage before the tail that recovery cut away (``salvage``): the file and offset of the
    first damaged frame, why, the later segments deleted, and the groups that may have lost
    records (every group seen before the damage)."""

    path: str
    offset: int
    reason: str
    dropped_segments: tuple[int, ...]
    groups: tuple[int, ...]


Salvage = Callable[[Damage], None]
"""Told of damage (before anything is cut) so that the groups can be marked for repair."""


@dataclass(frozen=True, slots=True)
class Recovery:
    """Everything recovery learned about a directory."""

    groups: Mapping[int, RecoveredGroup]
    segments: tuple[int, ...]
    """Segment sequence numbers found, oldest first."""
    last_segment_size: int
    """Size of the last segment after any truncation (0 when there is none)."""
    index: SegmentIndex
    torn_tail: TornTail | None
    damage: Damage | None = None
    """What ``salvage`` cut away, if anything."""


class _GroupReplay:
    """Mutable replay state of one group; mirrors ``MemoryStorage`` write semantics.

    Deleted segments cut off the *beginning* of a group's record history: the surviving records
    are a suffix of it, so the first entries replayed may not connect to the snapshot point yet
    (they are the tail of a log whose head was snapshotted, or entries later voided by an
    installed snapshot or a DROP). Such a *detached* run is kept as the log, starting at
    ``base + 1``; a later snapshot marker inside or before the run anchors it. `freeze` insists
    that the final log starts right after the snapshot: anything else is missing data.
    """

    __slots__ = ("base", "conf", "entries", "hard_state", "origin", "snapshot")

    def __init__(self) -> None:
        self.hard_state = HardState()
        self.conf = ConfState()
        self.snapshot = SnapshotMeta()
        self.base = 0  # index before entries[0]; == snapshot.index unless the run is detached
        self.entries: list[Entry] = []
        self.origin = ("", 0)  # where the current run started, for error reports

    def last_index(self) -> int:
        return self.base + len(self.entries)

    def apply(self, record: Record, path: str, offset: int) -> None:
        if isinstance(record, EntriesRecord):
            entries = [e for e in record.entries if e.index > self.snapshot.index]
            if not entries:
                return
            first = entries[0].index
            if first > self.last_index() + 1 or first <= self.base:
                # History before this record is gone (deleted segment) or this replaces a
                # detached run from below: start a new run here.
                self.base = first - 1
                self.entries = entries
                self.origin = (path, offset)
            else:
                del self.entries[first - self.base - 1 :]
                self.entries.extend(entries)
        elif isinstance(record, HardStateRecord):
            self.hard_state = record.hard_state
        elif isinstance(record, ConfRecord):
            self.conf = record.conf
        elif not isinstance(record, DropRecord):
            meta = record.meta
            if meta.index <= self.snapshot.index:
                return
            at = meta.index
            # The configuration in force at the snapshot point, created here or installed: the
            # core re-applies only the changes of later entries when it applies them again.
            self.conf = meta.conf
            if record.installed:
                self.base, self.entries = at, []
            elif at <= self.base:
                pass  # a detached run starting after the snapshot point: keep it
            elif at <= self.last_index() and self.entries[at - self.base - 1].term == meta.term:
                self.entries = self.entries[at - self.base :]
                self.base = at
            else:
                self.base, self.entries = at, []
            self.snapshot = meta

    def freeze(self) -> RecoveredGroup:
        if self.base != self.snapshot.index:
            path, offset = self.origin
            raise CorruptRecord(
                path,
                offset,
                f"entries {self.snapshot.index + 1}..{self.base} are missing "
                f"(snapshot at {self.snapshot.index}, log resumes at {self.base + 1})",
            )
        # A snapshot's configuration wins over a `ConfRecord`: files written before segment
        # heads tracked created snapshots restate an older configuration after them.
        conf = self.snapshot.conf if self.snapshot.index else self.conf
        return RecoveredGroup(self.hard_state, conf, self.snapshot, tuple(self.entries))


def list_segments(directory: str) -> list[int]:
    """Sequence numbers of the WAL segments in ``directory``, oldest first."""
    seqs = []
    for name in os.listdir(directory):
        m = WAL_NAME.match(name)
        if m:
            seqs.append(int(m.group(1)))
    return sorted(seqs)


def _truncate(path: str, size: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, size)
        os.fsync(fd)
    finally:
        os.close(fd)


def recover(
    directory: str, max_body: int, *, repair: bool = True, salvage: Salvage | None = None
) -> Recovery:
    """Replay every segment of ``directory``; truncate a torn tail of the last one if ``repair``.

    Raises `CorruptRecord` for damage that is not a torn tail (unless ``salvage`` is given: see
    the module docstring), `NewerFormat` for an intact record of a newer release.
    """
    seqs = list_segments(directory)
    index = SegmentIndex()
    replays: dict[int, _GroupReplay] = {}
    torn: TornTail | None = None
    damage: Damage | None = None
    last_size = 0
    for pos, seq in enumerate(seqs):
        path = os.path.join(directory, wal_name(seq))
        is_last = pos == len(seqs) - 1
        with open(path, "rb") as f:
            buf = f.read()
        view = memoryview(buf)
        index.add_segment(seq)
        offset = 0
        bad: CorruptRecord | None = None
        while offset < len(buf):
            status, end = check_frame(view, offset, max_body)
            if status is not FrameStatus.OK:
                reason = f"bad frame ({status.name.lower()})"
                follower = find_valid_frame(view, offset + 1, max_body) if is_last else None
                if not is_last:
                    bad = CorruptRecord(path, offset, f"{reason} in a segment that is not the last")
                elif follower is not None:
                    bad = CorruptRecord(
                        path, offset, f"{reason} followed by a valid record at {follower}"
                    )
                else:
                    torn = TornTail(path, offset, len(buf) - offset, reason)
                    if repair:
                        _truncate(path, offset)
                break
            try:
                group, record = decode_body(view, offset + FRAME_PREFIX_SIZE, end)
            except NewerRecord as exc:
                found = f"a record with unknown {exc.found}"
                raise NewerFormat(f"{path} at offset {offset}", found, exc.known) from None
            except ValueError as exc:
                bad = CorruptRecord(path, offset, f"undecodable record: {exc}")
                break
            if isinstance(record, DropRecord):
                replays.pop(group, None)
            else:
                replays.setdefault(group, _GroupReplay()).apply(record, path, offset)
            index.note(seq, group, record)
            offset = end
        if bad is not None:
            if salvage is None:
                raise bad
            later = tuple(seqs[pos + 1 :])
            damage = Damage(path, offset, str(bad), later, tuple(sorted(replays)))
            salvage(damage)
            _cut(directory, path, offset, later)
            seqs = seqs[: pos + 1]
            last_size = offset
            break
        if is_last:
            last_size = offset
    groups = {g: r.freeze() for g, r in replays.items()}
    return Recovery(groups, tuple(seqs), last_size, index, torn, damage)


def _cut(directory: str, path: str, offset: int, later: tuple[int, ...]) -> None:
    """Salvage: the damaged segment ends at ``offset``; the ``later`` segments go (durably)."""
    _truncate(path, offset)
    for seq in later:
        os.unlink(os.path.join(directory, wal_name(seq)))
    if later:
        fsync_dir(directory)
