"""Crash tests: cut or damage a small WAL file at every byte offset and reopen it.

- Truncation must always recover a valid prefix of the acknowledged records, and leave the file
  cut back to the end of that prefix.
- A flipped byte in the last record is a torn tail: the record is dropped and the file cut there.
- A flipped byte anywhere before it is corruption: `CorruptRecord` names the file and the offset
  of the damaged record.
- In no case does recovery return a record that was not written.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from storage_helpers import assert_same, oracle

from raftlog.core.types import ConfState, Entry, EntryKind, HardState, SnapshotMeta
from raftlog.errors import CorruptRecord, NewerFormat
from raftlog.storage import (
    ConfRecord,
    EntriesRecord,
    GroupLog,
    HardStateRecord,
    Record,
    SnapshotRecord,
    Wal,
    WalOptions,
)
from raftlog.storage.files import (
    atomic_write,
    decode_snapshot_file,
    encode_snapshot_file,
    snapshot_name,
    wal_name,
)
from raftlog.storage.record import FRAME_PREFIX_SIZE, FrameStatus, check_frame
from raftlog.storage.repairs import REPAIR_FILE, RepairMarks

CONF = ConfState((1, 2, 3))

# Submissions (each acknowledged before the next) of three groups sharing one WAL.
SUBMISSIONS: list[tuple[int, list[Record]]] = [
    (1, [ConfRecord(CONF)]),
    (2, [ConfRecord(CONF)]),
    (
        1,
        [
            EntriesRecord((Entry(1, 1), Entry(1, 2, data=b"ab"))),
            HardStateRecord(HardState(1, 1, 0)),
        ],
    ),
    (2, [EntriesRecord((Entry(1, 1, data=b"x"), Entry(1, 2), Entry(1, 3, data=b"yz")))]),
    (3, [EntriesRecord((Entry(2, 1, EntryKind.CONF, b"c" * 9),))]),
    (1, [HardStateRecord(HardState(1, 1, 2))]),
    (2, [EntriesRecord((Entry(2, 2, data=b"new"),)), HardStateRecord(HardState(2, 2, 1))]),
    (1, [SnapshotRecord(SnapshotMeta(2, 1, CONF), installed=False)]),
    (3, [EntriesRecord((Entry(2, 2, data=b"q"),)), HardStateRecord(HardState(2, 3, 2))]),
    (1, [EntriesRecord((Entry(1, 3, data=b"after-snapshot"),))]),
    (2, [HardStateRecord(HardState(2, 2, 2))]),
]
SNAP_DATA = b"state machine image"


def _frames(buf: bytes) -> list[tuple[int, int]]:
    """(start, end) of every frame in a clean WAL file."""
    out, offset = [], 0
    while offset < len(buf):
        status, end = check_frame(buf, offset, 1 << 20)
        assert status is FrameStatus.OK
        out.append((offset, end))
        offset = end
    return out


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, list[tuple[int, Record]]]:
    """The bytes of a WAL written through `Wal`, and the records in it, in order."""
    d = tmp_path_factory.mktemp("golden")
    written: list[tuple[int, Record]] = []
    with Wal.open(str(d)) as wal:
        for group, records in SUBMISSIONS:
            for rec in records:
                if isinstance(rec, SnapshotRecord):  # its data file is committed first
                    m = rec.meta
                    data = encode_snapshot_file(group, m.index, m.term, SNAP_DATA)
                    atomic_write(wal.snapshot_path(group, m.index), data)
            wal.submit(group, records).result(10)
            written.extend((group, r) for r in records)
    assert [p.name for p in d.iterdir() if p.name.startswith("wal-")] == [wal_name(1)]
    return (d / wal_name(1)).read_bytes(), written


def _reopen(d: Path, content: bytes) -> Wal:
    """Reset ``d`` to a crash image whose WAL holds ``content`` and open it."""
    (d / wal_name(1)).write_bytes(content)
    # Group 1's snapshot file as the golden run left it (recovery deletes it when the cut
    # drops its marker, so restore it every time).
    (d / "snap").mkdir(exist_ok=True)
    atomic_write(str(d / "snap" / snapshot_name(1, 2)), encode_snapshot_file(1, 2, 1, SNAP_DATA))
    return Wal.open(str(d), WalOptions())


def _check_prefix(wal: Wal, written: list[tuple[int, Record]], n_records: int) -> None:
    want = oracle(written[:n_records])
    assert wal.groups() == tuple(sorted(want))
    for group, expected in want.items():
        assert_same(GroupLog(wal, group), expected)


def test_golden_file_round_trips(golden: tuple[bytes, list[tuple[int, Record]]]) -> None:
    content, written = golden
    assert len(_frames(content)) == len(written)


def test_truncate_at_every_offset(
    tmp_path: Path, golden: tuple[bytes, list[tuple[int, Record]]]
) -> None:
    content, written = golden
    frames = _frames(content)
    for cut in range(len(content) + 1):
        complete = sum(1 for _, end in frames if end <= cut)
        valid_end = frames[complete - 1][1] if complete else 0
        with _reopen(tmp_path, content[:cut]) as wal:
            assert (tmp_path / wal_name(1)).stat().st_size == valid_end, cut
            assert (wal.torn_tail is not None) == (cut != valid_end)
            _check_prefix(wal, written, complete)


def test_flip_at_every_offset(
    tmp_path: Path, golden: tuple[bytes, list[tuple[int, Record]]]
) -> None:
    content, written = golden
    frames = _frames(content)
    path = str(tmp_path / wal_name(1))
    for pos in range(len(content)):
        damaged = bytearray(content)
        damaged[pos] ^= 0xFF
        victim = next(i for i, (start, end) in enumerate(frames) if start <= pos < end)
        start = frames[victim][0]
        if victim == len(frames) - 1:
            with _reopen(tmp_path, bytes(damaged)) as wal:
                assert os.path.getsize(path) == start, pos
                assert wal.torn_tail is not None and wal.torn_tail.offset == start
                _check_prefix(wal, written, victim)
        else:
            with pytest.raises(CorruptRecord) as err:
                _reopen(tmp_path, bytes(damaged)).close()
            assert (err.value.path, err.value.offset) == (path, start), pos
            assert os.path.getsize(path) == len(content)  # damage is never "repaired" away


def test_zero_fill_after_tail_is_torn(
    tmp_path: Path, golden: tuple[bytes, list[tuple[int, Record]]]
) -> None:
    """A preallocated or partially flushed tail reads as zeros: cut, never an error."""
    content, written = golden
    frames = _frames(content)
    for zeros in (1, FRAME_PREFIX_SIZE, 100, 5000):
        with _reopen(tmp_path, content + bytes(zeros)) as wal:
            assert os.path.getsize(tmp_path / wal_name(1)) == len(content)
            _check_prefix(wal, written, len(frames))


def test_damage_in_an_older_segment_is_corruption(
    tmp_path: Path, golden: tuple[bytes, list[tuple[int, Record]]]
) -> None:
    """Only the last segment can have a torn tail: a torn-looking end elsewhere is damage."""
    content, _ = golden
    (tmp_path / wal_name(1)).write_bytes(content[:-3])
    (tmp_path / wal_name(2)).write_bytes(b"")
    with pytest.raises(CorruptRecord) as err:
        Wal.open(str(tmp_path)).close()
    assert err.value.path == str(tmp_path / wal_name(1))
    assert err.value.offset == _frames(content)[-1][0]


def test_a_cut_tail_is_reported(
    tmp_path: Path,
    golden: tuple[bytes, list[tuple[int, Record]]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The cut is silent for the data (a torn write is normal) but never for the operator: the
    same cut hides damage or a rollback at the end of the file."""
    content, _ = golden
    last_start = _frames(content)[-1][0]
    with caplog.at_level(logging.WARNING, logger="raftlog.storage"):
        _reopen(tmp_path, content[:-3]).close()
    assert f"cut {len(content) - 3 - last_start} bytes at offset {last_start}" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="raftlog.storage"):
        _reopen(tmp_path, content[:last_start]).close()
    assert "cut" not in caplog.text


def test_salvage_cuts_damage_at_every_offset_and_marks_the_groups(
    tmp_path: Path, golden: tuple[bytes, list[tuple[int, Record]]]
) -> None:
    """With ``salvage``, a flipped byte before the tail is cut like a torn tail: recovery keeps
    exactly the records before the damaged one (never a record that was not written), deletes
    the later segments, and marks every group seen before the damage for repair, durably and
    before anything is cut."""
    content, written = golden
    frames = _frames(content)
    for pos in range(0, len(content), 7):
        victim = next(i for i, (start, end) in enumerate(frames) if start <= pos < end)
        if victim == len(frames) - 1:
            continue  # a torn tail: covered above
        start = frames[victim][0]
        damaged = bytearray(content)
        damaged[pos] ^= 0xFF
        for stale in tmp_path.glob("wal-*"):
            stale.unlink()
        (tmp_path / REPAIR_FILE).unlink(missing_ok=True)
        (tmp_path / wal_name(2)).write_bytes(content)  # a later segment: deleted by the cut
        (tmp_path / wal_name(1)).write_bytes(bytes(damaged))
        (tmp_path / "snap").mkdir(exist_ok=True)
        snap = encode_snapshot_file(1, 2, 1, SNAP_DATA)
        atomic_write(str(tmp_path / "snap" / snapshot_name(1, 2)), snap)
        with Wal.open(str(tmp_path), WalOptions(salvage=True)) as wal:
            assert wal.damage is not None and wal.damage.offset == start, pos
            assert wal.damage.dropped_segments == (2,)
            assert not (tmp_path / wal_name(2)).exists()
            assert os.path.getsize(tmp_path / wal_name(1)) == start
            _check_prefix(wal, written, victim)
            seen = {g for g, _ in written[:victim]}
            assert set(wal.repairs.marked()) == seen, pos
            assert set(RepairMarks(str(tmp_path)).marked()) == seen  # durable


def test_a_repair_record_of_a_newer_release_is_refused(tmp_path: Path) -> None:
    marks = RepairMarks(str(tmp_path))
    marks.mark(4, "snapshot damaged", 1000)
    again = marks.mark(4, "snapshot damaged again", 2000)
    assert (again.since_ms, again.count) == (1000, 2)
    raw = (tmp_path / REPAIR_FILE).read_text().replace('"version": 1', '"version": 9')
    (tmp_path / REPAIR_FILE).write_text(raw)
    with pytest.raises(NewerFormat, match="repair record version 9"):
        RepairMarks(str(tmp_path))
    (tmp_path / REPAIR_FILE).write_text("{not json")
    with pytest.raises(CorruptRecord, match="unreadable repair record"):
        RepairMarks(str(tmp_path))
    (tmp_path / REPAIR_FILE).unlink()
    assert RepairMarks(str(tmp_path)).marked() == {}


@pytest.mark.parametrize("bit", range(8))
def test_a_flipped_bit_in_a_snapshot_magic_is_damage_not_a_newer_release(
    tmp_path: Path, bit: int
) -> None:
    """The magic is outside the checksum: a flipped bit of its version byte must read as
    damage (repaired from the replicas), never as a file of a newer release (which stops the
    node: the chaos soak met this on seed 26145)."""
    raw = bytearray(encode_snapshot_file(1, 2, 1, SNAP_DATA))
    raw[3] ^= 1 << bit
    with pytest.raises(CorruptRecord, match="magic"):
        decode_snapshot_file(str(tmp_path / "s.snap"), bytes(raw), 1, 2, 1)
