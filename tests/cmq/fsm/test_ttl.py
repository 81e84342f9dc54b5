"""Per-message time to live (`NewMessage.ttl_ms`): decided in the queue machine at the
leader-stamped send time; a message past its deadline is never delivered, counts as expired
and is archived as ``expired``; the deadlines survive a restore (image version 4)."""

from __future__ import annotations

from cmq.fsm import (
    Ack,
    CreateQueue,
    Expire,
    Lease,
    MemorySegmentStore,
    NewMessage,
    Produce,
    QueueMachine,
    Tidy,
)
from cmq.fsm.commands import CommandFailed, EntryOutcomes, Expired, Leased, Tidied
from cmq.fsm.image import decode_image
from cmq.model import QueueAttributes

from .harness import leased, sent

T0 = 1_700_000_000_000


def machine(**kw: int) -> QueueMachine:
    m = QueueMachine(MemorySegmentStore(indexes=True), **kw)  # type: ignore[arg-type]
    attrs = QueueAttributes(visibility_timeout=30, archive=True, message_retention_seconds=3600)
    m.execute(CreateQueue("q", attrs, T0))
    return m


def send(m: QueueMachine, now: int, *ttls: int | None, delay: int | None = None) -> list[int]:
    msgs = tuple(
        NewMessage(f"m{now}-{i}", b"x", False, (), delay, None, None, ttl)
        for i, ttl in enumerate(ttls)
    )
    return sent(m.execute, "q", now, msgs)


def lease(m: QueueMachine, now: int, n: int = 10) -> list[int]:
    return [x.seq for x in leased(m.execute, "q", now, n, 30_000).messages]


def test_a_message_past_its_ttl_is_never_delivered_and_counts_as_expired() -> None:
    m = machine()
    a, b = send(m, T0, 10_000, None)
    assert lease(m, T0 + 10_000, 1) == [b]  # a's deadline T0+10s reached: not delivered
    stats = m.stats("q", T0 + 10_000)
    assert stats is not None and stats.expired_total == 1 and stats.visible == 0
    assert m.execute(Ack("q", T0 + 10_001, ((a, 1),))) == EntryOutcomes(("LeaseStale",))


def test_a_message_is_delivered_until_its_deadline_and_not_after_a_lease_runs_out() -> None:
    m = machine()
    (a,) = send(m, T0, 10_000)
    assert lease(m, T0 + 9_999) == [a]  # just before its deadline
    # The lease runs out at T0+39.999 s, after the deadline: the message is not delivered again.
    assert lease(m, T0 + 40_000) == []
    stats = m.stats("q", T0 + 40_000)
    assert stats is not None and stats.expired_total == 1
    assert m.execute(Expire("q", T0 + 40_001)) == Expired(0)


def test_ttl_is_counted_from_the_send_not_the_delay_and_survives_a_restore() -> None:
    m = machine()
    (a,) = send(m, T0, 60_000, delay=30_000)  # visible at T0+30 s, gone at T0+60 s
    m.restore(2, m.snapshot())
    assert m.encode_image()[4] == 4  # the deadlines are in the image (version 4)
    assert lease(m, T0 + 29_999) == []
    assert m.due("q", T0 + 59_999) is None
    due = m.due("q", T0 + 60_000)
    assert due is not None and due.expire  # the leader proposes an Expire at the deadline
    assert m.execute(Expire("q", T0 + 60_000)) == Expired(1)
    assert m.encode_image()[4] == 2  # no deadline left: written as before
    assert lease(m, T0 + 60_001) == []
    stats = m.stats("q", T0 + 60_001)
    assert stats is not None and stats.expired_total == 1 and stats.sent_total == 1
    del a


def test_a_ttl_beyond_the_queues_retention_is_refused_whole() -> None:
    m = machine()
    msgs = (
        NewMessage("ok", b"x", False, (), None, None, None, 3_600_000),
        NewMessage("long", b"x", False, (), None, None, None, 3_600_001),
    )
    refused = m.execute(Produce("q", T0, msgs))
    assert isinstance(refused, CommandFailed) and "ttl_seconds" in refused.message
    stats = m.stats("q", T0)
    assert stats is not None and stats.sent_total == 0


def test_a_ttl_message_copied_forward_keeps_its_deadline_and_is_archived_expired() -> None:
    m = machine(segment_bytes=1_000_000, segment_age_ms=1000)
    assert send(m, T0, 50_000, delay=10_000) == [1]  # visible at T0+10 s, gone at T0+50 s
    send(m, T0, *([None] * 99))
    got = m.execute(Lease("q", T0 + 1, 99, 30_000))
    assert isinstance(got, Leased) and 1 not in [x.seq for x in got.messages]
    m.execute(Ack("q", T0 + 1, tuple((x.seq, x.lease_id) for x in got.messages)))
    send(m, T0 + 2000, None)  # seq 101
    tidied = m.execute(Tidy("q", T0 + 2000))
    assert isinstance(tidied, Tidied) and tidied.copied == 1  # seq 1 -> seq 102
    m.restore(3, m.snapshot())
    _, queues = decode_image(m.snapshot())
    assert queues["q"].ttl == {102: T0 + 50_000}
    assert lease(m, T0 + 49_999, 10) == [101, 102]
    assert lease(m, T0 + 80_000, 10) == [101]  # 101's lease ran out; 102 is past its ttl
    # The segment that held the copy is archived with 102's outcome: expired.
    seg = m._queues["q"].segment_of(102)
    assert seg is not None and seg.outcome_of(102 - seg.first_seq) == ("expired", 1)
