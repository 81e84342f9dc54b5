"""`Lease` in the queue machine (pure): standard queues lease visible messages by priority
level, highest first, in seq order within a level (`cmq.fsm.ready.ReadyIndex.pick`), and at level
0 round-robin over tenants once messages have group ids (`cmq.fsm.tenants`); FIFO queues
follow `cmq.fsm.fifo` (group order, blocked groups, receive-attempt replay). Both mark a
message that reached the queue's receive limit for the dead-letter queue instead.
"""

from __future__ import annotations

from cmq.fsm import fifo as fifo_rules
from cmq.fsm.cells import COUNT, FLAGS, LEASE, PENDING_DEAD_LETTER, VIS
from cmq.fsm.commands import Lease, Leased, LeasedMessage
from cmq.fsm.queue import QueueState

__all__ = ["MAX_DEAD_LETTER_PER_LEASE", "lease"]

MAX_DEAD_LETTER_PER_LEASE = 100
"""At most this many messages are marked pending-dead-letter by one `Lease` (bounds its work)."""


def lease(q: QueueState, cmd: Lease) -> Leased:
    """Apply ``cmd`` to ``q`` (see the module docstring)."""
    q.advance(cmd.now_ms)
    attrs = q.attributes
    visibility = attrs.visibility_timeout * 1000 if cmd.visibility_ms is None else cmd.visibility_ms
    deadline = q.clock + max(0, visibility)
    limit = attrs.max_receive_count if attrs.dead_letter_queue else 0
    if q.fifo is not None:
        return _lease_fifo(q, cmd, deadline, limit)
    touched = q.touched
    leased: list[LeasedMessage] = []
    dead: list[int] = []
    ready = q.ready
    ready_all = ready.all
    # No level above 0 and no tenant: the lowest seq, straight from the bitmap.
    plain = not ready.members and ready.tenants is None
    while len(leased) < cmd.max_messages and ready_all:
        seq = ready_all.min() if plain else ready.pick()
        slot = touched.slot_of.get(seq)
        if limit > 0 and slot is not None and touched.get(slot, COUNT) >= limit:
            if len(dead) >= MAX_DEAD_LETTER_PER_LEASE:
                break
            _mark_dead_letter(q, seq)
            dead.append(seq)
            continue
        leased.append(_lease_one(q, seq, deadline))
    # Scheduled after the loop: with a zero visibility a message is ready again at once and
    # must not be picked twice by one Lease.
    _schedule(q, leased)
    q.received_total += len(leased)
    return Leased(tuple(leased), tuple(dead))


def _schedule(q: QueueState, leased: list[LeasedMessage]) -> None:
    """Each leased message becomes visible again at its deadline plus the queue's retry
    back-off, if any (`QueueState.visible_at`)."""
    slot_of = q.touched.slot_of
    for lm in leased:
        q.schedule(lm.seq, q.visible_at(slot_of[lm.seq]))


def _lease_fifo(
    q: QueueState,
    cmd: Lease,
    deadline: int,
    limit: int,
) -> Leased:
    """A replay of a remembered attempt, else the messages `fifo.plan` picks."""
    fifo = q.fifo
    assert fifo is not None
    fifo.forget_attempts(q.clock)
    if cmd.attempt_id is not None:
        again = fifo_rules.replay(q, fifo, cmd.attempt_id)
        if again is not None:
            return Leased(tuple(_leased_again(q, seq, lease_id) for seq, lease_id in again), ())
    take, dead = fifo_rules.plan(q, fifo, cmd.max_messages, limit, MAX_DEAD_LETTER_PER_LEASE)
    for seq in dead:
        _mark_dead_letter(q, seq)
    leased = [_lease_one(q, seq, deadline) for seq in take]
    _schedule(q, leased)
    q.received_total += len(leased)
    if cmd.attempt_id is not None and leased:
        fifo.remember(cmd.attempt_id, q.clock, tuple((lm.seq, lm.lease_id) for lm in leased))
    return Leased(tuple(leased), tuple(dead))


def _mark_dead_letter(q: QueueState, seq: int) -> None:
    """The ready, touched message ``seq`` waits for a `DeadLetter` instead of a lease."""
    q.ready.remove(seq)
    touched = q.touched
    slot = touched.slot_of[seq]
    touched.set(slot, FLAGS, touched.get(slot, FLAGS) | PENDING_DEAD_LETTER)
    q.pending_dl.add(seq)


def _lease_one(q: QueueState, seq: int, deadline: int) -> LeasedMessage:
    """Lease the ready message ``seq`` until ``deadline`` (the caller schedules it)."""
    q.ready.remove(seq)
    touched = q.touched
    slot = touched.slot_of.get(seq)
    if slot is None:
        slot = touched.add(seq)
    q.lease_counter += 1
    count = touched.get(slot, COUNT) + 1
    touched.set(slot, LEASE, q.lease_counter)
    touched.set(slot, COUNT, count)
    touched.set(slot, VIS, deadline)
    return LeasedMessage(seq, q.lease_counter, count)


def _leased_again(q: QueueState, seq: int, lease_id: int) -> LeasedMessage:
    """The message ``seq`` as its current lease ``lease_id`` handed it out."""
    touched = q.touched
    return LeasedMessage(seq, lease_id, touched.get(touched.slot_of[seq], COUNT))
