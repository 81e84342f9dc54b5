"""The rules of FIFO queues in the queue machine (pure: no clocks, no I/O): per-group order,
group blocking, deduplication rules and receive-attempt replay, over a queue's `QueueState` and
its FIFO part (`cmq.fsm.fifo_state.FifoState`). `cmq.fsm.messages` checks a FIFO `Produce` with
`check_produce` and `dedup_key`; `cmq.fsm.leasing` applies a FIFO `Lease` with `plan` and `replay`.

Delivery rule (`plan`): a group is *blocked* while one of its messages is in flight (leased
and its lease not expired, or marked for the dead-letter queue). Groups are visited by the seq
of their head, oldest first; an unblocked group whose head is visible gives its messages in
order, as many as are visible in a row and still fit, before the next group is visited (as few
groups as possible per receive). A message at the queue's receive limit stops its group and is
marked for the dead-letter queue; the group unblocks once `DeadLetter` deletes it.

Priorities (a queue with levels above 0: `cmq.fsm.ready`): the groups are visited by the level
of their head, highest first, then by the seq of their head; inside a group the order stays seq
order whatever the levels of the later messages (a group is never reordered: a high-level
message behind a low-level head waits for it).

Why the in-flight check looks at a bounded prefix: a lease takes a prefix of an unblocked
group, at most `MAX_RECEIVE_BATCH` messages; until none of them is in flight the group gives
nothing more, and deletions only shorten the prefix. So every in-flight message of a group is
among its first `MAX_RECEIVE_BATCH` live messages.
"""

from __future__ import annotations

import hashlib
from itertools import chain, islice

from cmq import errors
from cmq.fsm.cells import COUNT, LEASE
from cmq.fsm.commands import CommandFailed, NewMessage
from cmq.fsm.fifo_state import FifoState
from cmq.fsm.queue import QueueState
from cmq.model import MAX_DEDUP_ENTRIES, MAX_RECEIVE_BATCH, QueueAttributes

__all__ = ["check_produce", "dedup_key", "has_visible", "in_flight", "plan", "replay"]


def in_flight(q: QueueState, fifo: FifoState, group: str, now_ms: int | None = None) -> bool:
    """Whether a message of ``group`` is leased (unexpired) or waits for the dead-letter
    queue: then the group gives nothing (see the module docstring for the bounded scan).
    ``now_ms``: as a `Lease` at that time would see it, without changing anything (a read);
    None: at the queue's clock."""
    touched, ready = q.touched, q.ready.all
    for seq in islice(fifo.groups[group], MAX_RECEIVE_BATCH):
        slot = touched.slot_of.get(seq)
        if slot is None or seq in ready or _due(q, seq, now_ms):
            continue
        if touched.get(slot, LEASE) != 0:
            return True
    return False


def _due(q: QueueState, seq: int, now_ms: int | None) -> bool:
    if now_ms is None:
        return False
    at = q.timer_at(seq)
    return at is not None and at <= now_ms


def has_visible(q: QueueState, fifo: FifoState, now_ms: int) -> bool:
    """Whether a `Lease` at ``now_ms`` would find a message: a visible head of an unblocked
    group (a read: timers due by ``now_ms`` count as fired)."""
    now = q.time_at(now_ms)
    heads = fifo.heads
    due = [seq for seq, at in q.pending_timers() if at <= now and seq in heads]
    for head in chain(fifo.heads & q.ready.all, due):
        if not in_flight(q, fifo, fifo.meta[head][0], now):
            return True
    return False


def plan(
    q: QueueState, fifo: FifoState, max_messages: int, limit: int, max_dead: int
) -> tuple[list[int], list[int]]:
    """What a `Lease` of ``max_messages`` takes (seqs in delivery order) and which group heads
    reached the receive ``limit`` (0: none) and go to the dead-letter queue instead (at most
    ``max_dead``). Changes nothing."""
    take: list[int] = []
    dead: list[int] = []
    touched, ready = q.touched, q.ready
    want = min(max_messages, MAX_RECEIVE_BATCH)
    for head in ready.ordered(fifo.heads & ready.all):
        if len(take) >= want:
            break
        group = fifo.meta[head][0]
        if in_flight(q, fifo, group):
            continue
        for seq in islice(fifo.groups[group], want - len(take)):
            if seq not in ready.all:
                break
            slot = touched.slot_of.get(seq)
            if limit > 0 and slot is not None and touched.get(slot, COUNT) >= limit:
                if len(dead) < max_dead:
                    dead.append(seq)
                break
            take.append(seq)
    return take, dead


def replay(q: QueueState, fifo: FifoState, attempt_id: str) -> list[tuple[int, int]] | None:
    """The (seq, lease id) pairs of a remembered attempt if every one is still leased under
    that lease and unexpired (a retried receive gets them again); else None."""
    entry = fifo.attempts.get(attempt_id)
    if entry is None or not entry[1]:
        return None
    for seq, lease_id in entry[1]:
        slot = q.lease_slot(seq, lease_id)
        if slot is None or not q.lease_live(slot):
            return None
    return list(entry[1])


def dedup_key(attributes: QueueAttributes, m: NewMessage) -> str | None:
    """The id a FIFO send is deduplicated by: its own, else (content-based) the SHA-256 of
    its body in hex; None when neither applies."""
    if m.dedup_id is not None:
        return m.dedup_id
    if attributes.content_based_deduplication:
        return hashlib.sha256(m.body).hexdigest()
    return None


def check_produce(
    q: QueueState, messages: tuple[NewMessage, ...], *, importing: bool = False
) -> CommandFailed | None:
    """The rules a send must follow on ``q`` (on a standard queue a group id names the
    message's tenant, `cmq.fsm.tenants`: not empty and only at priority 0; on a FIFO queue each
    message needs a group, a deduplication id unless content-based, and no delay of its own;
    the dedup table must have room), checked before anything changes. ``importing`` (a
    restore, `cmq.fsm.commands.Produce.expect_sent`): delays are allowed and the dedup table
    is not used."""
    if not q.attributes.fifo:
        if any(m.group_id is not None and (m.priority or not m.group_id) for m in messages):
            return CommandFailed(
                errors.InvalidParameter.code,
                "a standard queue's message with a MessageGroupId (group_id, its tenant) must "
                "have priority 0 and a group id that is not empty",
            )
        return None
    fresh: set[str] = set()
    for m in messages:
        if m.group_id is None:
            return CommandFailed(
                errors.MissingParameter.code,
                "the request must contain the parameter MessageGroupId (group_id)",
            )
        if m.delay_ms is not None and not importing:
            return CommandFailed(
                errors.InvalidParameter.code,
                "a FIFO queue takes no per-message delay (DelaySeconds); set the queue's",
            )
        key = dedup_key(q.attributes, m)
        if key is None:
            return CommandFailed(
                errors.InvalidParameter.code,
                "the queue should either have ContentBasedDeduplication enabled or "
                "MessageDeduplicationId (dedup_id) provided explicitly",
            )
        if key not in q.dedup and not importing:
            fresh.add(key)
    if len(q.dedup) + len(fresh) > MAX_DEDUP_ENTRIES:
        return CommandFailed(
            errors.Overloaded.code,
            f"the queue holds {len(q.dedup)} deduplication ids of the last 5 minutes "
            f"(at most {MAX_DEDUP_ENTRIES}); retry later",
        )
    return None
