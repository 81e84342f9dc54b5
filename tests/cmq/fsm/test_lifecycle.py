"""The segment lifecycle of `QueueMachine`: release, outcomes, archive claims, MarkArchived,
copy-forward of sparse segments (`Tidy`) and sealing by age; across snapshots, restores and
shipped snapshots (`cmq.fsm.lifecycle`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cmq.errors import CorruptSegment, SegmentNotFound, SegmentNotReleased
from cmq.fsm import (
    Ack,
    ChangeVisibility,
    CommandFailed,
    CreateQueue,
    DeadLetter,
    EntryOutcomes,
    Expire,
    FileSegmentStore,
    Lease,
    Leased,
    MemorySegmentStore,
    Produce,
    Purge,
    QueueMachine,
    SetAttributes,
)
from cmq.fsm.commands import (
    ClaimSegments,
    MarkArchived,
    SegmentsArchived,
    SegmentsClaimed,
    Tidied,
    Tidy,
)
from cmq.model import QueueAttributes
from cmq.segment_values import SegmentRecord

from .harness import T0, Applier, leased_ids
from .lifecycle_env import Env, machine_run, msg, pinned


def test_a_released_segment_without_archive_is_forgotten_and_its_files_go() -> None:
    e = Env(QueueAttributes())
    e.produce(25)  # segments 1..10, 11..20 sealed; 21.. active
    assert e.states() == [(1, "sealed"), (11, "sealed"), (21, "active")]
    e.ack(e.lease(10))
    assert e.states() == [(11, "sealed"), (21, "active")]
    stats = e.m.stats("q", T0)
    assert isinstance(e.store, MemorySegmentStore)
    assert stats is not None and stats.segments.archived_pending == 1
    assert stats.disk_bytes == sum(len(b) for b in e.store.segments.values())
    [pending] = e.m.segments("q", "archived_pending") or []
    assert (pending.first_seq, pending.last_seq, pending.state) == (1, 10, "archived_pending")
    assert ("q.1", 1) in e.store.segments
    e.m.snapshot()  # records the release...
    assert ("q.1", 1) in e.store.segments
    e.m.snapshot()  # ...and the next one removes the files
    assert ("q.1", 1) not in e.store.segments
    stats = e.m.stats("q", T0)
    assert stats is not None and stats.segments.archived_pending == 0
    assert stats.disk_bytes == sum(len(b) for b in e.store.segments.values())


def test_outcomes_and_receive_counts_are_recorded_and_streamed() -> None:
    e = Env()
    e.produce(10)  # 1..10
    e.produce(1, T0 + 1)  # seals 1..10
    first = e.lease(3, T0 + 2)  # 1, 2, 3 received once
    e.ack(first, T0 + 2)
    again = e.lease(2, T0 + 3, vis=0)  # 4, 5 received once, visible again at once
    assert [m.seq for m in again.messages] == [4, 5]
    twice = e.lease(2, T0 + 4, vis=0)  # 4, 5 again: count 2
    e.ack(Leased(twice.messages[:1], ()), T0 + 4)  # 4 acked after 2 receives
    third = e.lease(1, T0 + 5)  # 5 reached max_receive_count: marked for the DLQ instead
    assert third.dead_letter == (5,) and [m.seq for m in third.messages] == [6]
    e.run(DeadLetter("q", (5,)))
    e.run(Expire("q", T0 + 60_000 + 2))  # 6..10 sent at T0: expired (11 is younger)
    assert e.states() == [(1, "released"), (11, "active")]
    records = e.records(1)
    assert [(r.seq, r.outcome, r.receive_count) for r in records] == [
        (1, "acked", 1),
        (2, "acked", 1),
        (3, "acked", 1),
        (4, "acked", 2),
        (5, "dead_lettered", 2),
        (6, "expired", 1),  # leased by the Lease that marked 5, never acked
        (7, "expired", 0),
        (8, "expired", 0),
        (9, "expired", 0),
        (10, "expired", 0),
    ]
    assert [(r.id, r.body, r.attributes, r.sent_at_ms) for r in records[:1]] == [
        ("id0", b"body0", (("k", "0"),), T0)
    ]
    e.produce(9, T0 + 60_003)
    e.produce(1, T0 + 60_004)  # seals 11..20
    e.run(Purge("q", T0 + 60_005))
    outcomes = [r.outcome for r in e.records(11)]  # 11 (sent at T0 + 1) expired above
    assert outcomes == ["expired"] + ["purged"] * 9
    info = {s.first_seq: s for s in e.m.segments("q", "released") or []}
    assert info[1].count == 10 and info[1].last_seq == 10 and len(info[1].checksum) == 8


def test_claims_and_mark_archived_are_conditional_and_idempotent() -> None:
    e = Env()
    e.produce(21)
    e.ack(e.lease(20))
    assert e.states() == [(1, "released"), (11, "released"), (21, "active")]
    claim = e.run(ClaimSegments("q", T0 + 1, "a", (1, 11, 21, 99), 1000))
    assert claim == SegmentsClaimed((1, 11), ((21, "not_released", ""), (99, "not_found", "")))
    assert e.run(ClaimSegments("q", T0 + 2, "b", (1,), 1000)) == SegmentsClaimed(
        (), ((1, "claimed", "a"),)
    )
    assert e.run(ClaimSegments("q", T0 + 3, "a", (1,), 5000)) == SegmentsClaimed((1,), ())
    listed = {s.first_seq: s.claim for s in e.m.segments("q") or []}
    assert listed[1] is not None and listed[1].expires_at_ms == T0 + 3 + 5000
    # 11's claim by "a" expires at T0 + 1001: then "b" may claim and archive it.
    refused = e.run(MarkArchived("q", T0 + 500, "b", (11,)))
    assert refused == SegmentsArchived((), (), ((11, "claimed", "a"),))
    assert e.run(ClaimSegments("q", T0 + 1002, "b", (11,), 1000)) == SegmentsClaimed((11,), ())
    done = e.run(MarkArchived("q", T0 + 1003, "a", (1, 21)))
    assert done == SegmentsArchived((1,), (), ((21, "not_released", ""),))
    assert e.run(MarkArchived("q", T0 + 1004, "a", (1, 77))) == SegmentsArchived((), (1, 77), ())
    assert e.run(MarkArchived("q", T0 + 1005, "b", (11,))) == SegmentsArchived((11,), (), ())
    assert e.states() == [(21, "active")]
    bad = e.run(ClaimSegments("q", T0, "no spaces", (1,), 10))
    assert isinstance(bad, CommandFailed) and bad.code == "InvalidParameter"
    missing = e.run(MarkArchived("nope", T0, "a", (1,)))
    assert isinstance(missing, CommandFailed) and missing.code == "QueueNotFound"
    with pytest.raises(SegmentNotFound):
        e.m.records("q", 1)
    with pytest.raises(SegmentNotReleased):
        e.m.records("q", 21)


def test_turning_archive_off_releases_the_kept_segments() -> None:
    e = Env()
    e.produce(11)
    e.ack(e.lease(10))
    assert e.states() == [(1, "released"), (11, "active")]
    stats = e.m.stats("q", T0 + 7000)
    assert stats is not None and stats.oldest_unarchived_ms == 7000  # the archive's backlog
    e.run(SetAttributes("q", QueueAttributes()))
    assert e.states() == [(11, "active")]
    stats = e.m.stats("q", T0 + 7000)
    assert stats is not None and stats.oldest_unarchived_ms == 0


def test_a_leased_message_is_copied_forward_and_its_receipt_still_works() -> None:
    e = Env(QueueAttributes(archive=True, visibility_timeout=30))
    held = pinned(e, T0)
    assert e.states() == [(1, "sealed"), (11, "released"), (21, "sealed"), (31, "active")]
    due = e.m.due("q", T0 + 1)
    assert due is not None and due.tidy
    assert e.run(Tidy("q", T0 + 1)) == Tidied(0, 2)  # 1 (leased) and 30 (ready) copied
    assert e.states() == [
        (1, "released"),
        (11, "released"),
        (21, "released"),
        (31, "active"),
    ]
    assert [r.seq for r in e.records(1)] == list(range(2, 11))  # 1 moved: not archived here
    listed = {s.first_seq: s.count for s in e.m.segments("q") or []}
    assert listed[1] == 9 and listed[21] == 9
    # The lease survived the copy: extend it and ack with the receipt's (old) seq.
    old = held.messages[0]
    # A lease answered after a copy applied reads the copy, named by the leased seq.
    [read] = e.m.read("q", [old.seq])
    assert (read.seq, read.id, read.body, read.sent_at_ms) == (old.seq, "id0", b"body0", T0)
    res = e.run(ChangeVisibility("q", T0 + 2, ((old.seq, old.lease_id, 60_000),)))
    assert res == EntryOutcomes((None,))
    assert leased_ids(e.m, "q", e.lease(5, T0 + 3))[1] == "id29"  # 31, then 30's copy (new seq)
    assert e.run(Ack("q", T0 + 4, ((old.seq, old.lease_id),))) == EntryOutcomes((None,))
    assert e.run(Ack("q", T0 + 4, ((old.seq, old.lease_id),))) == EntryOutcomes(("LeaseStale",))
    stats = e.m.stats("q", T0 + 5)
    assert stats is not None and stats.in_flight == 2  # 31 and the copy of 30


def test_copying_forward_is_deterministic_and_survives_restore_and_shipping(
    tmp_path: Path,
) -> None:
    m1, _, _ = machine_run(MemorySegmentStore())
    store = FileSegmentStore(tmp_path / "a")
    m2, run2, held = machine_run(store)
    image = m2.snapshot()
    assert image == m1.snapshot()
    before = {
        s.first_seq: [r for b in m2.records("q", s.first_seq)[1] for r in b]
        for s in m2.segments("q", "released") or []
    }
    assert before
    # Restart over the same files.
    store.close()
    again = QueueMachine(FileSegmentStore(tmp_path / "a"))
    again.restore(run2.index, image)
    assert again.encode_image() == image
    after = {first: [r for b in again.records("q", first)[1] for r in b] for first in before}
    assert after == before
    # A follower without the files installs a shipped snapshot.
    shipped = m2.export_snapshot(image)
    follower = QueueMachine(FileSegmentStore(tmp_path / "b"))
    follower.restore(run2.index, shipped)
    assert follower.encode_image() == image
    got = {first: [r for b in follower.records("q", first)[1] for r in b] for first in before}
    assert got == before
    # The held message is acked through its first receipt on every copy of the state.
    old = held.messages[0]
    for m in (again, follower):
        Applier_ = Applier(m)
        Applier_.index = run2.index
        assert Applier_(Ack("q", T0 + 9, ((old.seq, old.lease_id),))) == EntryOutcomes((None,))


def test_archived_segment_files_are_gone_after_a_restart(tmp_path: Path) -> None:
    store = FileSegmentStore(tmp_path)
    e = Env(store=store)
    e.produce(21)
    e.ack(e.lease(20))
    e.m.snapshot()
    seg_file = tmp_path / "q.1" / f"{1:020d}.seg"
    assert seg_file.exists()
    assert e.run(MarkArchived("q", T0, "a", (1, 11))) == SegmentsArchived((1, 11), (), ())
    image = e.m.snapshot()  # the image no longer lists 1 and 11; crash before the next one
    assert seg_file.exists()
    store.close()
    restarted = QueueMachine(FileSegmentStore(tmp_path))
    restarted.restore(e.run.index, image)
    assert not seg_file.exists() and not (tmp_path / "q.1" / f"{11:020d}.seg").exists()
    assert [s.first_seq for s in restarted.segments("q") or []] == [21]


def test_the_active_segment_is_sealed_by_age_then_released() -> None:
    e = Env(QueueAttributes(archive=True))
    e.run(CreateQueue("slow", QueueAttributes(), T0, 1 << 20, 1000))
    e.run(Produce("slow", T0, (msg(1),)))
    res = e.run(Lease("slow", T0, 1, None))
    assert isinstance(res, Leased)
    m0 = res.messages[0]
    e.run(Ack("slow", T0, ((m0.seq, m0.lease_id),)))
    assert e.m.due("slow", T0 + 999) is None
    due = e.m.due("slow", T0 + 1000)
    assert due is not None and due.tidy
    assert e.run(Tidy("slow", T0 + 1000)) == Tidied(1, 0)
    assert e.m.segments("slow") == []  # sealed, every message deleted: released (no archive)


def test_a_damaged_segment_is_never_streamed_as_good() -> None:
    e = Env()
    e.produce(11)
    e.ack(e.lease(10))
    assert isinstance(e.store, MemorySegmentStore)
    buf = e.store.segments[("q.1", 1)]
    buf[len(buf) - 3] ^= 0xFF  # a byte of the last record's body
    checksum, batches = e.m.records("q", 1, chunk=100)
    got: list[SegmentRecord] = []
    with pytest.raises(CorruptSegment):
        for batch in batches:
            got.extend(batch)
    assert len(got) < 10 and len(checksum) == 8


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_random_histories_with_tidy_claims_and_archival_are_deterministic(
    tmp_path: Path, seed: int
) -> None:
    """Two machines (memory and file stores) fed the same random commands (sends, leases with
    short visibilities, acks and visibility changes through old receipts, nacks, dead-letter
    moves, expiry, purges, Tidy, claims, MarkArchived, archive switched on and off) answer and
    encode alike; a restart from any snapshot over the files, replaying the commands since,
    reaches the same image; released segments stream the same records from both."""
    import random

    rng = random.Random(seed)
    attrs = QueueAttributes(
        archive=True,
        visibility_timeout=1,
        message_retention_seconds=60,
        dead_letter_queue="dlq",
        max_receive_count=3,
    )
    a = QueueMachine(MemorySegmentStore())
    fdir = tmp_path / "b"
    b_store = FileSegmentStore(fdir)
    b = QueueMachine(b_store)
    run_a, run_b = Applier(a), Applier(b)
    since: list[object] = []
    image, image_index = b.snapshot(), 0
    now = T0
    tokens: list[tuple[int, int]] = []
    n = 0

    def both(cmd: object) -> object:
        ra, rb = run_a(cmd), run_b(cmd)  # type: ignore[arg-type]
        assert ra == rb, cmd
        since.append(cmd)
        return ra

    both(CreateQueue("q", attrs, now, 600, 5_000))
    for _ in range(400):
        now += rng.choice((0, 1, 10, 200, 1500))
        op = rng.random()
        if op < 0.25:
            k = rng.randint(1, 6)
            both(Produce("q", now, tuple(msg(n + i) for i in range(k))))
            n += k
        elif op < 0.45:
            res = both(Lease("q", now, rng.randint(1, 5), rng.choice((None, 0, 50, 3000))))
            assert isinstance(res, Leased)
            tokens += [(m.seq, m.lease_id) for m in res.messages]
        elif op < 0.6 and tokens:
            picked = rng.sample(tokens, min(len(tokens), rng.randint(1, 4)))
            both(Ack("q", now, tuple(picked)))
        elif op < 0.65 and tokens:
            seq, lease = rng.choice(tokens)
            both(ChangeVisibility("q", now, ((seq, lease, rng.choice((0, 100, 5000))),)))
        elif op < 0.68 and tokens:
            from cmq.fsm import Nack

            both(Nack("q", now, (rng.choice(tokens),), rng.choice((0, 100))))
        elif op < 0.72:
            pending = a.pending_dead_letters("q")
            if pending:
                both(DeadLetter("q", tuple(pending[:3])))
        elif op < 0.8:
            both(Tidy("q", now))
        elif op < 0.83:
            both(Expire("q", now))
        elif op < 0.84:
            both(Purge("q", now))
        elif op < 0.9:
            released = [s.first_seq for s in a.segments("q", "released") or []]
            if released:
                pick = tuple(rng.sample(released, min(len(released), 2)))
                batch = rng.choice(("x", "y"))
                if rng.random() < 0.5:
                    both(ClaimSegments("q", now, batch, pick, rng.choice((10, 10_000))))
                else:
                    both(MarkArchived("q", now, batch, pick))
        elif op < 0.91:
            both(SetAttributes("q", attrs if rng.random() < 0.7 else QueueAttributes()))
        elif op < 0.96:
            assert a.encode_image() == b.encode_image()
            a.snapshot()
            image, image_index, since = b.snapshot(), run_b.index, []
        else:
            before = b.encode_image()
            b_store.close()
            b_store = FileSegmentStore(fdir)
            b = QueueMachine(b_store)
            b.restore(image_index, image)
            run_b = Applier(b)
            run_b.index = image_index
            replay = since
            since = []
            for cmd in replay:
                run_b(cmd)  # type: ignore[arg-type]
                since.append(cmd)
            assert b.encode_image() == before
    assert a.encode_image() == b.encode_image()
    for seg in a.segments("q", "released") or []:
        records_a = [r for batch in a.records("q", seg.first_seq)[1] for r in batch]
        records_b = [r for batch in b.records("q", seg.first_seq)[1] for r in batch]
        assert records_a == records_b and len(records_a) == seg.count
