"""Segment indexes (`cmq.fsm.segindex`): written for sealed segments (and the active one's
prefix) only while the gate is open, used by restore instead of scanning the records, and
never trusted over the segment: a stale, damaged or missing index falls back to the scan."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from cmq.errors import SegmentDamaged
from cmq.fsm.framed import FramedStore, Key
from cmq.fsm.machine import QueueMachine
from cmq.fsm.segindex import decode_index
from cmq.fsm.segments import FileSegmentStore, MemorySegmentStore
from cmq.fsm.store import SegmentLayout, StoredMessage, encode_record
from tests.cmq.fsm.harness import two_queues

T0 = 1_700_000_000_000
Store = MemorySegmentStore | FileSegmentStore


def message(seq: int) -> StoredMessage:
    return StoredMessage(f"id{seq}", seq, b"body-%d" % seq, False, (), T0 + seq)


def append(store: FramedStore, queue: str, segment: int, seqs: range) -> int:
    msgs = [message(s) for s in seqs]
    return store.append(queue, segment, msgs, [encode_record(m, T0 + 2 * m.seq) for m in msgs])


@pytest.fixture(params=["memory", "file"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def new_store(kind: str, root: Path, *, indexes: bool = True, step: int = 1 << 20) -> Store:
    if kind == "memory":
        return MemorySegmentStore(cache_bytes=0, indexes=indexes, active_index_records=step)
    return FileSegmentStore(root, cache_bytes=0, indexes=indexes, active_index_records=step)


def reopen(store: Store, *, indexes: bool = True) -> Store:
    """The same disk after a restart (the memory store is its own disk)."""
    if isinstance(store, MemorySegmentStore):
        return store
    store.close()
    return FileSegmentStore(store.directory, cache_bytes=0, indexes=indexes)


def index_bytes(store: Store, key: Key) -> bytes | None:
    if isinstance(store, MemorySegmentStore):
        return store.indexes.get(key)
    path = Path(store.directory, key[0], f"{key[1]:020d}.idx")
    return path.read_bytes() if path.exists() else None


def set_index(store: Store, key: Key, data: bytes) -> None:
    if isinstance(store, MemorySegmentStore):
        store.indexes[key] = data
    else:
        Path(store.directory, key[0], f"{key[1]:020d}.idx").write_bytes(data)


def drop_indexes(store: Store) -> None:
    if isinstance(store, MemorySegmentStore):
        store.indexes.clear()
    else:
        for p in Path(store.directory).rglob("*.idx"):
            p.unlink()


def flip(store: Store, key: Key, offset: int) -> None:
    """Damage one byte of a segment."""
    if isinstance(store, MemorySegmentStore):
        store.segments[key][offset] ^= 0xFF
        return
    path = Path(store.directory, key[0], f"{key[1]:020d}.seg")
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


# -- the store ------------------------------------------------------------------------------------


def test_an_index_is_written_at_the_flush_after_the_seal_only_when_enabled(
    kind: str, tmp_path: Path
) -> None:
    for enabled in (True, False):
        store = new_store(kind, tmp_path / str(enabled), indexes=enabled)
        size = append(store, "q", 1, range(1, 6))
        store.seal("q", 1)
        assert index_bytes(store, ("q", 1)) is None  # not before the segment is durable
        store.flush()
        raw = index_bytes(store, ("q", 1))
        if not enabled:
            assert raw is None
            continue
        assert raw is not None
        index = decode_index(raw)
        assert (index.first_seq, index.count, index.size) == (1, 5, size)
        assert list(index.sent_at) == [T0 + s for s in range(1, 6)]
        assert list(index.visible_at) == [T0 + 2 * s for s in range(1, 6)]


def test_the_gate_is_asked_when_a_segment_is_created(kind: str, tmp_path: Path) -> None:
    store = new_store(kind, tmp_path, indexes=False)
    gate = [False]
    store.index_when(lambda: gate[0])
    append(store, "q", 1, range(1, 3))
    gate[0] = True  # enabled while segment 1 is open: its times were not collected
    store.seal("q", 1)
    append(store, "q", 3, range(3, 5))
    store.seal("q", 3)
    store.flush()
    assert index_bytes(store, ("q", 1)) is None
    assert index_bytes(store, ("q", 3)) is not None


def test_restore_reads_the_index_instead_of_the_records(kind: str, tmp_path: Path) -> None:
    store = new_store(kind, tmp_path)
    size = append(store, "q", 1, range(1, 11))
    store.seal("q", 1)
    store.flush()
    flip(store, ("q", 1), size // 2)  # a record in the middle: only a scan reads it
    layout = {"q": [SegmentLayout(1, 10, size, sealed=True)]}
    store = reopen(store)
    rec = store.recover(layout)
    assert store.last_recovery.indexed == 1 and store.last_recovery.scanned == 0
    assert list(rec["q"][0].sent_at) == [T0 + s for s in range(1, 11)]
    assert store.read("q", 1, 10) == message(10)  # offsets from the index
    drop_indexes(store)
    store = reopen(store)
    with pytest.raises(SegmentDamaged):  # the scan finds the damage
        store.recover(layout)


def test_damage_in_the_last_record_or_the_size_is_still_loud(kind: str, tmp_path: Path) -> None:
    store = new_store(kind, tmp_path)
    size = append(store, "q", 1, range(1, 6))
    store.seal("q", 1)
    store.flush()
    flip(store, ("q", 1), size - 1)
    store = reopen(store)
    with pytest.raises(SegmentDamaged, match="checksum"):
        store.recover({"q": [SegmentLayout(1, 5, size, sealed=True)]})
    flip(store, ("q", 1), size - 1)
    store = reopen(store)
    with pytest.raises(SegmentDamaged, match="shorter"):
        store.recover({"q": [SegmentLayout(1, 6, size + 10, sealed=True)]})


def test_a_damaged_index_falls_back_to_the_scan_and_is_rebuilt(
    kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = new_store(kind, tmp_path)
    size = append(store, "q", 1, range(1, 6))
    store.seal("q", 1)
    store.flush()
    good = index_bytes(store, ("q", 1))
    assert good is not None
    set_index(store, ("q", 1), good[:20] + bytes([good[20] ^ 1]) + good[21:])
    store = reopen(store)
    with caplog.at_level(logging.WARNING, logger="cmq.fsm.segments"):
        rec = store.recover({"q": [SegmentLayout(1, 5, size, sealed=True)]})
    assert "damaged segment index" in caplog.text and "00000000000000000001.idx" in caplog.text
    assert list(rec["q"][0].visible_at) == [T0 + 2 * s for s in range(1, 6)]
    assert store.last_recovery.scanned == 1 and store.last_recovery.staged == 1
    store.flush()
    assert index_bytes(store, ("q", 1)) == good


def test_a_stale_index_is_not_used_and_goes(kind: str, tmp_path: Path) -> None:
    store = new_store(kind, tmp_path)
    small = append(store, "q", 1, range(1, 4))
    size = append(store, "q", 1, range(4, 6))
    store.seal("q", 1)
    store.flush()
    # A snapshot taken before the seal lists the segment at 3 records: the index is of 5.
    store = reopen(store)
    rec = store.recover({"q": [SegmentLayout(1, 3, small)]})
    assert len(rec["q"][0].sent_at) == 3 and store.last_recovery.scanned == 1
    assert index_bytes(store, ("q", 1)) is None
    # Replayed from the log and sealed again: indexed again.
    assert append(store, "q", 1, range(4, 6)) == size
    store.seal("q", 1)
    store.flush()
    index = decode_index(index_bytes(store, ("q", 1)) or b"")
    assert (index.count, index.size) == (5, size)


def test_the_active_segment_index_covers_a_prefix(kind: str, tmp_path: Path) -> None:
    store = new_store(kind, tmp_path, step=4)
    append(store, "q", 1, range(1, 6))
    store.flush()  # 5 records >= 4 new: the prefix index is written
    assert decode_index(index_bytes(store, ("q", 1)) or b"").count == 5
    size = append(store, "q", 1, range(6, 8))
    store.flush()  # 2 more < 4: not rewritten
    assert decode_index(index_bytes(store, ("q", 1)) or b"").count == 5
    store = reopen(store)
    rec = store.recover({"q": [SegmentLayout(1, 7, size)]})
    assert store.last_recovery.partly == 1
    assert list(rec["q"][0].sent_at) == [T0 + s for s in range(1, 8)]
    assert store.read("q", 1, 7) == message(7)
    # A prefix whose next record does not follow: the whole segment is scanned instead.
    flip(store, ("q", 1), size - 1)
    store = reopen(store)
    with pytest.raises(SegmentDamaged):
        store.recover({"q": [SegmentLayout(1, 7, size)]})


def test_an_index_goes_with_its_segment_its_queue_and_unlisted_files(
    kind: str, tmp_path: Path
) -> None:
    store = new_store(kind, tmp_path)
    for first in (1, 3, 5):
        append(store, "q", first, range(first, first + 2))
        store.seal("q", first)
    append(store, "r", 1, range(1, 3))
    store.seal("r", 1)
    store.flush()
    assert all(index_bytes(store, ("q", f)) for f in (1, 3, 5))
    store.release("q", 1)
    assert index_bytes(store, ("q", 1)) is None
    store.drop_queue("r")
    assert index_bytes(store, ("r", 1)) is None
    # An index whose segment is gone (its removal lost in a crash) and one not listed.
    set_index(store, ("q", 9), index_bytes(store, ("q", 3)) or b"")
    size5 = decode_index(index_bytes(store, ("q", 5)) or b"").size
    store = reopen(store)
    store.recover({"q": [SegmentLayout(5, 2, size5, sealed=True)]})
    assert index_bytes(store, ("q", 9)) is None and index_bytes(store, ("q", 3)) is None
    assert index_bytes(store, ("q", 5)) is not None
    if isinstance(store, FileSegmentStore):
        assert sorted(p.name for p in Path(store.directory, "q").iterdir()) == [
            f"{5:020d}.idx",
            f"{5:020d}.seg",
        ]


def test_a_power_loss_before_the_flush_leaves_no_index() -> None:
    store = MemorySegmentStore(cache_bytes=0, indexes=True)
    size = append(store, "q", 1, range(1, 4))
    store.flush()
    append(store, "q", 1, range(4, 6))
    store.seal("q", 1)
    store.crash()
    assert store.indexes == {}
    store.recover({"q": [SegmentLayout(1, 3, size)]})
    assert store.last_recovery.scanned == 1


# -- the machine ----------------------------------------------------------------------------------


def populated(store: Store) -> QueueMachine:
    m = two_queues(store, segment_bytes=2048, messages=60, padding=100)
    m.end_batch()
    return m


def state(m: QueueMachine) -> tuple[bytes, list[list[StoredMessage]]]:
    return m.encode_image(reuse=False), [m.peek(q, 1000) for q in ("a", "b")]


def test_a_machine_restores_from_indexes_as_from_a_scan(kind: str, tmp_path: Path) -> None:
    store = new_store(kind, tmp_path / "a")
    m = populated(store)
    image = m.snapshot()
    before = state(m)
    store = reopen(store)
    indexed = QueueMachine(store, segment_bytes=2048)
    indexed.restore(9, image)
    counts = store.last_recovery
    assert counts.indexed >= 4 and counts.scanned == 2  # the two active segments
    assert state(indexed) == before
    drop_indexes(store)
    store = reopen(store, indexes=False)
    scanned = QueueMachine(store, segment_bytes=2048)
    scanned.restore(9, image)
    assert store.last_recovery.indexed == 0
    assert state(scanned) == before


def test_a_shipped_snapshot_is_indexed_at_the_receivers_next_snapshot(
    kind: str, tmp_path: Path
) -> None:
    leader = populated(new_store(kind, tmp_path / "leader"))
    image = leader.snapshot()
    shipped = leader.export_snapshot(image)
    store = new_store(kind, tmp_path / "follower")
    follower = QueueMachine(store, segment_bytes=2048)
    follower.restore(9, shipped)
    sealed = store.last_recovery.staged
    assert sealed >= 4 and store.last_recovery.indexed == 0  # shipped without indexes
    assert follower.snapshot() == image
    store = reopen(store)
    again = QueueMachine(store, segment_bytes=2048)
    again.restore(9, image)
    assert store.last_recovery.indexed == sealed
    assert state(again) == state(leader)
