"""The queue machine's effects: apply records which queues changed (the node wakes long polls
from them after the apply) instead of calling out, and timed work is a pure query (`due`)."""

from __future__ import annotations

from cmq.fsm import (
    Ack,
    CreateQueue,
    DeadLetter,
    Expire,
    Lease,
    Leased,
    MemorySegmentStore,
    NewMessage,
    Produce,
    QueueMachine,
)
from cmq.fsm.machine import Due
from cmq.model import QueueAttributes

from .harness import Applier

T0 = 1_700_000_000_000


def new(i: int) -> NewMessage:
    return NewMessage(f"id{i}", b"body", False, (), None, None)


def machine(**queues: QueueAttributes) -> tuple[QueueMachine, Applier]:
    m = QueueMachine(MemorySegmentStore())
    run = Applier(m)
    for name, attrs in queues.items():
        run(CreateQueue(name, attrs, T0))
    return m, run


def test_apply_records_the_queues_that_changed_and_calls_nothing() -> None:
    m, run = machine(a=QueueAttributes(), b=QueueAttributes())
    assert m.take_changed() == {"a", "b"}
    assert m.take_changed() == set()  # taken: handed over once
    run(Produce("a", T0, (new(1),)))
    assert m.take_changed() == {"a"}  # the wake-up effect of a send
    leased = run(Lease("a", T0, 1, None))
    assert isinstance(leased, Leased) and m.take_changed() == set()  # a lease only hides
    run(Ack("a", T0, ((leased.messages[0].seq, leased.messages[0].lease_id),)))
    run(Produce("b", T0, (new(2),)))
    assert m.take_changed() == {"a", "b"}
    run(Produce("missing", T0, (new(3),)))  # a failed command changes nothing
    assert m.take_changed() == set()


def test_restore_reports_every_queue_before_and_after() -> None:
    m, _ = machine(a=QueueAttributes(), b=QueueAttributes())
    image = m.snapshot()
    other, _ = machine(c=QueueAttributes())
    other.take_changed()
    other.restore(5, image)
    assert other.take_changed() == {"a", "b", "c"}


def test_due_reports_expirable_queues() -> None:
    m, run = machine(q=QueueAttributes(message_retention_seconds=60))
    assert m.due("q", T0) is None
    run(Produce("q", T0, (new(1), new(2))))
    assert m.due("q", T0 + 59_999) is None
    later = T0 + 60_000
    assert m.due("q", later) == Due("q", later, True, (), "")
    run(Expire("q", later))
    assert m.due("q", later) is None
    assert m.due("missing", later) is None


def test_due_reports_messages_waiting_for_the_dead_letter_queue() -> None:
    attrs = QueueAttributes(visibility_timeout=1, dead_letter_queue="dlq", max_receive_count=1)
    m, run = machine(q=attrs, dlq=QueueAttributes())
    run(Produce("q", T0, tuple(new(i) for i in range(5))))
    run(Lease("q", T0, 10, None))
    assert m.due("q", T0) is None
    # Received once each: the next lease marks them for the dead-letter queue instead.
    res = run(Lease("q", T0 + 2000, 10, None))
    assert isinstance(res, Leased) and res.messages == () and res.dead_letter == (1, 2, 3, 4, 5)
    assert m.due("q", T0 + 2000) == Due("q", T0 + 2000, False, (1, 2, 3, 4, 5), "dlq")
    assert m.due("q", T0 + 2000, dead_letter_limit=2) == Due("q", T0 + 2000, False, (1, 2), "dlq")
    run(DeadLetter("q", (1, 2, 3, 4, 5)))
    assert m.due("q", T0 + 2000) is None
