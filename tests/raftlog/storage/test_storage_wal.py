"""The shared WAL: group commit, bounded queue, close/failure semantics, rotation and deletion."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
from concurrent.futures import Future
from pathlib import Path

import pytest
from storage_helpers import make_wal, oracle

from raftlog.core.types import ConfState, Entry, HardState, SnapshotMeta
from raftlog.errors import DiskFailed, Overloaded, WalClosed
from raftlog.storage import (
    FSYNC_BUCKETS,
    ConfRecord,
    EntriesRecord,
    HardStateRecord,
    Record,
    SnapshotRecord,
    Wal,
)
from raftlog.storage.files import wal_name


def test_concurrent_submitters_share_fsyncs(tmp_path: Path, open_wal: list[Wal]) -> None:
    wal = make_wal(open_wal, str(tmp_path))
    n_threads, per_thread = 8, 25

    def producer(group: int) -> None:
        for i in range(1, per_thread + 1):
            wal.submit(group, [EntriesRecord((Entry(1, i, data=b"m" * 32),))]).result()

    threads = [threading.Thread(target=producer, args=(g,)) for g in range(1, n_threads + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats = wal.stats()
    total = n_threads * per_thread
    assert stats.records == stats.submissions == total
    assert stats.fsyncs < total, "group commit must batch concurrent submitters"
    assert stats.max_records_per_write > 1
    assert stats.records_per_fsync > 1.0
    assert sum(stats.fsync_latency) == stats.fsyncs
    assert len(stats.fsync_latency) == len(FSYNC_BUCKETS)
    assert stats.bytes > 0 and stats.fsync_seconds > 0

    wal.close()
    reopened = make_wal(open_wal, str(tmp_path))
    assert reopened.groups() == tuple(range(1, n_threads + 1))


def test_async_writes_batch_naturally(tmp_path: Path, open_wal: list[Wal]) -> None:
    wal = make_wal(open_wal, str(tmp_path))

    async def main() -> None:
        await asyncio.gather(
            *(wal.write(g, [HardStateRecord(HardState(1, g, 0))]) for g in range(1, 201))
        )

    asyncio.run(main())
    stats = wal.stats()
    assert stats.submissions == 200
    assert stats.fsyncs <= 20, stats


def _blocking_writer(wal: Wal) -> tuple[threading.Event, threading.Event, Future[None]]:
    """Park the writer thread inside an on_done callback until ``release`` is set."""
    entered, release = threading.Event(), threading.Event()

    def park() -> None:
        entered.set()
        release.wait(10)

    fut = wal.submit(1, [HardStateRecord(HardState(1, 1, 0))], on_done=park)
    assert entered.wait(10)
    return entered, release, fut


def test_bounded_queue_raises_overloaded(tmp_path: Path, open_wal: list[Wal]) -> None:
    wal = make_wal(open_wal, str(tmp_path), max_pending_submissions=3)
    _, release, first = _blocking_writer(wal)
    queued = [wal.submit(2, [HardStateRecord(HardState(1, 0, i))]) for i in range(3)]
    with pytest.raises(Overloaded) as err:
        wal.submit(2, [HardStateRecord(HardState(1, 0, 9))])
    assert err.value.retriable
    release.set()
    first.result(10)
    for f in queued:
        f.result(10)
    wal.submit(2, [HardStateRecord(HardState(1, 0, 9))]).result(10)  # room again


def test_pending_bytes_bound(tmp_path: Path, open_wal: list[Wal]) -> None:
    wal = make_wal(open_wal, str(tmp_path), max_pending_bytes=1000)
    _, release, _ = _blocking_writer(wal)
    big = [EntriesRecord((Entry(1, 1, data=b"x" * 600),))]
    ok = wal.submit(2, big)  # the first queued submission is always taken
    with pytest.raises(Overloaded):
        wal.submit(3, big)
    release.set()
    ok.result(10)


def test_close_drains_or_fails_every_waiter(tmp_path: Path, open_wal: list[Wal]) -> None:
    wal = make_wal(open_wal, str(tmp_path))
    _, release, first = _blocking_writer(wal)
    queued = [wal.submit(2, [HardStateRecord(HardState(1, 0, i))]) for i in range(5)]
    closer = threading.Thread(target=wal.close, kwargs={"drain": False})
    closer.start()
    release.set()
    closer.join(10)
    assert not closer.is_alive()
    first.result(0)  # was already being written: completes
    for f in queued:
        assert isinstance(f.exception(0), WalClosed)
    with pytest.raises(WalClosed):
        wal.submit(2, [HardStateRecord(HardState(1, 0, 0))])

    wal2 = make_wal(open_wal, str(tmp_path))
    _, release2, first2 = _blocking_writer(wal2)
    queued = [wal2.submit(2, [HardStateRecord(HardState(1, 0, i))]) for i in range(5)]
    release2.set()
    wal2.close()  # drain: everything queued is written
    assert all(f.result(0) is None for f in [first2, *queued])
    wal3 = make_wal(open_wal, str(tmp_path))
    log = wal3.claim_group(2)
    assert log is not None and log.hard_state == HardState(1, 0, 4)


def test_io_error_stops_the_wal_and_fails_waiters(
    tmp_path: Path, open_wal: list[Wal], monkeypatch: pytest.MonkeyPatch
) -> None:
    wal = make_wal(open_wal, str(tmp_path))
    wal.submit(1, [HardStateRecord(HardState(1, 1, 0))]).result(10)

    def broken_fdatasync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", broken_fdatasync)
    fut = wal.submit(1, [HardStateRecord(HardState(2, 1, 0))])
    exc = fut.exception(10)
    assert isinstance(exc, WalClosed) and isinstance(exc.__cause__, OSError)
    with pytest.raises(WalClosed):
        wal.submit(1, [HardStateRecord(HardState(3, 1, 0))])
    monkeypatch.undo()
    wal.close()


def test_a_failed_fsync_is_a_failed_disk_never_retried(
    tmp_path: Path, open_wal: list[Wal], monkeypatch: pytest.MonkeyPatch
) -> None:
    """EIO from fdatasync: the batch fails with `DiskFailed` naming the directory and errno,
    the fsync is not tried again, later submits fail the same way, the stats say why."""
    wal = make_wal(open_wal, str(tmp_path))
    wal.submit(1, [HardStateRecord(HardState(1, 1, 0))]).result(10)
    calls: list[int] = []

    def broken_fdatasync(fd: int) -> None:
        calls.append(fd)
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", broken_fdatasync)
    exc = wal.submit(1, [HardStateRecord(HardState(2, 1, 0))]).exception(10)
    assert isinstance(exc, DiskFailed) and exc.errno == errno.EIO
    assert exc.directory == wal.directory and "EIO" in str(exc)
    assert len(calls) == 1  # never retried
    with pytest.raises(DiskFailed) as later:
        wal.submit(1, [HardStateRecord(HardState(3, 1, 0))])
    assert later.value.errno == errno.EIO
    st = wal.stats()
    assert st.failed_errno == errno.EIO and "EIO" in st.failed and st.fsync_started == 0
    assert wal.failure is not None
    monkeypatch.undo()
    wal.close()


def test_an_fsync_in_progress_is_in_the_stats(
    tmp_path: Path, open_wal: list[Wal], monkeypatch: pytest.MonkeyPatch
) -> None:
    wal = make_wal(open_wal, str(tmp_path))
    release = threading.Event()
    real = os.fdatasync

    def slow(self: Wal, fd: int) -> None:
        release.wait(10)
        real(fd)

    monkeypatch.setattr(Wal, "_sync", slow)
    fut = wal.submit(1, [HardStateRecord(HardState(1, 1, 0))])
    deadline = time.monotonic() + 5
    while wal.stats().fsync_started == 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert time.monotonic() - wal.stats().fsync_started < 5
    release.set()
    fut.result(10)
    st = wal.stats()
    assert st.fsync_started == 0 and st.last_fsync_seconds > 0


def test_unsynced_writes_ride_along(tmp_path: Path, open_wal: list[Wal]) -> None:
    wal = make_wal(open_wal, str(tmp_path))
    wal.submit(1, [HardStateRecord(HardState(1, 1, 5))], sync=False).result(10)
    assert wal.stats().fsyncs == 0
    _, release, _ = _blocking_writer(wal)
    a = wal.submit(1, [HardStateRecord(HardState(1, 1, 6))], sync=False)
    b = wal.submit(2, [EntriesRecord((Entry(1, 1),))])
    release.set()
    a.result(10)
    b.result(10)
    stats = wal.stats()
    assert stats.fsyncs == 2  # the parked batch and the batch {a, b}: a rode along with b
    assert stats.max_records_per_write == 2


def test_on_done_error_reaches_only_its_waiter(tmp_path: Path, open_wal: list[Wal]) -> None:
    wal = make_wal(open_wal, str(tmp_path))

    def boom() -> None:
        raise RuntimeError("apply failed")

    bad = wal.submit(1, [HardStateRecord(HardState(1, 1, 0))], on_done=boom)
    assert isinstance(bad.exception(10), RuntimeError)
    wal.submit(1, [HardStateRecord(HardState(1, 1, 1))]).result(10)  # still running


def test_rotation_heads_and_deletion(tmp_path: Path, open_wal: list[Wal]) -> None:
    """Old segments go once every group's entries in them are snapshotted; the latest hard
    state, conf and snapshot survive in the newer segments' heads."""
    wal = make_wal(open_wal, str(tmp_path), segment_bytes=2048)
    written: list[tuple[int, Record]] = []

    def put(group: int, *records: Record) -> None:
        wal.submit(group, records).result(10)
        written.extend((group, r) for r in records)

    conf = ConfState((1, 2, 3))
    put(1, ConfRecord(conf), HardStateRecord(HardState(1, 1, 0)))
    put(2, ConfRecord(conf), HardStateRecord(HardState(4, 2, 0)))
    put(2, EntriesRecord((Entry(4, 1, data=b"b"),)))  # group 2 pins the first segment
    for i in range(1, 41):
        put(1, EntriesRecord((Entry(1, i, data=b"a" * 100),)))
    put(1, HardStateRecord(HardState(1, 1, 40)))
    segs = wal.segments()
    assert len(segs) >= 3
    assert wal.pinning_groups() == (1, 2)
    put(1, SnapshotRecord(SnapshotMeta(40, 1, conf), installed=False))
    assert wal.pinning_groups() == (2,)
    assert wal.segments()[: len(segs)] == segs  # still pinned by group 2
    put(2, SnapshotRecord(SnapshotMeta(1, 4, conf), installed=False))
    live = wal.segments()
    assert len(live) == 1
    for seq in segs:
        assert (tmp_path / wal_name(seq)).exists() == (seq in live)
    assert wal.stats().segments_deleted == live[0] - 1
    # Force one more rotation: the new segment starts with both groups' heads.
    for i in range(41, 61):
        put(1, EntriesRecord((Entry(1, i, data=b"a" * 100),)))
    wal.close()

    wal = make_wal(open_wal, str(tmp_path))
    want = oracle(written)
    for group in (1, 2):
        rec = wal.claim_group(group)
        assert rec is not None
        assert rec.hard_state == want[group].initial_state()[0]
        assert rec.conf == conf
        assert rec.snapshot.index == want[group].snapshot().meta.index
        first, last = want[group].first_index(), want[group].last_index()
        expected = want[group].entries(first, last + 1, 1 << 30) if last >= first else []
        assert list(rec.entries) == expected
        if group == 1:
            assert [e.index for e in rec.entries] == list(range(41, 61))


def test_installed_snapshot_unpins_older_entries(tmp_path: Path, open_wal: list[Wal]) -> None:
    wal = make_wal(open_wal, str(tmp_path), segment_bytes=1024)
    for i in range(1, 30):
        wal.submit(1, [EntriesRecord((Entry(1, i, data=b"z" * 64),))]).result(10)
    assert wal.pinning_groups() == (1,)
    # A leader's snapshot at 5 (term 2) voids the whole local log, even entries above 5.
    wal.submit(1, [SnapshotRecord(SnapshotMeta(5, 2, ConfState((1,))), installed=True)]).result(10)
    assert wal.pinning_groups() == ()
    wal.submit(1, [HardStateRecord(HardState(2, 0, 5))]).result(10)
    wal.close()
    rec = make_wal(open_wal, str(tmp_path)).claim_group(1)
    assert rec is not None and rec.entries == () and rec.snapshot.index == 5
    assert rec.conf == ConfState((1,))


def test_submit_validation(tmp_path: Path, open_wal: list[Wal]) -> None:
    wal = make_wal(open_wal, str(tmp_path), max_record_bytes=128)
    with pytest.raises(ValueError):
        wal.submit(1, [])
    with pytest.raises(ValueError, match="exceeds"):
        wal.submit(1, [EntriesRecord((Entry(1, 1, data=b"x" * 200),))])
    with pytest.raises(Exception, match="already open"):
        wal.claim_group(1)
        wal.claim_group(1)
