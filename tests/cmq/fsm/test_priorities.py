"""Message priorities in the queue machine (`NewMessage.priority`, the queue attribute
``priorities``, `cmq.fsm.ready.ReadyIndex`): strict order between levels, seq order within one,
FIFO groups never reordered, refusals that store nothing, levels kept across copy-forward, a
restore and a replayed log (image version 5), and a Hypothesis state machine against a model."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from cmq import errors
from cmq.fsm import (
    Ack,
    CreateQueue,
    Lease,
    MemorySegmentStore,
    Nack,
    NewMessage,
    Produce,
    QueueMachine,
    Tidy,
)
from cmq.fsm.commands import CommandFailed, Leased, Tidied
from cmq.model import QueueAttributes

from .harness import leased, sent
from .stateful import T0, VIS, ReadyIndexRules, TwinQueueModel


def machine(priorities: int = 4, **kw: object) -> QueueMachine:
    m = QueueMachine(MemorySegmentStore(indexes=True))
    attrs = QueueAttributes(visibility_timeout=30, priorities=priorities, **kw)  # type: ignore[arg-type]
    name = "q.fifo" if attrs.fifo else "q"
    assert m.execute(CreateQueue(name, attrs, T0)) is not None
    return m


def msg(i: int, priority: int, group: str | None = None) -> NewMessage:
    dedup = f"d{i}" if group is not None else None
    return NewMessage(f"m{i}", b"x", False, (), None, dedup, group, None, priority)


def send(m: QueueMachine, now: int, *levels: int, queue: str = "q") -> list[int]:
    return sent(m.execute, queue, now, (msg(now + i, lv) for i, lv in enumerate(levels)))


def lease(m: QueueMachine, now: int, n: int = 10, queue: str = "q") -> list[tuple[int, int]]:
    return [(x.seq, x.lease_id) for x in leased(m.execute, queue, now, n, VIS).messages]


def test_a_receive_takes_the_highest_level_first_and_seq_order_within_a_level() -> None:
    m = machine()
    seqs = send(m, T0, 0, 2, 1, 2, 0, 3)
    got = [s for s, _ in lease(m, T0 + 1, 3)]
    assert got == [seqs[5], seqs[1], seqs[3]]  # level 3, then level 2 in seq order
    got += [s for s, _ in lease(m, T0 + 2, 10)]
    assert got == [seqs[5], seqs[1], seqs[3], seqs[2], seqs[0], seqs[4]]
    assert m.priorities("q", seqs) == {seqs[1]: 2, seqs[2]: 1, seqs[3]: 2, seqs[5]: 3}


def test_a_higher_level_sent_later_overtakes_and_a_returning_message_keeps_its_level() -> None:
    m = machine()
    low = send(m, T0, 0, 0)
    [(first, lease_id)] = lease(m, T0 + 1, 1)
    assert first == low[0]
    (high,) = send(m, T0 + 2, 1)
    # The leased low message comes back (nack) but the level-1 message goes first.
    m.execute(Nack("q", T0 + 3, ((first, lease_id),), 0))
    assert [s for s, _ in lease(m, T0 + 4, 10)] == [high, low[0], low[1]]


def test_a_priority_the_queue_does_not_have_is_refused_and_nothing_is_stored() -> None:
    m = machine(priorities=3)
    out = m.execute(Produce("q", T0, (msg(1, 0), msg(2, 3))))
    assert isinstance(out, CommandFailed) and out.code == errors.InvalidParameter.code
    assert "priority is 3" in out.message and "[0, 2]" in out.message
    stats = m.stats("q", T0)
    assert stats is not None and stats.sent_total == 0 and stats.visible == 0
    plain = machine(priorities=1)
    refused = plain.execute(Produce("q", T0, (msg(1, 1),)))
    assert isinstance(refused, CommandFailed) and refused.code == errors.InvalidParameter.code


def test_stats_count_the_visible_messages_per_level_only_with_priorities() -> None:
    m = machine(priorities=3)
    send(m, T0, 0, 2, 2, 1)
    lease(m, T0 + 1, 1)  # one level-2 message leased
    stats = m.stats("q", T0 + 1)
    assert stats is not None and stats.visible == 3
    assert stats.visible_by_priority == (1, 1, 1)
    # Its lease runs out: visible again, at its level.
    later = m.stats("q", T0 + 1 + VIS)
    assert later is not None and later.visible_by_priority == (1, 1, 2)
    plain = machine(priorities=1)
    send(plain, T0, 0)
    assert (s := plain.stats("q", T0)) is not None and s.visible_by_priority == ()


def test_the_levels_survive_a_restore_and_equal_a_replayed_log_in_image_version_5() -> None:
    m, twin = machine(), machine()
    for target in (m, twin):
        send(target, T0, 0, 3, 1)
        lease(target, T0 + 1, 1)
    assert m.encode_image()[4] == 5
    m.restore(2, m.snapshot())
    assert m.encode_image(reuse=False) == twin.encode_image(reuse=False)
    for target in (m, twin):
        send(target, T0 + 2, 2)
    assert lease(m, T0 + 3, 10) == lease(twin, T0 + 3, 10)
    # Every leveled message gone: the image is written as before priorities.
    plain = machine()
    send(plain, T0, 0, 0)
    assert plain.encode_image()[4] == 2


def test_fifo_groups_are_visited_by_their_heads_level_and_never_reordered() -> None:
    m = machine(priorities=4, fifo=True)
    msgs = (msg(1, 0, "a"), msg(2, 3, "a"), msg(3, 1, "b"), msg(4, 0, "c"))
    out = m.execute(Produce("q.fifo", T0, msgs))
    assert not isinstance(out, CommandFailed)
    a0, a1, b0, c0 = (seq for _, seq in out.messages)  # type: ignore[union-attr]
    # Group b's head is level 1: first; group a's level-3 message waits behind its level-0 head.
    assert [s for s, _ in lease(m, T0 + 1, 1, "q.fifo")] == [b0]
    assert [s for s, _ in lease(m, T0 + 2, 10, "q.fifo")] == [a0, a1, c0]


def test_a_message_copied_forward_keeps_its_level() -> None:
    m = QueueMachine(MemorySegmentStore(indexes=True))
    attrs = QueueAttributes(visibility_timeout=30, priorities=4)
    m.execute(CreateQueue("q", attrs, T0, segment_bytes=600, segment_age_ms=3_600_000))
    seqs = send(m, T0, *([0] * 7), 2, *([0] * 24))
    high = seqs[7]
    taken = lease(m, T0 + 1, 10) + lease(m, T0 + 2, 10) + lease(m, T0 + 3, 10)
    assert taken[0][0] == high
    m.execute(Nack("q", T0 + 4, (taken[0],), 0))
    m.execute(Ack("q", T0 + 5, tuple((s, lid) for s, lid in taken[1:] if s < seqs[16])))
    tidied = m.execute(Tidy("q", T0 + 6))
    assert isinstance(tidied, Tidied) and tidied.copied >= 1
    (first,) = m.peek("q", 1)  # peeked in delivery order: the copy, at level 2, first
    assert first.id == f"m{T0 + 7}" and first.seq != high
    assert m.priorities("q", [first.seq]) == {first.seq: 2}
    assert [s for s, _ in lease(m, T0 + 7, 1)] == [first.seq]


class ReadyIndexModel(ReadyIndexRules):
    """`ReadyIndex` against a dict: level per live seq, readiness; `first` and iteration order."""

    @rule(level=st.integers(0, 5), ready=st.booleans())
    def add_message(self, level: int, ready: bool) -> None:
        seq = self.next
        self.next += 1
        self.level[seq] = level
        if level:
            self.index.set_level(seq, level)
        if ready:
            self.index.add(seq)
            self.ready.add(seq)

    @invariant()
    def agrees(self) -> None:
        order = sorted(self.ready, key=lambda s: (-self.level[s], s))
        assert list(self.index) == order
        assert len(self.index) == len(order)
        if order:
            assert self.index.first() == order[0]
        for seq, level in self.level.items():
            assert self.index.level_of(seq) == level
        assert self.index.by_level(6) == tuple(
            sum(1 for s in self.ready if self.level[s] == lv) for lv in range(6)
        )


TestReadyIndexModel = ReadyIndexModel.TestCase
TestReadyIndexModel.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


class PriorityQueueModel(TwinQueueModel):
    """A standard queue with 4 levels against a model: which messages a receive gets (highest
    level first, seq order within), acks, nacks, leases running out, delays; a replica that
    restores from snapshots and one that applies every command agree byte for byte."""

    def __init__(self) -> None:
        super().__init__(machine(), machine())
        self.level: dict[int, int] = {}

    def acked(self, seq: int) -> None:
        del self.level[seq]

    @rule(
        levels=st.lists(st.integers(0, 3), min_size=1, max_size=5),
        delay=st.sampled_from([None, 0, 5_000]),
    )
    def send(self, levels: list[int], delay: int | None) -> None:
        msgs = tuple(
            NewMessage(f"m{self.now}-{i}", b"x", False, (), delay, None, None, None, lv)
            for i, lv in enumerate(levels)
        )
        out = self.run(Produce("q", self.now, msgs))
        assert not isinstance(out, CommandFailed)
        for (_, seq), lv in zip(out.messages, levels, strict=True):  # type: ignore[union-attr]
            self.level[seq] = lv
            self.visible_at[seq] = self.now + (delay or 0)

    @rule(n=st.integers(1, 6))
    def receive(self, n: int) -> None:
        ready = [s for s in self.level if self.visible_at[s] <= self.now]
        want = sorted(ready, key=lambda s: (-self.level[s], s))[:n]
        got = self.run(Lease("q", self.now, n, VIS))
        assert isinstance(got, Leased)
        assert [x.seq for x in got.messages] == want
        for x in got.messages:
            self.leases[x.seq] = x.lease_id
            self.visible_at[x.seq] = self.now + VIS

    @invariant()
    def stats_per_level(self) -> None:
        stats = self.m.stats("q", self.now)
        assert stats is not None
        counts = [0, 0, 0, 0]
        for s, at in self.visible_at.items():
            if at <= self.now:
                counts[self.level[s]] += 1
        assert stats.visible_by_priority == tuple(counts)


TestPriorityQueueModel = PriorityQueueModel.TestCase
TestPriorityQueueModel.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
