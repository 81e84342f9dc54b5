"""The segment lifecycle of the queue machine after a segment is sealed (pure apply logic, and
the read side of released segments for the archive).

A sealed segment whose every message is deleted is *released*: forgotten at once (its files go
after the next snapshot but one, `QueueMachine.snapshot`) or, on a queue with ``archive``, kept
until `MarkArchived`. Each deleted message's outcome and final receive count are recorded in its
`Segment` (part of the snapshot image), so a released segment's records stream with them.

Commands handled here (called by `QueueMachine.execute` with the queue's state, the
`SegmentWriter` its bytes go through and the `Effects` it records; deterministic, no I/O but
the store):

* `ClaimSegments`: an archive batch claims released segments until a deadline (by the queue
  clock), so two archive runs never archive one segment twice;
* `MarkArchived`: forget released segments (idempotent; refused for another batch's unexpired
  claim), or keep them as ``archived`` while the queue's ``retain_acked_seconds`` keeps them
  for rewinds (`SegmentWriter.settle`);
* `Tidy`: seal the active segment once it is older than the queue's segment age, forget the
  released segments whose archive and retention are both done, and copy the live messages of
  *sparse* sealed segments (`cmq.fsm.timedwork.sparse`) forward into the active one, so a message
  leased for days pins only itself. A copy keeps the message's id, body, attributes, send time,
  receive count and lease; it gets a new seq, and the old seq stays an alias (`QueueState.resolve`)
  so receipts minted before the copy still ack it. The old record is marked ``moved``: it is
  archived from the segment it was copied to, not from the old one.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

from pyroaring import BitMap

from cmq.errors import (
    CorruptSegment,
    InvalidParameter,
    NewerFormat,
    NewerLayout,
    SegmentNotFound,
    SegmentNotReleased,
)
from cmq.fsm import timedwork
from cmq.fsm.cells import SEQ, Segment
from cmq.fsm.commands import (
    ClaimSegments,
    CommandFailed,
    MarkArchived,
    SegmentsArchived,
    SegmentsClaimed,
    Tidied,
    Tidy,
)
from cmq.fsm.effects import Effects
from cmq.fsm.queue import QueueState
from cmq.fsm.store import FRAME, SegmentStore, StoredMessage, decode_payload, encode_record
from cmq.fsm.writer import SegmentWriter
from cmq.segment_values import (
    BATCH_ID,
    MAX_CLAIM_TTL_MS,
    SEGMENT_STATES,
    SegmentClaim,
    SegmentInfo,
    SegmentRecord,
)

TIDY_MAX_COPIES = 256
"""At most this many messages are copied forward by one `Tidy` (bounds its work)."""
READ_CHUNK = 1 << 20
"""Bytes read per chunk when streaming a released segment."""


def _segment_at(q: QueueState, first: int) -> Segment | None:
    seg = q.segment_of(first)
    return seg if seg is not None and seg.first_seq == first else None


def _claim_holder(seg: Segment, batch_id: str, now: int) -> str | None:
    """The other batch whose unexpired claim holds ``seg``, if any."""
    if seg.claim is not None and seg.claim[0] != batch_id and seg.claim[1] > now:
        return seg.claim[0]
    return None


def bad_batch(batch_id: str) -> CommandFailed | None:
    """The refusal of a malformed archive batch id (checked before the queue is looked up)."""
    if BATCH_ID.match(batch_id):
        return None
    return CommandFailed(InvalidParameter.code, f"batch_id must match {BATCH_ID.pattern}")


def claim(q: QueueState, cmd: ClaimSegments) -> SegmentsClaimed:
    """`SegmentsClaimed`: each segment claimed until the queue clock + ``ttl_ms`` (capped at
    `MAX_CLAIM_TTL_MS`), or refused as ``not_found``, ``not_released`` or ``claimed``. The
    batch id is checked first (`bad_batch`)."""
    q.advance(cmd.now_ms)
    expires = q.clock + max(0, min(cmd.ttl_ms, MAX_CLAIM_TTL_MS))
    claimed: list[int] = []
    refused: list[tuple[int, str, str]] = []
    for first in dict.fromkeys(cmd.segments):
        seg = _segment_at(q, first)
        if seg is None or seg.archived:  # archived: kept only for rewinds
            refused.append((first, "not_found", ""))
        elif not seg.released:
            refused.append((first, "not_released", ""))
        elif (holder := _claim_holder(seg, cmd.batch_id, q.clock)) is not None:
            refused.append((first, "claimed", holder))
        else:
            seg.claim = (cmd.batch_id, expires)
            claimed.append(first)
    return SegmentsClaimed(tuple(claimed), tuple(refused))


def mark_archived(
    q: QueueState, cmd: MarkArchived, w: SegmentWriter, fx: Effects
) -> SegmentsArchived:
    """`SegmentsArchived`: each released segment not held by another batch's unexpired claim
    is forgotten (`SegmentWriter.forget`: its files go after the next snapshot but one);
    unknown (or already archived) ones are ``already``. The batch id is checked first
    (`bad_batch`)."""
    q.advance(cmd.now_ms)
    archived: list[int] = []
    already: list[int] = []
    refused: list[tuple[int, str, str]] = []
    for first in dict.fromkeys(cmd.segments):
        seg = _segment_at(q, first)
        if seg is None or seg.archived:
            already.append(first)
        elif not seg.released:
            refused.append((first, "not_released", ""))
        elif (holder := _claim_holder(seg, cmd.batch_id, q.clock)) is not None:
            refused.append((first, "claimed", holder))
        else:
            seg.archived = True
            w.settle(q, seg)
            archived.append(first)
    if archived:
        fx.change(q.name)
    return SegmentsArchived(tuple(archived), tuple(already), tuple(refused))


def tidy(q: QueueState, cmd: Tidy, w: SegmentWriter, fx: Effects) -> Tidied:
    """`Tidied`: the active segment sealed if it reached the queue's segment age; the released
    segments whose archive and retention are both done forgotten; the sparse sealed segments'
    live messages copied forward, oldest segment first, while the copies stay within
    `TIDY_MAX_COPIES` (a segment is copied whole or not at all)."""
    q.advance(cmd.now_ms)
    settled = sum(w.settle(q, seg) for seg in [s for s in q.segments if s.released])
    sealed = 0
    if q.segments and not q.segments[-1].sealed:
        last = q.segments[-1]
        if q.clock - last.created_ms >= w.segment_age(q):
            w.seal(q, last)
            sealed = 1
    copied = 0
    for seg in list(timedwork.sparse(q)):
        live = seg.count - len(seg.deleted)
        if copied and copied + live > TIDY_MAX_COPIES:
            break
        copied += copy_forward(q, seg, w)
    if sealed or copied or settled:
        fx.change(q.name)
    return Tidied(sealed, copied)


def copy_forward(q: QueueState, seg: Segment, w: SegmentWriter) -> int:
    """Copy the live messages of the sealed segment ``seg`` to the active segment (see the
    module docstring); returns how many. ``seg`` is released afterwards."""
    live = BitMap(range(seg.count))
    live.difference_update(seg.deleted)
    target = q.segments[-1] if q.segments and not q.segments[-1].sealed else None
    messages: list[StoredMessage] = []
    frames: list[bytes] = []
    touched = q.touched
    # The untouched messages' timers, found in one scan of the index.
    timers = q.timers_of({s for s in (seg.first_seq + r for r in live) if s not in touched.slot_of})
    for rel in live:
        old = seg.first_seq + rel
        if target is None or w.must_seal(q, target):
            if target is not None:
                if messages:
                    w.append(q, target, messages, frames)
                    messages, frames = [], []
                w.seal(q, target)
            target = Segment(q.next_seq, q.clock)
            q.segments.append(target)
            q.firsts.append(target.first_seq)
        msg = w.read(q, seg, old)
        new = q.next_seq
        q.next_seq += 1
        # Restores schedule an untouched message at its record's visibility: its timer, or
        # now when it is ready.
        slot = touched.slot_of.get(old)
        at = timers.get(old) if slot is None else q.timer_at(old)
        # The copy's record keeps the original's first visibility (its retention start): a
        # restore schedules an untouched copy at it (its timer, or ready when past).
        visible_at = timedwork.retention_start(q, seg, rel)
        stored = StoredMessage(  # the copy keeps its level (as `q.ready.move` below does)
            msg.id, new, msg.body, msg.binary, msg.attributes, msg.sent_at_ms, msg.priority
        )
        frame = encode_record(stored, visible_at)
        messages.append(stored)
        frames.append(frame)
        target.copies.add(target.count)
        if rel in seg.replays:  # a rewound copy stays one: never archived
            target.replays.add(target.count)
        target.sent_at.append(target.sent_at[-1] if target.sent_at else target.created_ms)
        target.add_visible(visible_at, force=True)
        target.count += 1
        target.size += len(frame)
        target.crc = zlib.crc32(frame, target.crc)
        # The message's state moves to its new seq.
        sent, olds = q.moved.pop(old, (msg.sent_at_ms, ()))
        olds = (*olds, old)
        q.moved[new] = (sent, olds)
        for o in olds:
            q.alias[o] = new
        if slot is not None:
            del touched.slot_of[old]
            touched.set(slot, SEQ, new)
            touched.slot_of[new] = slot
        if (deadline := q.ttl.pop(old, None)) is not None:
            q.set_ttl(new, deadline)
        q.ready.move(old, new)  # its priority level, and whether it is ready
        if old in q.pending_dl:
            q.pending_dl.remove(old)
            q.pending_dl.add(new)
        elif new in q.ready:
            pass
        elif at is not None:
            q.schedule(new, at)
        seg.deleted.add(rel)
        seg.moved.add(rel)
    if target is not None and messages:
        w.append(q, target, messages, frames)
    w.maybe_release(q, seg)
    return len(live)


def restore_sent_keys(q: QueueState, seg: Segment) -> None:
    """After a restore, give the copies in ``seg`` the sorted send-time entries they had when
    they were copied (the records carry the real send time)."""
    sent_at = seg.sent_at
    for rel in seg.copies:
        sent_at[rel] = sent_at[rel - 1] if rel else seg.created_ms


# ------------------------------------------------------------------------------ read side
def listing(q: QueueState, state: str, pending: list[Segment]) -> list[SegmentInfo]:
    """The segments of ``q`` in ``state`` (one of `SEGMENT_STATES`, or ``all``: active, sealed
    and released), by first seq. ``archived_pending`` lists the segments whose files await
    removal on this replica (``pending``: local, not replicated state)."""
    if state != "all" and state not in SEGMENT_STATES:
        raise InvalidParameter(
            f"state must be one of {', '.join(('all', *SEGMENT_STATES))}; got {state!r}"
        )
    out: list[SegmentInfo] = []
    for seg in q.segments:
        if state in ("all", seg.state()):
            out.append(_info(seg, seg.state()))
    if state == "archived_pending":
        for seg in sorted(pending, key=lambda s: s.first_seq):
            out.append(_info(seg, "archived_pending"))
    return out


def _info(seg: Segment, state: str) -> SegmentInfo:
    claim = None if seg.claim is None else SegmentClaim(*seg.claim)
    return SegmentInfo(
        seg.first_seq,
        seg.last_seq,
        seg.archivable(),
        seg.size,
        state,
        f"{seg.crc:08x}",
        claim,
    )


def released_segment(q: QueueState, first: int) -> Segment:
    """The released segment ``first`` of ``q`` (`SegmentNotFound`: unknown or archived;
    `SegmentNotReleased`: it still holds live messages or takes appends)."""
    seg = _segment_at(q, first)
    if seg is None:
        raise SegmentNotFound(f"queue {q.name!r} has no segment {first} (or it is archived)")
    if not seg.released:
        raise SegmentNotReleased(f"segment {first} of {q.name!r} is {seg.state()}")
    return seg


def read_records(
    store: SegmentStore, key: str, seg: Segment, chunk: int = READ_CHUNK
) -> Iterator[list[SegmentRecord]]:
    """The records of the released segment ``seg`` (copies forward skipped), a list per chunk
    read, each checked against its stored CRC; after the last, the CRC of every byte read is
    compared with the recorded one. Any damage or shortfall raises `CorruptSegment` (the
    caller then ends its stream without a trailer). Memory: one chunk plus one record."""
    where = f"segment {seg.first_seq} of {key}"
    crc = 0
    total = 0
    rel = 0
    pending = b""
    for data in store.scan(key, seg.first_seq, seg.size, chunk):
        crc = zlib.crc32(data, crc)
        total += len(data)
        buf = pending + data if pending else data
        view = memoryview(buf)
        pos = 0
        batch: list[SegmentRecord] = []
        while len(buf) - pos >= FRAME.size:
            length, frame_crc = FRAME.unpack_from(view, pos)
            end = pos + FRAME.size + length
            if end > len(buf):
                break
            payload = view[pos + FRAME.size : end]
            if zlib.crc32(payload) != frame_crc:
                raise CorruptSegment(f"{where}: record at offset {total - len(buf) + pos} fails")
            try:
                message, _ = decode_payload(payload)
            except NewerLayout as e:
                at = total - len(buf) + pos
                raise NewerFormat(f"{where}: the record at offset {at}: {e}") from None
            except InvalidParameter as e:
                raise CorruptSegment(f"{where}: bad record: {e}") from None
            if message.seq != seg.first_seq + rel:
                raise CorruptSegment(f"{where}: seq {message.seq} where {seg.first_seq + rel}")
            outcome = seg.outcome_of(rel)
            if outcome is not None:
                name, count = outcome
                batch.append(
                    SegmentRecord(
                        message.seq,
                        message.id,
                        message.sent_at_ms,
                        count,
                        message.attributes,
                        message.body,
                        name,
                        message.priority,
                    )
                )
            rel += 1
            pos = end
        pending = bytes(view[pos:])
        view.release()
        yield batch
    if pending or total != seg.size or rel != seg.count or crc != seg.crc:
        raise CorruptSegment(
            f"{where}: read {total} of {seg.size} B, {rel} of {seg.count} records, "
            f"crc {crc:08x} (recorded {seg.crc:08x})"
        )


__all__ = [
    "TIDY_MAX_COPIES",
    "bad_batch",
    "claim",
    "copy_forward",
    "listing",
    "mark_archived",
    "read_records",
    "released_segment",
    "restore_sent_keys",
    "tidy",
]
