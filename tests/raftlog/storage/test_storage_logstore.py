"""GroupLog: the Storage read contract, MemoryStorage write semantics, durability across restart."""

from __future__ import annotations

import asyncio
import os
import random
import threading
from pathlib import Path

import pytest
from storage_helpers import assert_same, make_wal

from raftlog.core.storage import MemoryStorage
from raftlog.core.types import ConfState, Entry, HardState, Snapshot, SnapshotMeta
from raftlog.errors import Compacted, CorruptRecord, InvariantViolation, Unavailable
from raftlog.storage import GroupLog, HardStateRecord, Wal

CONF = ConfState((1, 2, 3))


def ents(term: int, lo: int, hi: int, tag: bytes = b"") -> list[Entry]:
    return [Entry(term, i, data=tag + str(i).encode()) for i in range(lo, hi + 1)]


def test_read_contract_matches_memory_storage(tmp_path: Path, open_wal: list[Wal]) -> None:
    wal = make_wal(open_wal, str(tmp_path))
    log, mem = GroupLog(wal, 7, initial_conf=CONF), MemoryStorage(CONF)
    for store in (log, mem):
        store.append(ents(1, 1, 10))
        store.append(ents(2, 6, 12, b"r"))  # replaces 6..10, adds 11..12
        store.set_hard_state(HardState(2, 1, 8))
        store.create_snapshot(5, CONF, b"img")
        store.compact(3)
    assert_same(log, mem)
    assert log.entries(4, 13, 1) == mem.entries(4, 13, 1)  # size limit: at least one entry
    assert log.entries(4, 13, 200) == mem.entries(4, 13, 200)
    for bad in (Compacted, Unavailable):
        lo, hi = (3, 5) if bad is Compacted else (5, 14)
        with pytest.raises(bad):
            log.entries(lo, hi, 1 << 20)
        with pytest.raises(bad):
            log.term(2 if bad is Compacted else 13)
    assert log.snapshot() == Snapshot(SnapshotMeta(5, 1, CONF), b"img")
    with pytest.raises(InvariantViolation):
        log.compact(6)  # beyond the snapshot
    with pytest.raises(InvariantViolation):
        log.append(ents(2, 14, 15))  # gap
    assert log.last_index() == 12


def test_replace_suffix_survives_restart(tmp_path: Path, open_wal: list[Wal]) -> None:
    wal = make_wal(open_wal, str(tmp_path))
    log, mem = GroupLog(wal, 1), MemoryStorage()
    for store in (log, mem):
        store.append(ents(1, 1, 20))
        store.append(ents(2, 15, 16, b"b"))  # truncates 17..20
        store.append(ents(3, 10, 11, b"c"))  # truncates deeper, below an earlier replacement
        store.append(ents(3, 12, 14, b"d"))
        store.set_hard_state(HardState(3, 2, 9))
    wal.close()
    wal = make_wal(open_wal, str(tmp_path))
    log = GroupLog(wal, 1)
    assert_same(log, mem)
    assert log.last_index() == 14 and log.term(10) == 3 and log.term(9) == 1


def test_randomized_against_memory_storage(tmp_path: Path, open_wal: list[Wal]) -> None:
    """Random appends (with conflicts), hard states, snapshots and compactions of several
    groups sharing one small-segment WAL; after each restart every group equals the oracle."""
    rng = random.Random(1234)
    groups = (1, 2, 3)
    mems = {g: MemoryStorage(CONF) for g in groups}
    terms = dict.fromkeys(groups, 1)
    wal = make_wal(open_wal, str(tmp_path), segment_bytes=4096)
    logs = {g: GroupLog(wal, g, initial_conf=CONF) for g in groups}
    rotations = deleted = restarts = 0
    for step in range(1500):
        g = rng.choice(groups)
        log, mem = logs[g], mems[g]
        op = rng.random()
        if op < 0.6:
            # Raft never replaces entries at or below the snapshot (they are committed).
            floor = max(mem.first_index(), mem.snapshot().meta.index + 1)
            lo = max(floor, mem.last_index() + 1 - rng.randint(0, 3))
            if rng.random() < 0.2:
                terms[g] += 1
            batch = [
                Entry(terms[g], i, data=os.urandom(rng.randint(0, 80)))
                for i in range(lo, lo + rng.randint(1, 4))
            ]
            log.append(batch)
            mem.append(batch)
        elif op < 0.8:
            hs = HardState(terms[g], rng.randint(0, 3), rng.randint(0, mem.last_index()))
            log.set_hard_state(hs, sync=rng.random() < 0.5)
            mem.set_hard_state(hs)
        elif op < 0.95 and mem.last_index() > mem.snapshot().meta.index:
            at = rng.randint(mem.snapshot().meta.index + 1, mem.last_index())
            data = f"snap {g} {at}".encode()
            # Membership changes between snapshots: each carries the configuration of its time.
            conf = rng.choice((CONF, ConfState((1, 2, 4)), ConfState((2, 3), (4,))))
            log.create_snapshot(at, conf, data)
            mem.create_snapshot(at, conf, data)
            keep = rng.randint(0, 2)
            log.compact(max(0, at - keep))
            mem.compact(max(0, at - keep))
        else:
            rotations += wal.stats().rotations
            deleted += wal.stats().segments_deleted
            restarts += 1
            wal.close()
            # A restart starts each log right after its snapshot, in its configuration.
            for m in mems.values():
                m.compact(m.snapshot().meta.index)
                m.set_conf(m.snapshot().meta.conf)
            wal = make_wal(open_wal, str(tmp_path), segment_bytes=4096)
            logs = {g2: GroupLog(wal, g2) for g2 in groups}
            for g2 in groups:
                assert_same(logs[g2], mems[g2])
                assert logs[g2].snapshot().data == mems[g2].snapshot().data, step
    assert restarts > 10 and rotations > 10
    # Old segments were deleted as snapshots moved on, and only live snapshot files remain.
    assert deleted > 10
    assert len(wal.segments()) < 10
    names = sorted(os.listdir(wal.snapshot_dir))
    assert len(names) <= len(groups)


def test_snapshot_compaction_and_segment_deletion_across_restart(
    tmp_path: Path, open_wal: list[Wal]
) -> None:
    wal = make_wal(open_wal, str(tmp_path), segment_bytes=2048)
    a, b = GroupLog(wal, 1, initial_conf=CONF), GroupLog(wal, 2, initial_conf=CONF)
    b.append(ents(1, 1, 2))  # b's entries sit in the first segment and pin it
    for i in range(1, 60):
        a.append([Entry(1, i, data=b"p" * 100)])
    a.set_hard_state(HardState(1, 1, 59))
    assert len(wal.segments()) > 3
    assert wal.pinning_groups() == (1, 2)
    a.create_snapshot(50, CONF, b"a@50")
    a.compact(50)
    assert wal.pinning_groups() == (2,)
    b.create_snapshot(2, CONF, b"b@2")
    remaining = wal.segments()
    assert remaining[0] > 1 and wal.pinning_groups() in ((), (1,))
    assert sorted(os.listdir(tmp_path)) == sorted(
        ["snap", *(f"wal-{s:016d}.log" for s in remaining)]
    )
    wal.close()

    wal = make_wal(open_wal, str(tmp_path), segment_bytes=2048)
    a, b = GroupLog(wal, 1), GroupLog(wal, 2)
    assert a.snapshot() == Snapshot(SnapshotMeta(50, 1, CONF), b"a@50")
    assert (a.first_index(), a.last_index()) == (51, 59)
    assert a.initial_state() == (HardState(1, 1, 59), CONF)
    assert b.snapshot().data == b"b@2" and b.last_index() == 2 and b.first_index() == 3
    assert b.initial_state()[1] == CONF


def test_installed_snapshot_replaces_log_and_old_files(tmp_path: Path, open_wal: list[Wal]) -> None:
    wal = make_wal(open_wal, str(tmp_path))
    log = GroupLog(wal, 5, initial_conf=CONF)
    log.append(ents(1, 1, 10))
    log.create_snapshot(4, CONF, b"local@4")
    new_conf = ConfState((1, 2, 3), (4,))
    fut = log.submit_ready(
        snapshot=Snapshot(SnapshotMeta(20, 3, new_conf), b"leader@20"),
        entries=ents(3, 19, 22, b"n"),  # 19..20 are inside the snapshot and skipped
        hard_state=HardState(3, 2, 20),
    )
    fut.result(10)
    assert (log.first_index(), log.last_index()) == (21, 22)
    assert log.initial_state() == (HardState(3, 2, 20), new_conf)
    assert os.listdir(wal.snapshot_dir) == [f"{5:020d}-{20:020d}.snap"]
    log.apply_snapshot(Snapshot(SnapshotMeta(10, 2, CONF), b"older"))  # ignored
    assert log.snapshot().data == b"leader@20"
    wal.close()
    log = GroupLog(make_wal(open_wal, str(tmp_path)), 5)
    assert log.snapshot() == Snapshot(SnapshotMeta(20, 3, new_conf), b"leader@20")
    assert [e.index for e in log.entries(21, 23, 1 << 20)] == [21, 22]
    assert log.initial_state() == (HardState(3, 2, 20), new_conf)


def test_ready_is_one_submission_and_reads_see_only_durable_state(
    tmp_path: Path, open_wal: list[Wal]
) -> None:
    wal = make_wal(open_wal, str(tmp_path))
    log = GroupLog(wal, 1)
    entered, release = threading.Event(), threading.Event()

    def park() -> None:
        entered.set()
        release.wait(10)

    wal.submit(99, [HardStateRecord(HardState(1, 0, 0))], on_done=park)
    assert entered.wait(10)
    before = wal.stats()
    first = log.submit_ready(entries=ents(1, 1, 3), hard_state=HardState(1, 1, 0))
    second = log.submit_ready(entries=ents(1, 4, 5), hard_state=HardState(1, 1, 3))  # pipelined
    with pytest.raises(InvariantViolation):
        log.submit_ready(entries=ents(1, 7, 7))  # validated against the staged log
    assert log.last_index() == 0  # nothing durable yet
    assert log.initial_state()[0] == HardState()
    release.set()
    first.result(10)
    second.result(10)
    after = wal.stats()
    # Both Readies (two records each) queued while the writer was busy: one write, one fsync.
    assert after.submissions - before.submissions == 2
    assert after.records - before.records == 4
    assert after.fsyncs - before.fsyncs == 1
    assert log.last_index() == 5 and log.initial_state()[0] == HardState(1, 1, 3)


def test_persist_ready_async(tmp_path: Path, open_wal: list[Wal]) -> None:
    wal = make_wal(open_wal, str(tmp_path))
    logs = [GroupLog(wal, g) for g in range(1, 51)]

    async def main() -> None:
        await asyncio.gather(
            *(
                log.persist_ready(entries=ents(1, 1, 2), hard_state=HardState(1, log.group, 0))
                for log in logs
            )
        )

    asyncio.run(main())
    assert all(log.last_index() == 2 for log in logs)
    assert wal.stats().fsyncs < 50


def test_commit_only_hard_state_needs_no_fsync(tmp_path: Path, open_wal: list[Wal]) -> None:
    wal = make_wal(open_wal, str(tmp_path))
    log = GroupLog(wal, 1)
    log.append(ents(1, 1, 3))
    fsyncs = wal.stats().fsyncs
    log.set_hard_state(HardState(1, 1, 3), sync=False)
    assert wal.stats().fsyncs == fsyncs
    assert log.initial_state()[0].commit == 3
    wal.close()  # close fsyncs the unsynced tail
    assert GroupLog(make_wal(open_wal, str(tmp_path)), 1).initial_state()[0].commit == 3


def test_drop_group_survives_restart(tmp_path: Path, open_wal: list[Wal]) -> None:
    wal = make_wal(open_wal, str(tmp_path))
    log = GroupLog(wal, 3, initial_conf=CONF)
    log.append(ents(1, 1, 5))
    log.create_snapshot(5, CONF, b"x")
    GroupLog(wal, 4).append(ents(1, 1, 1))
    wal.drop_group(3).result(10)
    assert wal.groups() == (4,)
    assert os.listdir(wal.snapshot_dir) == []
    wal.close()
    wal = make_wal(open_wal, str(tmp_path))
    assert wal.groups() == (4,)
    fresh = GroupLog(wal, 3)
    assert (fresh.last_index(), fresh.initial_state()) == (0, (HardState(), ConfState()))


def test_damaged_snapshot_file_stops_the_group(tmp_path: Path, open_wal: list[Wal]) -> None:
    wal = make_wal(open_wal, str(tmp_path))
    log = GroupLog(wal, 1)
    log.append(ents(1, 1, 2))
    log.create_snapshot(2, ConfState(), b"image")
    path = wal.snapshot_path(1, 2)
    wal.close()
    raw = bytearray(Path(path).read_bytes())
    raw[-1] ^= 1
    Path(path).write_bytes(bytes(raw))
    log = GroupLog(make_wal(open_wal, str(tmp_path)), 1)
    with pytest.raises(CorruptRecord, match="checksum"):
        log.snapshot()
    os.unlink(path)
    log2 = GroupLog(make_wal(open_wal, str(tmp_path / "other")), 1)  # other dir: unaffected
    assert log2.last_index() == 0
    with pytest.raises(CorruptRecord, match="missing"):
        log.snapshot()


@pytest.mark.parametrize("rotate", [False, True])
def test_a_restart_resumes_from_the_configuration_of_its_latest_snapshot(
    tmp_path: Path, open_wal: list[Wal], rotate: bool
) -> None:
    """A membership change applied before a snapshot the node created itself is in force after
    a restart: the core re-applies only the configuration changes of entries after the
    snapshot, so the configuration it restarts from must be the snapshot's (not the founding
    one; found by the chaos runner: a restarted replica kept asking removed voters for its
    recovery and never voted again). With ``rotate``, new segments restate the group's head."""
    moved = ConfState((2, 3, 4))
    wal = make_wal(open_wal, str(tmp_path), segment_bytes=1024 if rotate else 64 << 20)
    log = GroupLog(wal, 7, initial_conf=ConfState((1, 2, 4)))
    pad = b"p" * 100
    log.append(ents(1, 2, 30, pad))  # the move's entries (add 3, promote 3, remove 1) among them
    log.set_hard_state(HardState(1, 2, 30))
    log.create_snapshot(30, moved, b"after the move")
    log.append(ents(1, 31, 40, pad))
    log.set_hard_state(HardState(1, 2, 40))
    if rotate:
        assert len(wal.segments()) > 1
    wal.close()

    log = GroupLog(make_wal(open_wal, str(tmp_path)), 7)
    assert log.snapshot().meta == SnapshotMeta(30, 1, moved)
    assert log.initial_state() == (HardState(1, 2, 40), moved)
