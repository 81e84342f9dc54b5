"""Unit tests of `QueueMachine`, one command at a time (through the byte encoding)."""

from __future__ import annotations

import pytest

from cmq import errors
from cmq.errors import InvariantBroken
from cmq.fsm import (
    Ack,
    ChangeVisibility,
    CommandFailed,
    Created,
    CreateQueue,
    DeadLetter,
    DeleteQueue,
    Done,
    EntryOutcomes,
    Expire,
    Expired,
    Lease,
    Leased,
    MemorySegmentStore,
    Nack,
    NewMessage,
    Produce,
    Produced,
    Purge,
    Purged,
    QueueMachine,
    SetAttributes,
    encode_command,
)
from cmq.model import DEDUP_WINDOW_MS, QueueAttributes

from .harness import Applier, leased, legacy_produce

T0 = 1_700_000_000_000
DLQ = QueueAttributes(visibility_timeout=10, dead_letter_queue="dlq", max_receive_count=2)


def msg(i: int, *, delay: int | None = None, dedup: str | None = None) -> NewMessage:
    return NewMessage(f"id{i}", f"body{i}".encode(), False, (("a", str(i)),), delay, dedup)


class Env:
    def __init__(self, attrs: QueueAttributes | None = None, **kw: int) -> None:
        attrs = attrs or QueueAttributes()
        self.store = MemorySegmentStore()
        self._changed: list[str] = []
        self.m = QueueMachine(self.store, **kw)
        self.run = Applier(self.m)
        assert self.run(CreateQueue("q", attrs, T0)) == Created(True, attrs)

    @property
    def changed(self) -> list[str]:
        """Every queue the machine reported changed so far (its `take_changed` effects)."""
        self._changed.extend(sorted(self.m.take_changed()))
        return self._changed

    def produce(self, n: int, now: int = T0, start: int = 0, **kw: int | None) -> list[int]:
        res = self.run(Produce("q", now, tuple(msg(start + i, **kw) for i in range(n))))  # type: ignore[arg-type]
        assert isinstance(res, Produced)
        return [seq for _, seq in res.messages]

    def lease(self, n: int, now: int = T0, vis: int | None = None) -> Leased:
        return leased(self.run, "q", now, n, vis)

    def outcomes(self, cmd: Ack | Nack | ChangeVisibility) -> tuple[str | None, ...]:
        res = self.run(cmd)
        assert isinstance(res, EntryOutcomes)
        return res.outcomes


def test_create_is_idempotent_and_conflicts_on_different_attributes() -> None:
    e = Env()
    assert e.run(CreateQueue("q", QueueAttributes(), T0)) == Created(False, QueueAttributes())
    res = e.run(CreateQueue("q", QueueAttributes(visibility_timeout=5), T0))
    assert isinstance(res, CommandFailed) and res.code == "QueueAlreadyExists"
    bad = e.run(CreateQueue("../etc", QueueAttributes(), T0))
    assert isinstance(bad, CommandFailed) and bad.code == "InvalidQueueName"
    assert e.m.queue_names() == ["q"]


def test_commands_on_missing_queue_fail_with_queue_not_found() -> None:
    e = Env()
    for cmd in (
        DeleteQueue("x"),
        SetAttributes("x", QueueAttributes()),
        Purge("x", T0),
        Produce("x", T0, (msg(1),)),
        Lease("x", T0, 1, None),
        Ack("x", T0, ((1, 1),)),
        ChangeVisibility("x", T0, ((1, 1, 1),)),
        Nack("x", T0, ((1, 1),), 0),
        DeadLetter("x", (1,)),
        Expire("x", T0),
    ):
        res = e.run(cmd)
        assert isinstance(res, CommandFailed) and res.code == "QueueNotFound", cmd
    assert e.m.stats("x", T0) is None and e.m.attributes("x") is None


def test_produce_assigns_consecutive_seqs_and_reads_back() -> None:
    e = Env()
    assert e.produce(3) == [1, 2, 3]
    assert e.produce(2, start=3) == [4, 5]
    got = e.m.read("q", [5, 1, 99])
    assert [(m.seq, m.id, m.body, m.attributes, m.sent_at_ms) for m in got] == [
        (5, "id4", b"body4", (("a", "4"),), T0),
        (1, "id0", b"body0", (("a", "0"),), T0),
    ]
    assert e.changed[-1] == "q"
    stats = e.m.stats("q", T0)
    assert stats is not None and stats.visible == 5 and stats.sent_total == 5


def test_produce_over_the_committed_size_limit_fails_whole_and_changes_nothing() -> None:
    e = Env(QueueAttributes(max_message_size=1024))
    big = NewMessage("big", b"x" * 1025, False, (), None, None)
    res = e.run(Produce("q", T0, (msg(0), big)))
    assert isinstance(res, CommandFailed) and res.code == errors.MessageTooLarge.code
    stats = e.m.stats("q", T0)
    assert stats is not None and stats.sent_total == 0
    assert e.produce(1) == [1]


def test_a_new_queue_takes_one_mebibyte_bodies_by_default() -> None:
    assert QueueAttributes().max_message_size == 1_048_576
    e = Env()
    full = NewMessage("full", b"\xff" * 1_048_576, True, (), None, None)
    over = NewMessage("over", b"\xff" * 1_048_577, True, (), None, None)
    res = e.run(Produce("q", T0, (msg(0), over)))
    assert isinstance(res, CommandFailed) and res.code == errors.MessageTooLarge.code
    assert e.run(Produce("q", T0, (msg(1), full))) == Produced((("id1", 1), ("full", 2)))
    (got,) = e.m.read("q", [2])
    assert got.body == full.body and got.binary


def test_dedup_window() -> None:
    e = Env()
    r1 = e.run(Produce("q", T0, (msg(1, dedup="d"), msg(2, dedup="d"))))
    assert r1 == Produced((("id1", 1), ("id1", 1)))
    # Still inside the window (even after the original is acked): the original is returned.
    lease = e.lease(1)
    e.run(Ack("q", T0, ((1, lease.messages[0].lease_id),)))
    r2 = e.run(Produce("q", T0 + DEDUP_WINDOW_MS - 1, (msg(3, dedup="d"),)))
    assert r2 == Produced((("id1", 1),))
    # At exactly 5 minutes the entry has expired: appended again.
    r3 = e.run(Produce("q", T0 + DEDUP_WINDOW_MS, (msg(4, dedup="d"),)))
    assert r3 == Produced((("id4", 2),))


def test_delays_default_and_per_message() -> None:
    e = Env(QueueAttributes(delay_seconds=2))
    e.produce(1)  # queue default: 2 s
    e.produce(1, start=1, delay=0)
    e.produce(1, start=2, delay=500)
    assert [m.seq for m in e.lease(10).messages] == [2]
    assert e.m.next_visible_at("q") == T0 + 500
    assert not e.m.has_visible("q", T0 + 499) and e.m.has_visible("q", T0 + 500)
    stats = e.m.stats("q", T0)
    assert stats is not None and stats.delayed == 2 and stats.in_flight == 1
    assert [m.seq for m in e.lease(10, T0 + 500).messages] == [3]
    assert [m.seq for m in e.lease(10, T0 + 2000).messages] == [1]


def test_lease_is_fifo_one_lease_per_message_and_re_leases_after_expiry() -> None:
    e = Env(QueueAttributes(visibility_timeout=30))
    e.produce(5)
    first = e.lease(2)
    assert [(m.seq, m.lease_id, m.receive_count) for m in first.messages] == [(1, 1, 1), (2, 2, 1)]
    assert [m.seq for m in e.lease(2).messages] == [3, 4]
    assert [m.seq for m in e.lease(9).messages] == [5]
    assert e.lease(9).messages == ()
    # Not yet expired at +29.999 s; expired (visible again) at +30 s, with a new lease id.
    assert e.lease(9, T0 + 29_999).messages == ()
    again = e.lease(1, T0 + 30_000, vis=1000)
    assert [(m.seq, m.lease_id, m.receive_count) for m in again.messages] == [(1, 6, 2)]


def test_time_never_runs_backwards() -> None:
    e = Env(QueueAttributes(visibility_timeout=10))
    e.produce(1)
    e.lease(1, T0 + 10_000)
    # An older leader's timestamp: the queue clock stays at T0 + 10 s, so still leased.
    assert e.lease(1, T0).messages == ()
    assert [m.seq for m in e.lease(1, T0 + 20_000).messages] == [1]


def test_ack_codes() -> None:
    e = Env(QueueAttributes(visibility_timeout=10))
    e.produce(3)
    lm = e.lease(3).messages
    assert e.outcomes(Ack("q", T0, ((1, lm[0].lease_id), (1, lm[0].lease_id)))) == (
        None,
        errors.LEASE_STALE,
    )
    # Wrong lease id, unknown seq, lease id 0.
    assert e.outcomes(Ack("q", T0, ((2, 99), (77, 1), (3, 0)))) == (errors.LEASE_STALE,) * 3
    # Current lease past its deadline, not re-leased yet: accepted.
    assert e.outcomes(Ack("q", T0 + 60_000, ((2, lm[1].lease_id),))) == (None,)
    # Expired and re-leased: the old lease is stale, the new one works.
    new = e.lease(1, T0 + 60_000).messages[0]
    assert new.seq == 3
    assert e.outcomes(Ack("q", T0 + 60_000, ((3, lm[2].lease_id), (3, new.lease_id)))) == (
        errors.LEASE_STALE,
        None,
    )
    stats = e.m.stats("q", T0 + 60_000)
    assert stats is not None and stats.acked_total == 3 and stats.visible == 0
    # An acked message is never delivered again.
    assert e.lease(10, T0 + 10**7).messages == ()


def test_change_visibility_and_nack() -> None:
    e = Env(QueueAttributes(visibility_timeout=10))
    e.produce(3)
    a, _, c = e.lease(3).messages
    cv = ChangeVisibility("q", T0 + 1000, ((1, a.lease_id, 60_000), (2, 999, 5), (9, 1, 5)))
    assert e.outcomes(cv) == (None, errors.LEASE_STALE, errors.LEASE_STALE)
    # 2 and 3 expired, 1 extended; re-lease only 2.
    assert [m.seq for m in e.lease(1, T0 + 30_000).messages] == [2]
    # c's lease expired and nobody re-leased 3: not in flight (but still current for acks).
    assert e.outcomes(ChangeVisibility("q", T0 + 30_000, ((3, c.lease_id, 5),))) == (
        errors.MESSAGE_NOT_INFLIGHT,
    )
    assert e.outcomes(Nack("q", T0 + 30_000, ((3, c.lease_id),), 0)) == (
        errors.MESSAGE_NOT_INFLIGHT,
    )
    # Nack releases the lease: visible again after the delay; the old lease id is stale.
    assert e.outcomes(Nack("q", T0 + 30_000, ((1, a.lease_id),), 2000)) == (None,)
    assert e.outcomes(Ack("q", T0 + 30_000, ((1, a.lease_id),))) == (errors.LEASE_STALE,)
    leased = e.lease(5, T0 + 31_000).messages
    assert [m.seq for m in leased] == [3]
    leased = e.lease(5, T0 + 32_000).messages
    assert [(m.seq, m.receive_count) for m in leased] == [(1, 2)]
    assert "q" in e.changed


def test_zero_visibility_lease_does_not_return_a_message_twice() -> None:
    e = Env()
    e.produce(2)
    assert [m.seq for m in e.lease(10, vis=0).messages] == [1, 2]
    assert [m.receive_count for m in e.lease(10, vis=0).messages] == [2, 2]


def test_dead_letter_marking_and_removal() -> None:
    e = Env(DLQ)
    e.produce(2)
    for i in range(2):
        assert len(e.lease(2, T0 + i * 20_000).messages) == 2
    res = e.lease(2, T0 + 40_000)
    assert res.messages == () and res.dead_letter == (1, 2)
    assert e.m.pending_dead_letters("q") == [1, 2]
    assert not e.m.has_visible("q", T0 + 10**9)
    stats = e.m.stats("q", T0 + 40_000)
    assert stats is not None and stats.visible == 0 and stats.in_flight == 2
    # The service copies them to the DLQ, then removes them (idempotently).
    assert e.run(DeadLetter("q", (1, 2, 2, 77))) == Done()
    assert e.run(DeadLetter("q", (1,))) == Done()
    assert e.m.pending_dead_letters("q") == []
    stats = e.m.stats("q", T0 + 40_000)
    assert stats is not None and stats.dead_lettered_total == 2 and stats.in_flight == 0


def test_pending_dead_letters_survive_restore_and_purge_clears_them() -> None:
    e = Env(DLQ)
    e.produce(3)
    e.lease(3)
    e.lease(3, T0 + 20_000)
    assert e.lease(3, T0 + 40_000).dead_letter == (1, 2, 3)
    fresh = QueueMachine(e.store)
    fresh.restore(7, e.m.snapshot())
    assert fresh.pending_dead_letters("q") == [1, 2, 3]
    assert fresh.encode_image() == e.m.encode_image()
    assert e.run(Purge("q", T0 + 40_000)) == Purged(3)
    assert e.m.pending_dead_letters("q") == []


def test_no_dead_lettering_without_a_dlq() -> None:
    e = Env(QueueAttributes(visibility_timeout=1))
    e.produce(1)
    for i in range(5):
        assert [m.receive_count for m in e.lease(1, T0 + i * 1000).messages] == [i + 1]


def test_purge_and_expire() -> None:
    e = Env(QueueAttributes(message_retention_seconds=60), segment_bytes=100)
    e.produce(3)
    e.produce(3, now=T0 + 30_000, start=3)
    lm = e.lease(6, T0 + 30_000, vis=100_000).messages
    assert not e.m.expirable("q", T0 + 59_999) and e.m.expirable("q", T0 + 60_000)
    assert e.run(Expire("q", T0 + 60_000)) == Expired(3)
    # Expired messages are gone: their leases are stale.
    assert e.outcomes(Ack("q", T0 + 60_000, ((1, lm[0].lease_id), (4, lm[3].lease_id)))) == (
        errors.LEASE_STALE,
        None,
    )
    assert e.run(Expire("q", T0 + 60_000)) == Expired(0)
    stats = e.m.stats("q", T0 + 60_000)
    assert stats is not None and stats.expired_total == 3 and stats.in_flight == 2
    assert stats.oldest_age_ms == 30_000 and stats.delayed == 0
    assert [m.seq for m in e.lease(9, T0 + 200_000).messages] == [5, 6]
    assert e.run(Purge("q", T0 + 200_000)) == Purged(2)
    assert e.run(Purge("q", T0 + 200_000)) == Purged(0)
    assert e.lease(9, T0 + 10**8).messages == ()
    stats = e.m.stats("q", T0 + 200_000)
    assert stats is not None and (stats.visible, stats.in_flight, stats.oldest_age_ms) == (0, 0, 0)


def test_delete_queue_and_recreate() -> None:
    e = Env()
    e.produce(2)
    assert e.run(DeleteQueue("q")) == Done()
    assert e.m.queue_names() == [] and e.changed[-1] == "q"
    assert e.run(CreateQueue("q", QueueAttributes(), T0)) == Created(True, QueueAttributes())
    assert e.produce(1) == [1]
    assert [m.id for m in e.m.read("q", [1])] == ["id0"]


def test_set_attributes_changes_defaults() -> None:
    e = Env()
    assert e.run(SetAttributes("q", QueueAttributes(visibility_timeout=1))) == Done()
    assert e.m.attributes("q") == QueueAttributes(visibility_timeout=1)
    e.produce(1)
    e.lease(1)
    assert e.lease(1, T0 + 1000).messages[0].receive_count == 2


def test_segments_seal_release_and_files_outlive_one_snapshot() -> None:
    e = Env(segment_bytes=1)  # one message per segment
    e.produce(3)
    lm = e.lease(3).messages
    image_before_ack = e.m.snapshot()
    e.run(Ack("q", T0, tuple((m.seq, m.lease_id) for m in lm[:2])))
    # Released from the state at once, but the files stay until a later snapshot, because
    # a crash now would restart from image_before_ack, which lists them.
    assert len(e.store.segments) == 3
    crashed = QueueMachine(e.store)
    crashed.restore(1, image_before_ack)
    assert [m.seq for m in crashed.read("q", [1, 2, 3])] == [1, 2, 3]
    e2 = Env(segment_bytes=1)
    e2.produce(3)
    lm = e2.lease(3).messages
    e2.run(Ack("q", T0, tuple((m.seq, m.lease_id) for m in lm[:2])))
    e2.m.snapshot()
    assert len(e2.store.segments) == 3
    e2.m.snapshot()
    assert sorted(first for _, first in e2.store.segments) == [3]


def test_undecodable_committed_command_is_a_broken_invariant() -> None:
    e = Env()
    with pytest.raises(InvariantBroken):
        e.m.apply(99, b"\x05garbage")
    with pytest.raises(InvariantBroken):
        e.m.restore(1, b"not an image")


def test_restore_empty_clears_everything() -> None:
    e = Env()
    e.produce(2)
    e.m.restore(0, b"")
    assert e.m.queue_names() == [] and e.store.segments == {}


def test_peek_reads_the_visible_head_in_order_and_changes_nothing() -> None:
    e = Env(QueueAttributes(visibility_timeout=30))
    e.produce(2)
    e.produce(1, start=2, delay=60)  # delayed: not at the head yet
    e.produce(2, start=3)
    e.lease(1)  # seq 1 is leased: not visible
    before = e.m.stats("q", T0)
    e.m.take_changed()
    peeked = e.m.peek("q", 10)
    assert [(m.seq, m.body) for m in peeked] == [(2, b"body1"), (4, b"body3"), (5, b"body4")]
    assert peeked[0].attributes == (("a", "1"),)
    assert [m.seq for m in e.m.peek("q", 2)] == [2, 4]
    assert e.m.peek("missing", 5) == []
    assert e.m.stats("q", T0) == before and not e.m.take_changed()
    # The next lease still gets the head peek showed, as a first delivery.
    assert [(m.seq, m.receive_count) for m in e.lease(1).messages] == [(2, 1)]


def test_a_produce_from_an_older_log_stores_the_same_bytes() -> None:
    """Apply copies a `PRODUCE_RECORDS` message's tail into its record; a `PRODUCE` written
    before it is encoded at apply: both give byte-identical segments and images."""
    binary = NewMessage("b", b"\x00\xff", True, (), 5_000, None)
    cmd = Produce("q", T0 + 1, (msg(1), binary, msg(2, dedup="d"), msg(3, delay=0)))
    envs = [Env(), Env()]
    for e, data in zip(envs, (encode_command(cmd), legacy_produce(cmd)), strict=True):
        e.m.apply(2, data)
        e.m.end_batch()
    assert envs[0].store.segments == envs[1].store.segments != {}
    assert envs[0].m.encode_image() == envs[1].m.encode_image()
    assert [m.body for m in envs[0].m.read("q", [1, 2])] == [b"body1", b"\x00\xff"]
