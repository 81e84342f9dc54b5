"""Retention counts from when a message first became visible (send time + its send's delay):
a delayed message never expires before it was deliverable."""

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
from cmq.fsm.commands import Expired, Leased, Tidied
from cmq.model import QueueAttributes

T0 = 1_700_000_000_000
HOUR = 3_600_000
RETENTION_S = 3600
WEEK_S = 604_800


def machine() -> QueueMachine:
    m = QueueMachine(MemorySegmentStore(indexes=True))
    attrs = QueueAttributes(
        message_retention_seconds=RETENTION_S, visibility_timeout=30, max_delay_seconds=WEEK_S
    )
    m.execute(CreateQueue("q", attrs, T0))
    return m


def send(m: QueueMachine, now: int, *delays: int) -> None:
    msgs = tuple(NewMessage(f"m{now}-{i}", b"x", False, (), d, None) for i, d in enumerate(delays))
    m.execute(Produce("q", now, msgs))


def test_a_message_delayed_past_the_retention_is_kept_until_retention_after_its_delay() -> None:
    m = machine()
    send(m, T0, 5 * HOUR, 0)  # seq 1 visible at T0+5h, seq 2 at once
    # One hour on, the undelayed one expires; the delayed one, never visible yet, stays.
    assert m.expirable("q", T0 + HOUR)
    assert m.execute(Expire("q", T0 + HOUR)) == Expired(1)
    assert not m.expirable("q", T0 + 5 * HOUR + HOUR - 1)
    # It is delivered once its delay is over, though sent 5 h ago with a 1 h retention.
    got = m.execute(Lease("q", T0 + 5 * HOUR + 10, 10, 30))
    assert isinstance(got, Leased) and [x.seq for x in got.messages] == [1]
    # Retention from its first visibility: expires at T0 + 5 h + 1 h, not before.
    assert m.execute(Expire("q", T0 + 6 * HOUR - 1)) == Expired(0)
    assert m.expirable("q", T0 + 6 * HOUR)
    assert m.execute(Expire("q", T0 + 6 * HOUR)) == Expired(1)
    stats = m.stats("q", T0 + 6 * HOUR)
    assert stats is not None and stats.expired_total == 2 and stats.visible == 0


def test_delayed_messages_amid_undelayed_ones_and_across_a_restore() -> None:
    m = machine()
    send(m, T0, 0, 2 * HOUR, 0, 30 * 60_000, 0)  # seqs 1..5
    send(m, T0 + HOUR // 2, 0)  # seq 6
    m.restore(2, m.snapshot())
    # At T0+1h: 1, 3, 5 expire (visible since T0); 4 (visible T0+30m) and 2 (T0+2h) stay; 6 too.
    assert m.execute(Expire("q", T0 + HOUR)) == Expired(3)
    assert not m.expirable("q", T0 + HOUR + 1)
    m.restore(3, m.snapshot())
    assert m.execute(Expire("q", T0 + HOUR + HOUR // 2)) == Expired(2)  # 4 and 6
    assert m.execute(Expire("q", T0 + 3 * HOUR - 1)) == Expired(0)
    assert m.execute(Expire("q", T0 + 3 * HOUR)) == Expired(1)  # 2


def test_a_delayed_message_copied_forward_keeps_its_retention_start() -> None:
    """`Tidy` copies the last live message of a sparse segment forward: the copy keeps the
    original's first visibility, through a restore too."""
    m = QueueMachine(MemorySegmentStore(indexes=True), segment_bytes=1_000_000, segment_age_ms=1000)
    attrs = QueueAttributes(
        message_retention_seconds=RETENTION_S, visibility_timeout=30, max_delay_seconds=WEEK_S
    )
    m.execute(CreateQueue("q", attrs, T0))
    send(m, T0, 3 * HOUR, *([0] * 99))  # seq 1 delayed 3 h
    got = m.execute(Lease("q", T0 + 1, 99, 30))
    assert isinstance(got, Leased)
    m.execute(Ack("q", T0 + 1, tuple((x.seq, x.lease_id) for x in got.messages)))
    send(m, T0 + 2000, 0)  # seq 101, in a new segment
    tidied = m.execute(Tidy("q", T0 + 2000))
    assert isinstance(tidied, Tidied) and tidied.copied == 1  # seq 1 -> seq 102
    m.restore(4, m.snapshot())
    assert m.execute(Expire("q", T0 + 2 * HOUR)) == Expired(1)  # seq 101 only
    assert not m.expirable("q", T0 + 4 * HOUR - 1)
    got = m.execute(Lease("q", T0 + 3 * HOUR - 1, 10, 30))
    assert isinstance(got, Leased) and not got.messages
    got = m.execute(Lease("q", T0 + 3 * HOUR, 10, 30))
    assert isinstance(got, Leased) and [x.seq for x in got.messages] == [102]
    assert m.expirable("q", T0 + 4 * HOUR)
    assert m.execute(Expire("q", T0 + 4 * HOUR)) == Expired(1)
