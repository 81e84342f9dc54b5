"""Segment stores: append/read/seal/release, checksums, recovery to a snapshot's layout."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cmq.errors import InvariantBroken
from cmq.fsm.segments import FileSegmentStore, MemorySegmentStore
from cmq.fsm.store import FRAME, SegmentLayout, SegmentStore, StoredMessage, encode_record


def message(seq: int, body: bytes = b"hello") -> StoredMessage:
    return StoredMessage(
        f"id{seq}", seq, body + str(seq).encode(), seq % 2 == 0, (("k", "v"),), seq
    )


def append(store: SegmentStore, queue: str, segment: int, seqs: range) -> int:
    msgs = [message(s) for s in seqs]
    return store.append(queue, segment, msgs, [encode_record(m, m.sent_at_ms + 5) for m in msgs])


@pytest.fixture(params=["memory", "file"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    def make(cache_bytes: int = 0) -> SegmentStore:
        if request.param == "memory":
            if not hasattr(make, "mem"):
                make.mem = MemorySegmentStore(cache_bytes=cache_bytes)  # type: ignore[attr-defined]
            return make.mem  # type: ignore[attr-defined, no-any-return]
        return FileSegmentStore(tmp_path / "segs", cache_bytes=cache_bytes, max_open=2)

    return make


def test_append_read_release(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store()
    size1 = append(store, "q.1", 1, range(1, 4))
    size2 = append(store, "q.1", 1, range(4, 6))
    assert size2 > size1 > 0
    store.seal("q.1", 1)
    append(store, "q.1", 6, range(6, 8))
    append(store, "r.2", 1, range(1, 3))  # more segments than open handles (file: max_open=2)
    for seq in range(1, 6):
        assert store.read("q.1", 1, seq) == message(seq)
    assert store.read("q.1", 6, 7) == message(7)
    with pytest.raises(InvariantBroken):
        store.read("q.1", 1, 6)
    with pytest.raises(InvariantBroken):  # appends must continue the seqs
        append(store, "q.1", 6, range(9, 10))
    store.release("q.1", 1)
    with pytest.raises(InvariantBroken):
        store.read("q.1", 1, 2)
    store.drop_queue("r.2")
    store.flush()
    recovered = store.recover({"q.1": [SegmentLayout(6, 2, size_of(store, "q.1", 6))]})
    assert list(recovered["q.1"][0].sent_at) == [6, 7]
    assert list(recovered["q.1"][0].visible_at) == [11, 12]


def size_of(store: SegmentStore, queue: str, segment: int) -> int:
    if isinstance(store, MemorySegmentStore):
        return len(store.segments[(queue, segment)])
    assert isinstance(store, FileSegmentStore)
    return os.path.getsize(os.path.join(store.directory, queue, f"{segment:020d}.seg"))


def test_cache_serves_recent_messages(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store(cache_bytes=10_000)
    append(store, "q.1", 1, range(1, 3))
    if isinstance(store, MemorySegmentStore):
        store.segments[("q.1", 1)][:] = b"\0" * len(store.segments[("q.1", 1)])
        assert store.read("q.1", 1, 1) == message(1)  # from the cache, not the bytes


def test_checksum_failure_is_loud(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store()
    size = append(store, "q.1", 1, range(1, 4))
    flip_byte(store, "q.1", 1, size - 2)  # inside the last record's body
    assert store.read("q.1", 1, 1) == message(1)
    with pytest.raises(InvariantBroken, match=r"offset \d+: checksum mismatch"):
        store.read("q.1", 1, 3)
    if isinstance(store, FileSegmentStore):
        store.close()
        store = make_store()
    with pytest.raises(InvariantBroken, match="checksum mismatch"):
        store.recover({"q.1": [SegmentLayout(1, 3, size)]})


def flip_byte(store: SegmentStore, queue: str, segment: int, offset: int) -> None:
    if isinstance(store, MemorySegmentStore):
        store.segments[(queue, segment)][offset] ^= 0xFF
        return
    assert isinstance(store, FileSegmentStore)
    store.write_out()  # the batch's appends reach the file, as after every batch of applies
    path = os.path.join(store.directory, queue, f"{segment:020d}.seg")
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0xFF]))


def test_recover_truncates_and_removes_what_the_snapshot_does_not_list(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store()
    at_snapshot = append(store, "q.1", 1, range(1, 3))
    store.flush()
    append(store, "q.1", 1, range(3, 5))  # after the snapshot: truncated away
    append(store, "q.1", 5, range(5, 6))  # a later segment: removed
    append(store, "gone.2", 1, range(1, 2))  # a queue created later: removed
    if isinstance(store, FileSegmentStore):
        store.close()
        store = make_store()
    out = store.recover({"q.1": [SegmentLayout(1, 2, at_snapshot)]})
    assert list(out["q.1"][0].sent_at) == [1, 2]
    assert size_of(store, "q.1", 1) == at_snapshot
    assert store.read("q.1", 1, 2) == message(2)
    # Appending continues after the recovered records (re-applied from the Raft log).
    append(store, "q.1", 1, range(3, 4))
    assert store.read("q.1", 1, 3) == message(3)
    if isinstance(store, MemorySegmentStore):
        assert sorted(store.segments) == [("q.1", 1)]
    else:
        assert isinstance(store, FileSegmentStore)
        assert sorted(os.listdir(store.directory)) == ["q.1"]
        assert os.listdir(os.path.join(store.directory, "q.1")) == [f"{1:020d}.seg"]


def test_recover_missing_or_short_segment_is_loud(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store()
    size = append(store, "q.1", 1, range(1, 3))
    with pytest.raises(InvariantBroken, match="missing"):
        store.recover({"q.1": [SegmentLayout(1, 2, size), SegmentLayout(3, 1, 10)]})
    size = append(store, "r.1", 1, range(1, 3))
    with pytest.raises(InvariantBroken, match="shorter"):
        store.recover({"r.1": [SegmentLayout(1, 3, size + 1)]})
    size = append(store, "s.1", 1, range(1, 3))
    with pytest.raises(InvariantBroken, match="records"):
        store.recover({"s.1": [SegmentLayout(1, 3, size)]})


def test_torn_record_is_detected(make_store) -> None:  # type: ignore[no-untyped-def]
    store = make_store()
    size = append(store, "q.1", 1, range(1, 3))
    # A recorded size that ends inside a record (a damaged image or file).
    with pytest.raises(InvariantBroken, match="torn"):
        store.recover({"q.1": [SegmentLayout(1, 2, size - 1)]})
    assert FRAME.size == 8


@pytest.fixture
def synced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths `os.fsync` is called on from now on (the calls still happen)."""
    paths: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        paths.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return paths


def test_flush_makes_every_created_directory_durable(tmp_path: Path, synced: list[str]) -> None:
    """A snapshot lists segment files; the directories holding them (and every level created
    for them) must have their entries fsynced first, or a power loss can forget them."""
    root = tmp_path / "data"
    root.mkdir()
    store = FileSegmentStore(root / "segments" / "g1")
    m = StoredMessage("id", 1, b"body", False, (), 0)
    store.append("q", 1, [m], [encode_record(m, 0)])
    store.flush()
    for d in (root, root / "segments", root / "segments" / "g1", root / "segments" / "g1" / "q"):
        assert str(d) in synced, d


def test_a_reopened_store_makes_the_existing_tree_durable(
    tmp_path: Path, synced: list[str]
) -> None:
    """A process that crashed may have left directories that exist only in the page cache: the
    next store fsyncs every one of them, and its ancestors up to the data directory, before its
    first snapshot can refer to them."""
    root = tmp_path / "data"
    first = FileSegmentStore(root / "segments" / "g1")
    m = StoredMessage("id", 1, b"body", False, (), 0)
    first.append("q", 1, [m], [encode_record(m, 0)])
    first.close()  # a crash: nothing was flushed
    synced.clear()
    FileSegmentStore(root / "segments" / "g1", durable_root=root).flush()
    for d in (root, root / "segments", root / "segments" / "g1", root / "segments" / "g1" / "q"):
        assert str(d) in synced, d
    assert str(tmp_path) not in synced  # nothing above the data directory


def test_file_store_writes_a_batch_of_appends_once_per_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[int] = []
    real_write = os.write

    def counting_write(fd: int, data: bytes | memoryview) -> int:
        writes.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", counting_write)
    store = FileSegmentStore(tmp_path / "segs", cache_bytes=0)
    path = tmp_path / "segs" / "q.1" / f"{1:020d}.seg"
    size = 0
    for first in (1, 3, 5):  # three commands of one batch, two records each
        size = append(store, "q.1", 1, range(first, first + 2))
    assert writes == [] and not path.exists()  # held until the batch ends
    # A read in the middle of a batch (no cache: from the file) sees every held append.
    assert store.read("q.1", 1, 6) == message(6)
    assert writes == [size] and path.stat().st_size == size
    append(store, "q.1", 1, range(7, 9))
    append(store, "q.2", 1, range(1, 3))
    store.write_out()  # the end of the batch: one write per segment
    assert len(writes) == 3
    store.write_out()
    assert len(writes) == 3  # nothing held any more
    # A flush (fsync) never misses held appends either.
    end = append(store, "q.1", 1, range(9, 10))
    store.flush()
    assert path.stat().st_size == end
