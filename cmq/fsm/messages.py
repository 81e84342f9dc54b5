"""The message commands of the queue machine (pure apply logic): `Produce`, `Ack`,
`ChangeVisibility`, `Nack`, `DeadLetter`, `Expire`, `Purge` and `Retime`; `Lease` is
`cmq.fsm.leasing`'s, the segment lifecycle `cmq.fsm.lifecycle`'s.

Each handler is given the queue's state (`QueueState`, looked up by `QueueMachine.execute`), its
command, the `SegmentWriter` its bytes and deletions go through and the `Effects` it records;
it returns the command's result (a user error as `CommandFailed`). See `cmq.fsm.machine` for
the invariants (queue time, leases).
"""

from __future__ import annotations

import zlib
from bisect import bisect_right

from cmq import errors
from cmq.fsm import fifo as fifo_rules
from cmq.fsm import timedwork
from cmq.fsm.cells import ACKED, DEAD_LETTERED, EXPIRED, LEASE, PURGED, VIS, Segment
from cmq.fsm.commands import (
    Ack,
    ChangeVisibility,
    CommandFailed,
    DeadLetter,
    Done,
    EntryOutcomes,
    Expire,
    Expired,
    Nack,
    Produce,
    Produced,
    Purge,
    Purged,
    Retime,
    Retimed,
)
from cmq.fsm.effects import Effects
from cmq.fsm.queue import QueueState
from cmq.fsm.store import StoredMessage, encode_record, frame_record, with_priority
from cmq.fsm.writer import SegmentWriter
from cmq.model import DEDUP_WINDOW_MS, MAX_DEDUP_ENTRIES

__all__ = [
    "ack",
    "change_visibility",
    "dead_letter",
    "expire",
    "expire_ttl",
    "nack",
    "produce",
    "purge",
    "retime",
]


def produce(q: QueueState, cmd: Produce, w: SegmentWriter, fx: Effects) -> Produced | CommandFailed:
    """Append ``cmd``'s messages in order (a deduplicated one answers with the original's id
    and seq), sealing the active segment at the queue's limits."""
    limit = q.attributes.max_message_size
    max_delay = q.attributes.max_delay_seconds * 1000
    retention = q.attributes.message_retention_seconds * 1000
    levels = q.attributes.priorities
    for m in cmd.messages:
        # Any node builds produce commands from its own replica's view of the attributes;
        # the committed attributes decide.
        if m.ttl_ms is not None and not 0 < m.ttl_ms <= retention:
            return CommandFailed(
                errors.InvalidParameter.code,
                f"a message's ttl_seconds is {m.ttl_ms // 1000}; it must be in [1, the queue's "
                f"message_retention_seconds ({q.attributes.message_retention_seconds})]",
            )
        if not 0 <= m.priority < levels:
            return CommandFailed(
                errors.InvalidParameter.code,
                f"a message's priority is {m.priority}; the queue has priorities {levels}, so "
                f"it must be in [0, {levels - 1}]",
            )
        if m.delay_ms is not None and m.delay_ms > max_delay and cmd.expect_sent is None:
            return CommandFailed(
                errors.InvalidParameter.code,
                f"a message's delay is {m.delay_ms // 1000} s; the queue's max_delay_seconds "
                f"is {q.attributes.max_delay_seconds}",
            )
        if len(m.body) > limit:
            return CommandFailed(
                errors.MessageTooLarge.code,
                f"a message body has {len(m.body)} bytes; the queue allows {limit}",
            )
    importing = cmd.expect_sent is not None
    if importing and q.sent_total != cmd.expect_sent:
        return CommandFailed(
            errors.ImportConflict.code,
            f"queue {cmd.queue!r} has had {q.sent_total} messages sent; the import "
            f"expected {cmd.expect_sent}",
        )
    q.advance(cmd.now_ms)
    clock = q.clock
    if q.start_floor is not None:
        q.start_floor = min(q.start_floor, clock)
    dedup = q.dedup
    while dedup:
        oldest = next(iter(dedup))
        if clock - dedup[oldest][2] < DEDUP_WINDOW_MS:
            break
        del dedup[oldest]
    refused = fifo_rules.check_produce(q, cmd.messages, importing=importing)
    if refused is not None:
        return refused
    fifo = q.fifo
    default_delay = q.attributes.delay_seconds * 1000
    out: list[tuple[str, int]] = []
    seg = q.segments[-1] if q.segments and not q.segments[-1].sealed else None
    messages: list[StoredMessage] = []
    frames: list[bytes] = []
    tails = cmd.tails
    for i, m in enumerate(cmd.messages):
        key = m.dedup_id if fifo is None else fifo_rules.dedup_key(q.attributes, m)
        if key is not None and not importing:
            hit = dedup.get(key)
            if hit is not None:
                out.append((hit[0], hit[1]))
                continue
        if seg is None or w.must_seal(q, seg):
            if seg is not None:
                w.append(q, seg, messages, frames)
                messages, frames = [], []
                w.seal(q, seg)
            seg = Segment(q.next_seq, clock)
            q.segments.append(seg)
            q.firsts.append(seg.first_seq)
        seq = q.next_seq
        q.next_seq += 1
        delay = default_delay if m.delay_ms is None else m.delay_ms
        visible_at = clock + max(0, delay)
        stored = StoredMessage(m.id, seq, m.body, m.binary, m.attributes, clock, m.priority)
        if tails is None:  # decoded from a log written before PRODUCE_RECORDS
            frame = encode_record(stored, visible_at)
        elif m.priority:  # the record keeps its level (the archive reads it there)
            frame = frame_record(seq, clock, visible_at, with_priority(tails[i], m.priority))
        else:
            frame = frame_record(seq, clock, visible_at, tails[i])
        messages.append(stored)
        frames.append(frame)
        seg.count += 1
        seg.size += len(frame)
        seg.crc = zlib.crc32(frame, seg.crc)
        seg.sent_at.append(clock)
        seg.add_visible(visible_at)
        q.live += 1
        q.sent_total += 1
        if m.priority:  # before it can be ready: its level decides where
            q.ready.set_level(seq, m.priority)
        elif m.group_id is not None and fifo is None:  # its tenant (fair queues)
            q.ready.set_tenant(seq, m.group_id)
        q.schedule(seq, visible_at)
        if m.ttl_ms is not None:
            q.set_ttl(seq, clock + m.ttl_ms)
        if key is not None and not importing:
            if len(dedup) >= MAX_DEDUP_ENTRIES:  # standard queues only (check_produce)
                del dedup[next(iter(dedup))]
            dedup[key] = (m.id, seq, clock)
        if fifo is not None:
            fifo.add(seq, m.group_id or "", key or "")
        out.append((m.id, seq))
    if seg is not None and messages:
        w.append(q, seg, messages, frames)
    fx.change(q.name)
    return Produced(tuple(out))


def ack(q: QueueState, cmd: Ack, w: SegmentWriter, fx: Effects) -> EntryOutcomes:
    """Delete each message whose current lease is the entry's (even after its deadline)."""
    q.advance(cmd.now_ms)
    out: list[str | None] = []
    for old_seq, lease_id in cmd.entries:
        seq = q.resolve(old_seq)
        if q.lease_slot(seq, lease_id) is None:
            out.append(errors.LEASE_STALE)
            continue
        w.delete_one(q, seq, ACKED)
        q.acked_total += 1
        out.append(None)
    fx.change(q.name)
    return EntryOutcomes(tuple(out))


def change_visibility(q: QueueState, cmd: ChangeVisibility, fx: Effects) -> EntryOutcomes:
    """Move each unexpired lease's deadline to the queue's time plus the entry's visibility."""
    q.advance(cmd.now_ms)
    out: list[str | None] = []
    for old_seq, lease_id, visibility_ms in cmd.entries:
        seq = q.resolve(old_seq)
        slot = q.inflight_slot(seq, lease_id)
        if isinstance(slot, str):
            out.append(slot)
            continue
        q.touched.set(slot, VIS, q.clock + max(0, visibility_ms))
        q.schedule(seq, q.visible_at(slot))
        if visibility_ms <= 0:
            q.nacked_total += 1
        out.append(None)
    fx.change(q.name)
    return EntryOutcomes(tuple(out))


def nack(q: QueueState, cmd: Nack, fx: Effects) -> EntryOutcomes:
    """Release each unexpired lease: the message is visible again after ``cmd.delay_ms``, or
    after the queue's retry back-off for its receive count when that is longer."""
    q.advance(cmd.now_ms)
    retry = q.attributes.retry
    out: list[str | None] = []
    for old_seq, lease_id in cmd.entries:
        seq = q.resolve(old_seq)
        slot = q.inflight_slot(seq, lease_id)
        if isinstance(slot, str):
            out.append(slot)
            continue
        delay = max(0, cmd.delay_ms)
        if retry is not None:
            delay = max(delay, q.retry_delay(slot, retry))
        at = q.clock + delay
        q.touched.set(slot, LEASE, 0)
        q.touched.set(slot, VIS, at)
        q.schedule(seq, at)
        q.nacked_total += 1
        out.append(None)
    fx.change(q.name)
    return EntryOutcomes(tuple(out))


def dead_letter(q: QueueState, cmd: DeadLetter, w: SegmentWriter, fx: Effects) -> Done:
    """Delete the messages copied to the dead-letter queue (those still here)."""
    for seq in cmd.seqs:
        if w.delete_one(q, q.resolve(seq), DEAD_LETTERED):
            q.dead_lettered_total += 1
    fx.change(q.name)
    return Done()


def expire(q: QueueState, cmd: Expire, w: SegmentWriter, fx: Effects) -> Expired:
    """Delete the messages whose retention ran out at the queue's time: retention counts from
    when a message first became visible (`cmq.fsm.timedwork.retention_start`), so a delayed message
    is kept for the whole retention after its delay."""
    q.advance(cmd.now_ms)
    cutoff = q.clock - q.attributes.message_retention_seconds * 1000
    end_seq = 0
    for seg in q.segments:
        # Send times are non-decreasing in seq (queue clock), and a message first becomes
        # visible at or after its send, so the candidates are a prefix.
        k = bisect_right(seg.sent_at, cutoff)
        end_seq = seg.first_seq + k
        if k < seg.count:
            break
    spared = _spared(q, end_seq, cutoff)
    if not spared:
        count = w.delete_prefix(q, end_seq, EXPIRED)
    else:
        # Delayed messages still in their retention stay; their neighbours go one by one.
        first = spared[0]
        count = w.delete_prefix(q, first, EXPIRED)
        keep = set(spared)
        for seq in range(first, end_seq):
            if seq not in keep and w.delete_one(q, seq, EXPIRED):
                count += 1
    # Messages copied forward carry their real send time apart (their place in the
    # sorted send times is their copy's).
    for seq in sorted(seq for seq, (sent, _) in q.moved.items() if sent <= cutoff):
        owner = q.segment_of(seq)
        if (
            owner is not None
            and timedwork.retention_start(q, owner, seq - owner.first_seq) > cutoff
        ):
            continue
        if w.delete_one(q, seq, EXPIRED):
            count += 1
    q.expired_total += count
    q.start_floor = None
    count += expire_ttl(q, cmd.now_ms, w, fx)
    fx.change(q.name)
    return Expired(count)


def expire_ttl(q: QueueState, now_ms: int, w: SegmentWriter, fx: Effects) -> int:
    """Delete the messages whose time to live ran out at the queue's time (counted expired,
    archived as ``expired``); how many. A `Lease` runs it first, so none is ever delivered
    after its deadline."""
    q.advance(now_ms)
    count = 0
    for seq in q.ttl_due():
        if w.delete_one(q, seq, EXPIRED):
            count += 1
    if count:
        q.expired_total += count
        fx.change(q.name)
    return count


def _spared(q: QueueState, end_seq: int, cutoff: int) -> list[int]:
    """The live seqs below ``end_seq`` whose retention has not run out (ascending): only
    segments with delayed records have any."""
    out: list[int] = []
    for seg in q.segments:
        if seg.first_seq >= end_seq:
            break
        vf = seg.visible_from
        if vf is None:
            continue
        hi = min(seg.count, end_seq - seg.first_seq)
        live = seg.deleted.flip(0, hi)
        out.extend(seg.first_seq + rel for rel in live if vf[rel] > cutoff)
    return out


def purge(q: QueueState, cmd: Purge, w: SegmentWriter, fx: Effects) -> Purged:
    """Delete every message of the queue."""
    q.advance(cmd.now_ms)
    count = w.delete_prefix(q, q.next_seq, PURGED)
    fx.change(q.name)
    return Purged(count)


def retime(q: QueueState, cmd: Retime, fx: Effects) -> Retimed:
    """Keep the queue's lead over the leader's clock as a skew to slew off (`QueueState.retime`)."""
    ahead = q.retime(cmd.now_ms)
    fx.change(q.name)
    return Retimed(ahead)
