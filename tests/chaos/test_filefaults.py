"""File faults: they find the node's files, change what they say, and the storage notices."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from cmq.errors import InvariantBroken
from cmq.fsm.segments import FileSegmentStore, SegmentLayout, StoredMessage, encode_record
from raftlog.core.types import ConfState, Entry
from raftlog.errors import CorruptRecord
from raftlog.storage import GroupLog, Wal
from raftlog.storage.record import DEFAULT_MAX_BODY
from raftlog.storage.recovery import recover
from tests.chaos import filefaults
from tests.chaos.filefaults import (
    NoSuchFile,
    bitflip,
    copy_data_dir,
    data_files,
    rollback,
    rollback_all,
    truncate,
)


def make_wal(data_dir: Path, entries: int, first: int = 1) -> None:
    wal = Wal.open(str(data_dir))
    try:
        log = GroupLog(wal, 1, initial_conf=ConfState((1,)) if first == 1 else None)
        for i in range(first, first + entries):
            log.append([Entry(1, i + 1, data=b"entry %d " % i + b"x" * 40)])
    finally:
        wal.close()


def make_segment(data_dir: Path, count: int) -> tuple[FileSegmentStore, SegmentLayout]:
    store = FileSegmentStore(data_dir / "segments" / "g1")
    msgs = [StoredMessage(f"id-{s}", s, b"body %d" % s, False, (), 0) for s in range(1, count + 1)]
    size = store.append("q.1", 1, msgs, [encode_record(m, 0) for m in msgs])
    store.flush()
    store.close()
    return store, SegmentLayout(1, count, size)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "node1"
    make_wal(d, 20)
    make_segment(d, 10)
    return d


def test_finds_every_kind_of_file(data_dir: Path) -> None:
    kinds = {f.kind: f.rel for f in data_files(data_dir)}
    assert kinds["wal"] == "wal-0000000000000001.log"
    assert kinds["segment"] == "segments/g1/q.1/00000000000000000001.seg"
    assert kinds["snapshot"].startswith("snap/00000000000000000001-")
    with pytest.raises(NoSuchFile):
        filefaults.pick(data_dir / "segments", random.Random(1), "wal")


def test_bitflip_in_the_wal_head_is_corruption(data_dir: Path) -> None:
    wal = data_files(data_dir, "wal")[0]
    before = wal.path.read_bytes()
    what = bitflip(data_dir, random.Random(3), kind="wal", where="head")
    after = wal.path.read_bytes()
    assert what.startswith("bitflip wal wal-0000000000000001.log")
    assert len(after) == len(before)
    assert sum(bin(a ^ b).count("1") for a, b in zip(after, before, strict=True)) == 1
    with pytest.raises(CorruptRecord):
        recover(str(data_dir), DEFAULT_MAX_BODY, repair=False)


def test_truncated_wal_is_a_torn_tail(data_dir: Path) -> None:
    size = data_files(data_dir, "wal")[0].size
    what = truncate(data_dir, random.Random(4), kind="wal", where="middle")
    assert "wal" in what and data_files(data_dir, "wal")[0].size < size
    rec = recover(str(data_dir), DEFAULT_MAX_BODY, repair=False)
    assert rec.torn_tail is not None  # cut silently: what the node acknowledged is forgotten


def test_segment_faults_are_detected_on_restore(tmp_path: Path) -> None:
    for seed, fault in enumerate((bitflip, truncate)):
        d = tmp_path / f"n{seed}"
        store, layout = make_segment(d, 10)
        what = fault(d, random.Random(seed), kind="segment", where="head")
        assert "segment" in what
        with pytest.raises(InvariantBroken):
            store.recover({"q.1": [layout]})


def test_snapshot_bitflip_fails_its_checksum(data_dir: Path) -> None:
    bitflip(data_dir, random.Random(5), kind="snapshot")
    wal = Wal.open(str(data_dir))
    try:
        with pytest.raises(CorruptRecord):
            GroupLog(wal, 1).snapshot()
    finally:
        wal.close()


def test_rollback_restores_a_file_or_a_chunk_from_the_copy(tmp_path: Path) -> None:
    d = tmp_path / "node1"
    make_wal(d, 5)
    make_segment(d, 3)
    early = copy_data_dir(d, tmp_path / "early")
    make_wal(d, 5, first=6)
    wal = data_files(d, "wal")[0]
    grown = wal.path.read_bytes()
    what = rollback(d, early, random.Random(1), kind="wal", chunk=False)
    assert what.startswith("rollback wal wal-0000000000000001.log")
    assert wal.path.read_bytes() == (early / wal.rel).read_bytes() != grown
    with pytest.raises(NoSuchFile):  # nothing left that differs
        rollback(d, early, random.Random(1), kind="wal")
    # A chunk: same size, some bytes (a differing range) from the copy.
    early_bytes = (early / wal.rel).read_bytes()
    (d / wal.rel).write_bytes(bytes(b ^ 0xFF for b in early_bytes))
    what = rollback(d, early, random.Random(2), kind="wal", chunk=True)
    assert what.startswith("rollback chunk of wal")
    now = wal.path.read_bytes()
    assert len(now) == len(early_bytes) and now != early_bytes
    assert any(a == b for a, b in zip(now, early_bytes, strict=True))


def test_rollback_of_a_snapshot_uses_the_groups_earlier_snapshot(tmp_path: Path) -> None:
    d = tmp_path / "node1"
    make_wal(d, 3)
    wal = Wal.open(str(d))
    try:
        GroupLog(wal, 1).create_snapshot(3, ConfState((1,)), b"image at 3")
    finally:
        wal.close()
    early = copy_data_dir(d, tmp_path / "early")
    wal = Wal.open(str(d))
    try:
        GroupLog(wal, 1).create_snapshot(4, ConfState((1,)), b"image at 4")
    finally:
        wal.close()
    what = rollback(d, early, random.Random(1), kind="snapshot", chunk=False)
    assert "snap/00000000000000000001-00000000000000000004.snap" in what
    assert "the copy's snap/00000000000000000001-00000000000000000003.snap" in what
    wal = Wal.open(str(d))
    try:
        with pytest.raises(CorruptRecord, match="not 1@4"):
            GroupLog(wal, 1).snapshot()
    finally:
        wal.close()
    assert "whole data directory" in rollback_all(d, early)
    assert sorted(f.rel for f in data_files(d)) == sorted(f.rel for f in data_files(early))
