"""FIFO queues in `QueueMachine`: group order, group blocking, dedup (by id and content),
sequence numbers, receive-attempt replay, the dead-letter limit, the rules a send must follow,
and the FIFO state in the snapshot image; plus a Hypothesis stateful run checking the FIFO
invariants (and image equality after a restore) over random command sequences."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from cmq import errors
from cmq.fsm import (
    Ack,
    ChangeVisibility,
    CommandFailed,
    Created,
    CreateQueue,
    DeadLetter,
    Lease,
    Leased,
    MemorySegmentStore,
    Nack,
    NewMessage,
    Produce,
    Produced,
    Purge,
    QueueMachine,
    SetAttributes,
    Tidy,
)
from cmq.fsm import fifo as fifo_module
from cmq.fsm import messages as messages_module
from cmq.fsm.fifo_state import MAX_ATTEMPTS
from cmq.model import DEDUP_WINDOW_MS, QueueAttributes

from .harness import Applier, leased, leased_ids

T0 = 1_700_000_000_000
FIFO = QueueAttributes(visibility_timeout=10, fifo=True)
Q = "q.fifo"


def fm(i: int, group: str = "g", dedup: str | None = None, body: bytes | None = None) -> NewMessage:
    return NewMessage(
        f"id{i}", body or f"body{i}".encode(), False, (), None, dedup or f"d{i}", group
    )


class Fifo:
    def __init__(self, attrs: QueueAttributes = FIFO) -> None:
        self.m = QueueMachine(MemorySegmentStore())
        self.run = Applier(self.m)
        assert self.run(CreateQueue(Q, attrs, T0)) == Created(True, attrs)

    def send(self, *msgs: NewMessage, now: int = T0) -> list[tuple[str, int]]:
        res = self.run(Produce(Q, now, msgs))
        assert isinstance(res, Produced), res
        return list(res.messages)

    def lease(self, n: int, now: int = T0, attempt: str | None = None) -> Leased:
        return leased(self.run, Q, now, n, None, attempt=attempt)

    def ids(self, n: int, now: int = T0) -> list[str]:
        return leased_ids(self.m, Q, self.lease(n, now))


def test_create_needs_fifo_name_and_attribute_to_agree() -> None:
    m = QueueMachine(MemorySegmentStore())
    run = Applier(m)
    for name, attrs in (("plain.fifo", QueueAttributes()), ("plain", FIFO)):
        res = run(CreateQueue(name, attrs, T0))
        assert isinstance(res, CommandFailed) and res.code == errors.InvalidParameter.code
        assert m.queue_names() == []
    env = Fifo()
    res = env.run(SetAttributes(Q, QueueAttributes()))
    assert isinstance(res, CommandFailed), "fifo is fixed at creation"
    assert env.m.attributes(Q) == FIFO


def test_send_rules_refuse_and_change_nothing() -> None:
    env = Fifo()
    cases = [
        (NewMessage("a", b"x", False, (), None, "d", None), errors.MissingParameter.code),
        (NewMessage("a", b"x", False, (), 5000, "d", "g"), errors.InvalidParameter.code),
        (NewMessage("a", b"x", False, (), None, None, "g"), errors.InvalidParameter.code),
    ]
    for message, code in cases:
        res = env.run(Produce(Q, T0, (fm(1), message)))
        assert isinstance(res, CommandFailed) and res.code == code
    assert env.lease(10).messages == ()
    # A group id on a standard queue names a tenant (fair queues): an empty one is refused.
    env.run(CreateQueue("std", QueueAttributes(), T0))
    res = env.run(Produce("std", T0, (fm(1, ""),)))
    assert isinstance(res, CommandFailed) and res.code == errors.InvalidParameter.code


def test_group_order_blocking_and_fewest_groups() -> None:
    env = Fifo()
    env.send(fm(1, "a"), fm(2, "b"), fm(3, "a"), fm(4, "b"), fm(5, "a"))
    # One receive drains group a first (as few groups as possible), in send order.
    assert env.ids(2) == ["id1", "id3"]
    # Group a is blocked while id1/id3 are in flight: b comes next, then nothing.
    assert env.ids(10) == ["id2", "id4"]
    assert env.ids(10) == []
    assert not env.m.has_visible(Q, T0)


def test_ack_unblocks_a_group_and_expiry_redelivers_in_order() -> None:
    env = Fifo()
    env.send(fm(1), fm(2), fm(3))
    first = env.lease(1)
    assert leased_ids(env.m, Q, first) == ["id1"]
    assert env.lease(5).messages == ()  # blocked by id1's lease
    # The lease expires: id1 comes again, before id2 (order within the group).
    later = T0 + 10_001
    assert env.m.has_visible(Q, later)
    again = env.lease(1, later)
    assert leased_ids(env.m, Q, again) == ["id1"]
    assert [m.receive_count for m in again.messages] == [2]
    lease = again.messages[0]
    assert env.run(Ack(Q, later, ((lease.seq, lease.lease_id),))).outcomes == (None,)  # type: ignore[union-attr]
    assert env.ids(5, later) == ["id2", "id3"]


def test_visibility_change_of_one_message_keeps_the_group_blocked() -> None:
    env = Fifo()
    env.send(fm(1), fm(2), fm(3))
    got = env.lease(2).messages
    m1, m2 = got
    # id1 visible again at once, id2 still leased: the group stays blocked.
    assert env.run(ChangeVisibility(Q, T0, ((m1.seq, m1.lease_id, 0),))).outcomes == (None,)  # type: ignore[union-attr]
    assert env.lease(5).messages == ()
    assert not env.m.has_visible(Q, T0)
    env.run(Nack(Q, T0, ((m2.seq, m2.lease_id),), 0))
    assert env.ids(5) == ["id1", "id2", "id3"]


def test_dedup_by_id_and_content_returns_the_original() -> None:
    env = Fifo(QueueAttributes(fifo=True, content_based_deduplication=True))
    first = env.send(fm(1, dedup="same"), NewMessage("c1", b"payload", False, (), None, None, "g"))
    again = env.send(fm(2, dedup="same"), NewMessage("c2", b"payload", False, (), None, None, "h"))
    assert again == first
    assert env.m.fifo_ids(Q, [first[1][1]]) == {
        first[1][1]: ("g", hashlib.sha256(b"payload").hexdigest())
    }
    # After the 5-minute window the same id is a new message with a higher seq.
    late = env.send(fm(3, dedup="same"), now=T0 + DEDUP_WINDOW_MS)
    assert late[0][0] == "id3" and late[0][1] > first[1][1]
    assert env.ids(10) == ["id1", "c1", "id3"]  # all of group g


def test_sequence_numbers_are_monotonic() -> None:
    env = Fifo()
    seqs = [s for _, s in env.send(*(fm(i, f"g{i % 3}") for i in range(10)))]
    assert seqs == sorted(seqs) and len(set(seqs)) == 10


def test_receive_attempt_replays_the_same_leases() -> None:
    env = Fifo()
    env.send(fm(1), fm(2), fm(3, "other"))
    first = env.lease(2, attempt="try-1")
    assert leased_ids(env.m, Q, first) == ["id1", "id2"]
    again = env.lease(2, T0 + 1000, attempt="try-1")
    assert again.messages == first.messages  # same messages, same leases (same receipts)
    # Another attempt id is a new receive.
    assert leased_ids(env.m, Q, env.lease(2, T0 + 1000, attempt="try-2")) == ["id3"]
    # Once a message of the attempt is acked, the retry is served as a new receive.
    m1 = first.messages[0]
    env.run(Ack(Q, T0 + 1000, ((m1.seq, m1.lease_id),)))
    assert env.lease(2, T0 + 1000, attempt="try-1").messages == ()


def test_attempts_are_bounded() -> None:
    env = Fifo()
    env.send(*(fm(i, f"g{i}") for i in range(MAX_ATTEMPTS + 5)))
    for i in range(MAX_ATTEMPTS + 5):
        env.lease(1, attempt=f"a{i}")
    q = env.m._queues[Q]
    assert q.fifo is not None and len(q.fifo.attempts) == MAX_ATTEMPTS
    assert "a0" not in q.fifo.attempts


def test_receive_limit_moves_the_head_to_the_dlq_and_unblocks() -> None:
    attrs = QueueAttributes(
        visibility_timeout=1, fifo=True, dead_letter_queue="dlq.fifo", max_receive_count=1
    )
    env = Fifo(attrs)
    env.send(fm(1), fm(2))
    assert env.ids(1) == ["id1"]
    later = T0 + 1001
    res = env.lease(5, later)
    assert res.messages == () and len(res.dead_letter) == 1  # id1 marked, group blocked
    assert env.lease(5, later).messages == ()
    env.run(DeadLetter(Q, res.dead_letter))
    assert env.ids(5, later) == ["id2"]


def test_fifo_queues_are_never_copied_forward() -> None:
    env = Fifo()
    env.m = QueueMachine(MemorySegmentStore(), segment_bytes=64)
    env.run = Applier(env.m)
    env.run(CreateQueue(Q, FIFO, T0))
    env.send(*(fm(i, "g") for i in range(20)))
    res = env.run(Tidy(Q, T0 + 10_000_000))
    assert res.copied == 0  # type: ignore[union-attr]


def test_image_carries_fifo_state_and_restores_it() -> None:
    env = Fifo()
    env.send(fm(1, "a"), fm(2, "a"), fm(3, "b"))
    env.lease(1, attempt="x")
    image = env.m.snapshot()
    fresh = QueueMachine(env.m.store)
    fresh.restore(env.run.index, image)
    assert fresh.encode_image() == image
    # Same decisions after the restore: group a blocked, b available, attempt replayed.
    again = Applier(fresh)
    again.index = env.run.index
    res = again(Lease(Q, T0, 10, None, "x"))
    assert leased_ids(fresh, Q, res) == ["id1"]
    res = again(Lease(Q, T0, 10, None))
    assert leased_ids(fresh, Q, res) == ["id3"]
    # A different dedup table gives a different image.
    env.send(fm(9, "c"))
    assert env.m.snapshot() != image


def test_purge_clears_groups() -> None:
    env = Fifo()
    env.send(fm(1), fm(2))
    env.lease(1)
    env.run(Purge(Q, T0))
    env.send(fm(3, dedup="new"))
    assert env.ids(5) == ["id3"]


# -- Hypothesis: FIFO invariants over random histories ----------------------------------------


class FifoMachine(RuleBasedStateMachine):
    """Random sends (3 groups, repeating dedup ids), receives, acks, visibility changes and
    clock steps. Checked: first deliveries per group in send order; never two messages of a
    group in flight at once; a repeated dedup id within the window never enqueues twice; a
    restored image decides the same."""

    @initialize()
    def start(self) -> None:
        attrs = QueueAttributes(
            visibility_timeout=5, fifo=True, dead_letter_queue="d.fifo", max_receive_count=3
        )
        self.m = QueueMachine(MemorySegmentStore())
        self.run = Applier(self.m)
        self.run(CreateQueue(Q, attrs, T0))
        self.now = T0
        self.counter = 0
        self.sent: dict[str, list[int]] = {}  # group -> seqs in send order
        self.group_of: dict[int, str] = {}
        self.first: dict[str, list[int]] = {}  # group -> seqs in first-delivery order
        self.delivered: set[int] = set()
        self.leases: dict[int, tuple[int, int]] = {}  # seq -> (lease id, deadline)
        self.gone: set[int] = set()
        self.dedup_seen: dict[str, tuple[int, int]] = {}  # dedup id -> (seq, at)

    @rule(group=st.sampled_from("abc"), dedup=st.integers(0, 6), n=st.integers(1, 3))
    def send(self, group: str, dedup: int, n: int) -> None:
        msgs = []
        for _ in range(n):
            self.counter += 1
            msgs.append(fm(self.counter, group, dedup=f"k{dedup}-{self.counter % 2}"))
        res = self.run(Produce(Q, self.now, tuple(msgs)))
        assert isinstance(res, Produced)
        for message, (_, seq) in zip(msgs, res.messages, strict=True):
            key = message.dedup_id or ""
            seen = self.dedup_seen.get(key)
            if seen is not None and self.now - seen[1] < DEDUP_WINDOW_MS:
                assert seq == seen[0], "a dedup id seen within the window enqueued again"
                continue
            self.dedup_seen[key] = (seq, self.now)
            self.sent.setdefault(group, []).append(seq)
            self.group_of[seq] = group

    @rule(n=st.integers(1, 4))
    def receive(self, n: int) -> None:
        busy = self._groups_in_flight()
        res = self.run(Lease(Q, self.now, n, None))
        assert isinstance(res, Leased)
        for lm in res.messages:
            group = self.group_of[lm.seq]
            assert group not in busy, f"group {group} delivered while a message is in flight"
        for seq in res.dead_letter:
            self.leases.pop(seq, None)
        for lm in res.messages:
            if lm.seq not in self.delivered:
                self.delivered.add(lm.seq)
                self.first.setdefault(self.group_of[lm.seq], []).append(lm.seq)
            self.leases[lm.seq] = (lm.lease_id, self.now + 5000)
        if res.dead_letter:
            self.run(DeadLetter(Q, res.dead_letter))
            self.gone.update(res.dead_letter)

    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        live = sorted(s for s, (_, d) in self.leases.items() if d > self.now)
        if not live:
            return
        seq = data.draw(st.sampled_from(live))
        lease_id, _ = self.leases.pop(seq)
        self.run(Ack(Q, self.now, ((seq, lease_id),)))
        self.gone.add(seq)

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        live = sorted(s for s, (_, d) in self.leases.items() if d > self.now)
        if not live:
            return
        seq = data.draw(st.sampled_from(live))
        lease_id, _ = self.leases[seq]
        self.run(ChangeVisibility(Q, self.now, ((seq, lease_id, 0),)))
        self.leases[seq] = (lease_id, self.now)

    @rule(ms=st.sampled_from([1000, 6000, DEDUP_WINDOW_MS]))
    def tick(self, ms: int) -> None:
        self.now += ms

    @rule()
    def restore(self) -> None:
        image = self.m.snapshot()
        fresh = QueueMachine(self.m.store)
        fresh.restore(self.run.index, image)
        assert fresh.encode_image() == image
        self.m = fresh
        index = self.run.index
        self.run = Applier(fresh)
        self.run.index = index

    @invariant()
    def order_and_blocking(self) -> None:
        for group, firsts in getattr(self, "first", {}).items():
            sent = [s for s in self.sent[group] if s in self.delivered]
            assert firsts == sent, f"group {group}: first deliveries {firsts} != sends {sent}"

    def _groups_in_flight(self) -> set[str]:
        return {
            self.group_of[seq]
            for seq, (_, deadline) in self.leases.items()
            if deadline > self.now and seq not in self.gone
        }


FifoMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestFifoMachine = FifoMachine.TestCase


def test_dedup_table_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """At the cap a FIFO queue refuses a send needing a new dedup id (nothing stored); a
    standard queue forgets its oldest id instead. Entries expire after the window."""
    monkeypatch.setattr(fifo_module, "MAX_DEDUP_ENTRIES", 3)
    monkeypatch.setattr(messages_module, "MAX_DEDUP_ENTRIES", 3)
    env = Fifo()
    env.send(fm(1), fm(2), fm(3))
    res = env.run(Produce(Q, T0, (fm(4),)))
    assert isinstance(res, CommandFailed) and res.code == errors.Overloaded.code
    assert env.send(fm(9, dedup="d1")) == [("id1", 1)]  # a known id still answers
    assert env.ids(10) == ["id1", "id2", "id3"]
    assert env.send(fm(4), now=T0 + DEDUP_WINDOW_MS)[0][0] == "id4"  # expired: room again
    std = QueueMachine(MemorySegmentStore())
    run = Applier(std)
    run(CreateQueue("s", QueueAttributes(), T0))
    for i in range(5):
        run(Produce("s", T0, (NewMessage(f"s{i}", b"x", False, (), None, f"k{i}"),)))
    q = std._queues["s"]
    assert list(q.dedup) == ["k2", "k3", "k4"]
