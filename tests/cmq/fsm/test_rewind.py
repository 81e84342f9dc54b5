"""Rewind by time (`Rewind`, `cmq.fsm.rewind`) and the acknowledged-message retention
(``retain_acked_seconds``): which messages come back, once, with receive counts restarted; the
segments kept until both the retention and the archive are done; a rewound copy never
archived; the state carried by the image (version 6) so a restored replica equals one that
applied the commands."""

from __future__ import annotations

from cmq.fsm import (
    Ack,
    ClaimSegments,
    CreateQueue,
    MarkArchived,
    MemorySegmentStore,
    NewMessage,
    Purge,
    QueueMachine,
    Rewind,
    Rewound,
    SetAttributes,
    Tidy,
    decode_command,
    encode_command,
)
from cmq.fsm.commands import CommandFailed, Leased
from cmq.fsm.rewind import REWIND_MAX
from cmq.model import QueueAttributes

from .harness import leased, sent

T0 = 1_700_000_000_000
DAY = 86_400_000


def machine(archive: bool = False, retain: int = 86_400, **kw: int) -> QueueMachine:
    m = QueueMachine(MemorySegmentStore(indexes=True), **kw)  # type: ignore[arg-type]
    attrs = QueueAttributes(visibility_timeout=30, archive=archive, retain_acked_seconds=retain)
    m.execute(CreateQueue("q", attrs, T0))
    return m


def send(m: QueueMachine, now: int, n: int = 1) -> list[int]:
    msgs = tuple(
        NewMessage(f"m{now}-{i}", b"body", False, (("k", "v"),), None, None) for i in range(n)
    )
    return sent(m.execute, "q", now, msgs)


def receive(m: QueueMachine, now: int, n: int = 100) -> Leased:
    return leased(m.execute, "q", now, n, 30_000)


def consume(m: QueueMachine, now: int, n: int = 100) -> list[str]:
    """Receive and ack up to ``n`` messages; their ids."""
    got = receive(m, now, n)
    out = ids(m, got)
    m.execute(Ack("q", now, tuple((x.seq, x.lease_id) for x in got.messages)))
    return out


def ids(m: QueueMachine, got: Leased) -> list[str]:
    q = m._queues["q"]
    out = []
    for x in got.messages:
        seg = q.segment_of(x.seq)
        assert seg is not None
        out.append(m.store.read(q.key, seg.first_seq, x.seq).id)
    return out


def rewind(m: QueueMachine, now: int, since: int, limit: int = REWIND_MAX) -> int:
    total, start = 0, 0
    while True:
        out = m.execute(Rewind("q", now, since, start, limit))
        assert isinstance(out, Rewound), out
        total += out.count
        if not out.next_seq:
            return total
        start = out.next_seq


def test_the_command_round_trips() -> None:
    cmd = Rewind("q", T0, T0 - 5, 17, 99)
    assert decode_command(encode_command(cmd)) == cmd


def test_acked_messages_sent_at_or_after_since_come_back_once_with_counts_restarted() -> None:
    m = machine()
    send(m, T0, 3)
    send(m, T0 + 1000, 2)  # m{T0+1000}-0, -1
    first = consume(m, T0 + 2000)
    assert len(first) == 5
    assert rewind(m, T0 + 3000, T0 + 1000) == 2
    got = receive(m, T0 + 3000)
    assert sorted(ids(m, got)) == [f"m{T0 + 1000}-0", f"m{T0 + 1000}-1"]
    assert [x.receive_count for x in got.messages] == [1, 1]  # restarted: first receive
    # Still live (leased): a second rewind does not copy them again.
    assert rewind(m, T0 + 3001, T0) == 3  # only the three older ones
    m.execute(Ack("q", T0 + 3002, tuple((x.seq, x.lease_id) for x in got.messages)))
    assert len(receive(m, T0 + 3003).messages) == 3
    stats = m.stats("q", T0 + 3003)
    assert stats is not None and stats.sent_total == 5


def test_live_messages_keep_their_state_and_only_acked_ones_come_back() -> None:
    m = machine()
    _a, b, c = send(m, T0, 3)
    got = receive(m, T0 + 10, 2)  # a, b leased
    m.execute(Ack("q", T0 + 10, ((got.messages[0].seq, got.messages[0].lease_id),)))  # a acked
    assert rewind(m, T0 + 20, T0) == 1  # a only: b stays leased, c stays visible
    again = receive(m, T0 + 20)
    assert sorted(ids(m, again)) == sorted([f"m{T0}-0", f"m{T0}-2"])
    del b, c


def test_no_retention_means_nothing_comes_back() -> None:
    m = machine(retain=0)
    send(m, T0, 2)
    consume(m, T0 + 1)
    assert m.execute(Rewind("q", T0 + 2, 0)) == Rewound(0, 0)
    assert receive(m, T0 + 3).messages == ()


def test_retention_bounds_what_comes_back_and_a_released_segment_goes_after_it() -> None:
    m = machine(retain=60, segment_age_ms=1000)
    send(m, T0, 2)
    consume(m, T0 + 1)
    assert m.execute(Tidy("q", T0 + 2000)) is not None  # sealed; all acked: released, kept
    q = m._queues["q"]
    assert [s.state() for s in q.segments] == ["archived_pending"]
    assert m.due("q", T0 + 59_999) is None
    due = m.due("q", T0 + 60_000)
    assert due is not None and due.tidy
    assert rewind(m, T0 + 60_000, T0) == 0  # past the retention: not retained any more
    m.execute(Tidy("q", T0 + 60_000))
    assert q.segments == []


def test_expired_dead_lettered_and_purged_messages_are_not_rewound() -> None:
    m = machine()
    send(m, T0, 2)
    m.execute(Purge("q", T0 + 1))
    assert rewind(m, T0 + 2, T0) == 0


def test_fifo_queues_refuse_a_rewind() -> None:
    m = QueueMachine(MemorySegmentStore())
    m.execute(CreateQueue("f.fifo", QueueAttributes(fifo=True, retain_acked_seconds=60), T0))
    out = m.execute(Rewind("f.fifo", T0, 0))
    assert isinstance(out, CommandFailed) and out.code == "InvalidParameter"


def test_a_long_rewind_goes_in_parts() -> None:
    m = machine()
    send(m, T0, 10)
    consume(m, T0 + 1)
    out = m.execute(Rewind("q", T0 + 2, T0, 0, 4))
    assert out == Rewound(4, 5)
    out = m.execute(Rewind("q", T0 + 2, T0, 5, 4))
    assert out == Rewound(4, 9)
    assert m.execute(Rewind("q", T0 + 2, T0, 9, 4)) == Rewound(2, 0)
    assert len(receive(m, T0 + 3).messages) == 10


def test_the_archive_writes_a_rewound_message_once() -> None:
    m = machine(archive=True, segment_age_ms=1000)
    send(m, T0, 3)
    consume(m, T0 + 1)
    m.execute(Tidy("q", T0 + 2000))  # sealed and released: waits for the archive
    q = m._queues["q"]
    (seg,) = q.segments
    assert seg.state() == "released"
    assert rewind(m, T0 + 2001, T0) == 3
    consume(m, T0 + 2002)  # the copies are acked in turn
    m.execute(Tidy("q", T0 + 4000))  # seals the copies' segment: released, nothing to archive
    released = m.segments("q", "released")
    assert released is not None and [s.first_seq for s in released] == [1]
    _, chunks = m.records("q", 1)
    records = [r for chunk in chunks for r in chunk]
    assert [r.outcome for r in records] == ["acked"] * 3
    # The copies' segment has no record to archive: retained for rewinds only.
    assert [s.state() for s in q.segments] == ["released", "archived_pending"]
    assert q.segments[1].archivable() == 0
    # The archive marks the original segment: kept for rewinds (archived), not claimable.
    m.execute(ClaimSegments("q", T0 + 4001, "b1", (1,), 60_000))
    m.execute(MarkArchived("q", T0 + 4002, "b1", (1,)))
    assert seg.state() == "archived_pending" and seg in q.segments
    again = m.execute(ClaimSegments("q", T0 + 4003, "b2", (1,), 60_000))
    assert again.refused == ((1, "not_found", ""),)  # type: ignore[union-attr]
    assert m.segments("q", "released") == []
    # A second rewind brings the messages back again (their copies were acked).
    assert rewind(m, T0 + 4004, T0) == 3


def test_a_restored_replica_equals_one_that_applied_the_commands() -> None:
    m = machine(archive=True, segment_age_ms=1000)
    send(m, T0, 5)
    consume(m, T0 + 1)
    m.execute(Tidy("q", T0 + 2000))
    m.execute(MarkArchived("q", T0 + 2001, "b1", (1,)))
    assert rewind(m, T0 + 2002, T0) == 5
    image = m.snapshot()
    assert image[4] == 6  # archived-but-retained segments and rewound copies: version 6
    other = QueueMachine(m.store)
    other.restore(9, image)
    assert other.encode_image() == m.encode_image()
    # Both deliver the same copies once, and never archive them.
    for mm in (m, other):
        got = receive(mm, T0 + 3000)
        assert sorted(ids(mm, got)) == sorted(f"m{T0}-{i}" for i in range(5))
    assert other.encode_image() == m.encode_image()


def test_a_shorter_retention_lets_kept_segments_go() -> None:
    m = machine(segment_age_ms=1000)
    send(m, T0, 2)
    consume(m, T0 + 1)
    m.execute(Tidy("q", T0 + 2000))
    q = m._queues["q"]
    assert len(q.segments) == 1
    attrs = QueueAttributes(visibility_timeout=30, retain_acked_seconds=0)
    m.execute(SetAttributes("q", attrs))
    assert q.segments == []
    assert m.encode_image()[4] == 2  # nothing of the rewind left: written as before


def test_a_rewound_copy_copied_forward_stays_a_rewound_copy() -> None:
    m = machine(archive=True, segment_age_ms=1000)
    send(m, T0, 100)
    consume(m, T0 + 1)
    assert rewind(m, T0 + 2, T0 + 0) == 100  # copies 101..200 in the active segment
    got = receive(m, T0 + 3, 99)
    m.execute(Ack("q", T0 + 3, tuple((x.seq, x.lease_id) for x in got.messages)))
    send(m, T0 + 2000, 1)  # seals the copies' segment (age): sparse, one copy live
    m.execute(Tidy("q", T0 + 2000))
    q = m._queues["q"]
    live = [s for s in q.moved if s > 200]
    assert len(live) == 1
    seg = q.segment_of(live[0])
    assert seg is not None and (live[0] - seg.first_seq) in seg.replays
    # Acked, it is never archived: no segment's stream carries it twice.
    got = receive(m, T0 + 2001)
    m.execute(Ack("q", T0 + 2001, tuple((x.seq, x.lease_id) for x in got.messages)))
    assert sum(s.archivable() for s in q.segments) == 101  # 100 originals + the new send
