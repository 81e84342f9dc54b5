"""`QueueMachine`: the deterministic state machine of a data group (many queues per group).

Pure: no clocks, no randomness, no os/asyncio/time. Message bytes go through a `SegmentStore`;
everything else is in memory, shaped so that a snapshot copies compact structures in C:

* per segment: a roaring `BitMap` of deleted offsets and an array of send times (the latter is
  *not* in the snapshot: it is read back from the segment files on restore);
* per queue, the messages received at least once ("touched") as parallel `array`s (seq,
  visibility deadline, lease id, receive count, flags) — the snapshot copies them with memcpy;
* derived indexes rebuilt on restore and never snapshotted: ``ready`` (a `BitMap64` of seqs
  visible at the queue's clock), ``timer_of`` + a heap (seq -> when it becomes visible) and
  ``pending_dl`` (seqs waiting for a `DeadLetter`).

Every live message is in exactly one of ready / timer_of / pending_dl.

Time: each queue keeps ``clock`` = the largest ``now_ms`` any command for it carried, and uses it
instead of the command's own ``now_ms`` (time never runs backwards across leader changes, so
visibility is monotonic and send times are non-decreasing in seq — which makes retention expiry
delete a prefix of the queue). Every ``now_ms`` is a leader's clock (`cmq.routing.ops`). If the
clock stands ahead of the leaders' clocks anyway (a stamp from a clock far ahead got in), a `Retime`
keeps the lead as a skew added to later stamps and slewed off (`QueueState.advance`), so the
queue's time runs on rather than standing still until real time catches up.

Leases: a lease is *unexpired* while its deadline (``visible_at``) is after the clock. A lease id
stays *current* until the message is leased again, nacked, or deleted. Ack accepts the current
lease id even after its deadline (nobody else holds the message; SQS does the same);
ChangeVisibility and Nack need an unexpired lease (``MessageNotInflight`` otherwise). Any other
lease id, or a message that is gone, gets ``LeaseStale``.

Per-queue state and its queries live in `cmq.fsm.queue`, the machine's read-only queries in
`cmq.fsm.reads`, the segment lifecycle (release, archive claims, copy-forward) in
`cmq.fsm.lifecycle`, the snapshot image in `cmq.fsm.image`.
"""

from __future__ import annotations

import zlib
from bisect import bisect_right

from cmq import errors
from cmq.errors import InvalidParameter, InvariantBroken, NewerFormat, NewerLayout
from cmq.fsm import fifo as fifo_rules
from cmq.fsm import leasing, lifecycle
from cmq.fsm.commands import (
    Ack,
    ChangeVisibility,
    ClaimSegments,
    Command,
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
    MarkArchived,
    Nack,
    Produce,
    Produced,
    Purge,
    Purged,
    Result,
    Retime,
    Retimed,
    SetAttributes,
    Tidy,
    decode_command,
)
from cmq.fsm.image import (
    SHIPPED_FAMILY,
    SHIPPED_MAGIC,
    decode_image,
    encode_queue,
    image_head,
    image_version,
    install_shipped,
    ship,
)
from cmq.fsm.leasing import MAX_DEAD_LETTER_PER_LEASE
from cmq.fsm.queue import (
    ACKED,
    COUNT,
    DEAD_LETTERED,
    EXPIRED,
    LEASE,
    PURGED,
    VIS,
    Due,
    QueueState,
    Segment,
    encode_head,
)
from cmq.fsm.reads import MachineReads
from cmq.fsm.store import (
    SegmentLayout,
    SegmentStore,
    StoredMessage,
    encode_record,
    frame_record,
)
from cmq.model import DEDUP_WINDOW_MS, MAX_DEDUP_ENTRIES, QUEUE_NAME, is_fifo_name

__all__ = ["MAX_DEAD_LETTER_PER_LEASE", "Due", "QueueMachine"]


class QueueMachine(MachineReads):
    """The data-group state machine (implements `raftlog.runtime.statemachine.StateMachine`
    with `Result` results).

    ``apply`` is total and deterministic: user errors are `CommandFailed` results; only a broken
    invariant (undecodable committed bytes, damaged segment files) raises `InvariantBroken`.
    The read-only methods serve the leader's service without a Raft round trip; they reflect
    the state after the last applied command.

    Effects instead of calls: ``apply`` and ``restore`` call nothing outside the machine. They
    record which queues changed (every command that changed a queue except `Lease`, which only
    hides messages; every queue, before and after, on `restore`); `take_changed` hands that set
    over (the node wakes the long polls waiting on those queues after each batch of applies).
    Timed work is a query too: `due` says what retention expiry and dead-letter moves are due,
    for the group's leader to propose.
    """

    def __init__(
        self,
        store: SegmentStore,
        *,
        segment_bytes: int | None = None,
        segment_age_ms: int | None = None,
    ) -> None:
        """``segment_bytes`` / ``segment_age_ms``: for tests and simulations, lower the
        segment limits every queue recorded at its creation (`CreateQueue`); every replica of
        a group must then be built with the same values."""
        self._store = store
        self._changed_queues: set[str] = set()
        self._segment_bytes = segment_bytes
        self._segment_age_ms = segment_age_ms
        self._queues: dict[str, QueueState] = {}
        self._incarnations = 0
        # Segments (queue key, first seq, bytes) and whole queues (first seq None) no longer in
        # the state. Their files are removed only once no durable snapshot lists them: those
        # released before the previous `snapshot()` are removed by the next one.
        self._released: list[tuple[str, Segment | None]] = []
        self._releasing: list[tuple[str, Segment | None]] = []
        self.applied_index = 0

    @property
    def store(self) -> SegmentStore:
        return self._store

    # ------------------------------------------------------------------------ StateMachine
    def apply(self, index: int, command: bytes) -> Result:
        """Apply one committed command; returns its `Result`."""
        try:
            cmd = decode_command(command)
        except NewerLayout as e:
            raise NewerFormat(f"entry {index}: {e}") from None
        except InvalidParameter as e:
            raise InvariantBroken(f"entry {index}: undecodable committed command: {e}") from None
        self.applied_index = index
        return self.execute(cmd)

    def snapshot(self) -> bytes:
        """The image of the current state (`encode_image`), after making the segment files
        durable up to the offsets it records (`SegmentStore.flush`: the blocking part).

        Assumes (as the raftlog runtime does) that the previous image was stored durably
        before this call: files released before the previous call are removed now."""
        image = self.encode_image()
        self._store.flush()
        for key, seg in self._releasing:
            if seg is None:
                self._store.drop_queue(key)
            else:
                self._store.release(key, seg.first_seq)
        self._releasing, self._released = self._released, []
        return image

    def export_snapshot(self, data: bytes) -> bytes:
        """A self-contained form of the image ``data`` for a follower that lacks the segment
        files: the image plus every segment it lists, up to its recorded size, each with a
        CRC-32. `restore` accepts both forms. Runs on a worker thread (reads files only)."""
        if not data or data.startswith(SHIPPED_MAGIC):
            return data
        _, queues = decode_image(data)
        return ship(data, queues.values(), self._store)

    def restore(self, index: int, data: bytes) -> None:
        """Replace the state with the image ``data`` (``b""``: empty) and bring the segment
        files to the recorded layout (longer files truncated; missing/short: `InvariantBroken`).
        Costs a read of the live segments (per-record times are not in the image). A shipped
        image (`export_snapshot`) first installs the segments it carries."""
        if data.startswith(SHIPPED_FAMILY):
            data = install_shipped(data, self._store)
        before = set(self._queues)
        incarnations, queues = decode_image(data) if data else (0, {})
        layout = {
            q.key: [SegmentLayout(s.first_seq, s.count, s.size) for s in q.segments]
            for q in queues.values()
        }
        recovered = self._store.recover(layout)
        self._released, self._releasing = [], []
        self._incarnations = incarnations
        for q in queues.values():
            live = sum(seg.count - len(seg.deleted) for seg in q.segments)
            if live != q.live:
                raise InvariantBroken(f"snapshot of {q.name!r}: {live} live messages != {q.live}")
            q.rebuild_alias()
            for seg, rec in zip(q.segments, recovered[q.key], strict=True):
                seg.sent_at = rec.sent_at
                lifecycle.restore_sent_keys(q, seg)
                q.rebuild_derived(seg, rec.visible_at)
            q.rebuild_touched()
            if q.fifo is not None:
                q.fifo.rebuild()
        self._queues = queues
        self.applied_index = index
        self._changed_queues |= before
        self._changed_queues.update(queues)

    # ------------------------------------------------------------------------ commands
    def execute(self, cmd: Command) -> Result:
        """Apply a decoded command (what `apply` does after decoding)."""
        match cmd:
            case CreateQueue():
                return self._create(cmd)
            case DeleteQueue():
                return self._delete_queue(cmd)
            case SetAttributes():
                return self._set_attributes(cmd)
            case Purge():
                return self._purge(cmd)
            case Produce():
                return self._produce(cmd)
            case Lease():
                return self._lease(cmd)
            case Ack():
                return self._ack(cmd)
            case ChangeVisibility():
                return self._change_visibility(cmd)
            case Nack():
                return self._nack(cmd)
            case DeadLetter():
                return self._dead_letter(cmd)
            case Expire():
                return self._expire(cmd)
            case ClaimSegments():
                return lifecycle.claim(self, cmd)
            case MarkArchived():
                return lifecycle.mark_archived(self, cmd)
            case Tidy():
                return lifecycle.tidy(self, cmd)
            case Retime():
                return self._retime(cmd)

    def mutable(self, name: str) -> QueueState | None:
        """The queue a command is about to change (its cached image is dropped)."""
        q = self._queues.get(name)
        if q is not None:
            q.image = None
        return q

    def changed(self, name: str) -> None:
        self._changed_queues.add(name)

    def end_batch(self) -> None:
        """After a batch of `apply` calls: the segment store writes the batch's appends out
        (`SegmentStore.write_out`); applying without it is correct, only less batched."""
        self._store.write_out()

    def take_changed(self) -> set[str]:
        """The queues changed since the last call (an effect of `apply`/`restore`; bounded by
        the queue names, so a machine nobody drains does not grow without limit)."""
        changed, self._changed_queues = self._changed_queues, set()
        return changed

    @staticmethod
    def not_found(name: str) -> CommandFailed:
        return CommandFailed(errors.QueueNotFound.code, f"queue {name!r} does not exist")

    def _create(self, cmd: CreateQueue) -> Result:
        if not QUEUE_NAME.match(cmd.name):
            # The service validates names; re-checked because names become directory names.
            return CommandFailed(errors.InvalidQueueName.code, f"bad queue name {cmd.name!r}")
        if is_fifo_name(cmd.name) != cmd.attributes.fifo:
            return CommandFailed(
                errors.InvalidParameter.code, "a FIFO queue's name ends in .fifo, and only its"
            )
        q = self.mutable(cmd.name)
        if q is not None:
            if q.attributes != cmd.attributes:
                return CommandFailed(
                    errors.QueueAlreadyExists.code,
                    f"queue {cmd.name!r} exists with different attributes",
                )
            return Created(False, q.attributes)
        self._incarnations += 1
        self._queues[cmd.name] = QueueState(
            cmd.name,
            self._incarnations,
            cmd.attributes,
            cmd.now_ms,
            segment_bytes=max(1, cmd.segment_bytes),
            segment_age_ms=max(0, cmd.segment_age_ms),
        )
        if cmd.attributes.fifo:
            self._queues[cmd.name].fifo = fifo_rules.FifoState()
        self.changed(cmd.name)
        return Created(True, cmd.attributes)

    def _delete_queue(self, cmd: DeleteQueue) -> Result:
        q = self._queues.pop(cmd.name, None)
        if q is None:
            return self.not_found(cmd.name)
        self._released.append((q.key, None))
        self.changed(cmd.name)
        return Done()

    def _set_attributes(self, cmd: SetAttributes) -> Result:
        q = self.mutable(cmd.name)
        if q is None:
            return self.not_found(cmd.name)
        if cmd.attributes.fifo != q.attributes.fifo:
            return CommandFailed(errors.InvalidParameter.code, "fifo is fixed at creation")
        q.attributes = cmd.attributes
        q.head = encode_head(q.name, q.attributes)
        if not q.attributes.archive:
            # No archive any more: the segments kept for it go like any released one.
            for seg in [seg for seg in q.segments if seg.released]:
                self.forget_segment(q, seg)
        self.changed(cmd.name)
        return Done()

    def _purge(self, cmd: Purge) -> Result:
        q = self.mutable(cmd.name)
        if q is None:
            return self.not_found(cmd.name)
        q.advance(cmd.now_ms)
        count = self._delete_prefix(q, q.next_seq, PURGED)
        self.changed(cmd.name)
        return Purged(count)

    def _produce(self, cmd: Produce) -> Result:
        q = self.mutable(cmd.queue)
        if q is None:
            return self.not_found(cmd.queue)
        limit = q.attributes.max_message_size
        for m in cmd.messages:
            # Any node builds produce commands from its own replica's view of the attributes;
            # the committed attributes decide.
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
            if seg is None or self.must_seal(q, seg):
                if seg is not None:
                    self.append(q, seg, messages, frames)
                    messages, frames = [], []
                    self.seal(q, seg)
                seg = Segment(q.next_seq, clock)
                q.segments.append(seg)
                q.firsts.append(seg.first_seq)
            seq = q.next_seq
            q.next_seq += 1
            delay = default_delay if m.delay_ms is None else m.delay_ms
            visible_at = clock + max(0, delay)
            stored = StoredMessage(m.id, seq, m.body, m.binary, m.attributes, clock)
            if tails is None:  # decoded from a log written before PRODUCE_RECORDS
                frame = encode_record(stored, visible_at)
            else:
                frame = frame_record(seq, clock, visible_at, tails[i])
            messages.append(stored)
            frames.append(frame)
            seg.count += 1
            seg.size += len(frame)
            seg.crc = zlib.crc32(frame, seg.crc)
            seg.sent_at.append(clock)
            q.live += 1
            q.sent_total += 1
            q.schedule(seq, visible_at)
            if key is not None and not importing:
                if len(dedup) >= MAX_DEDUP_ENTRIES:  # standard queues only (check_produce)
                    del dedup[next(iter(dedup))]
                dedup[key] = (m.id, seq, clock)
            if fifo is not None:
                fifo.add(seq, m.group_id or "", key or "")
            out.append((m.id, seq))
        if seg is not None and messages:
            self.append(q, seg, messages, frames)
        self.changed(cmd.queue)
        return Produced(tuple(out))

    def _retime(self, cmd: Retime) -> Result:
        q = self.mutable(cmd.queue)
        if q is None:
            return self.not_found(cmd.queue)
        ahead = q.retime(cmd.now_ms)
        self.changed(cmd.queue)
        return Retimed(ahead)

    def _lease(self, cmd: Lease) -> Result:
        q = self.mutable(cmd.queue)
        if q is None:
            return self.not_found(cmd.queue)
        return leasing.lease(q, cmd)

    def _ack(self, cmd: Ack) -> Result:
        q = self.mutable(cmd.queue)
        if q is None:
            return self.not_found(cmd.queue)
        q.advance(cmd.now_ms)
        out: list[str | None] = []
        for old_seq, lease_id in cmd.entries:
            seq = q.resolve(old_seq)
            if q.lease_slot(seq, lease_id) is None:
                out.append(errors.LEASE_STALE)
                continue
            self._delete_one(q, seq, ACKED)
            q.acked_total += 1
            out.append(None)
        self.changed(cmd.queue)
        return EntryOutcomes(tuple(out))

    def _change_visibility(self, cmd: ChangeVisibility) -> Result:
        q = self.mutable(cmd.queue)
        if q is None:
            return self.not_found(cmd.queue)
        q.advance(cmd.now_ms)
        out: list[str | None] = []
        for old_seq, lease_id, visibility_ms in cmd.entries:
            seq = q.resolve(old_seq)
            slot = q.inflight_slot(seq, lease_id)
            if isinstance(slot, str):
                out.append(slot)
                continue
            at = q.clock + max(0, visibility_ms)
            q.touched.set(slot, VIS, at)
            q.schedule(seq, at)
            out.append(None)
        self.changed(cmd.queue)
        return EntryOutcomes(tuple(out))

    def _nack(self, cmd: Nack) -> Result:
        q = self.mutable(cmd.queue)
        if q is None:
            return self.not_found(cmd.queue)
        q.advance(cmd.now_ms)
        at = q.clock + max(0, cmd.delay_ms)
        out: list[str | None] = []
        for old_seq, lease_id in cmd.entries:
            seq = q.resolve(old_seq)
            slot = q.inflight_slot(seq, lease_id)
            if isinstance(slot, str):
                out.append(slot)
                continue
            q.touched.set(slot, LEASE, 0)
            q.touched.set(slot, VIS, at)
            q.schedule(seq, at)
            out.append(None)
        self.changed(cmd.queue)
        return EntryOutcomes(tuple(out))

    def _dead_letter(self, cmd: DeadLetter) -> Result:
        q = self.mutable(cmd.queue)
        if q is None:
            return self.not_found(cmd.queue)
        for seq in cmd.seqs:
            if self._delete_one(q, q.resolve(seq), DEAD_LETTERED):
                q.dead_lettered_total += 1
        self.changed(cmd.queue)
        return Done()

    def _expire(self, cmd: Expire) -> Result:
        q = self.mutable(cmd.queue)
        if q is None:
            return self.not_found(cmd.queue)
        q.advance(cmd.now_ms)
        cutoff = q.clock - q.attributes.message_retention_seconds * 1000
        end_seq = 0
        for seg in q.segments:
            # Send times are non-decreasing in seq (queue clock), so expiry is a prefix.
            k = bisect_right(seg.sent_at, cutoff)
            end_seq = seg.first_seq + k
            if k < seg.count:
                break
        count = self._delete_prefix(q, end_seq, EXPIRED)
        # Messages copied forward carry their real send time apart (their place in the
        # sorted send times is their copy's).
        for seq in sorted(seq for seq, (sent, _) in q.moved.items() if sent <= cutoff):
            if self._delete_one(q, seq, EXPIRED):
                count += 1
        q.expired_total += count
        self.changed(cmd.queue)
        return Expired(count)

    # ------------------------------------------------------------------------ helpers
    def must_seal(self, q: QueueState, seg: Segment) -> bool:
        return seg.size >= self.segment_bytes(q) or q.clock - seg.created_ms >= self.segment_age(q)

    def segment_bytes(self, q: QueueState) -> int:
        """The size at which ``q``'s segments are sealed."""
        limit = self._segment_bytes
        return q.segment_bytes if limit is None else min(limit, q.segment_bytes)

    def segment_age(self, q: QueueState) -> int:
        """The age (ms) at which ``q``'s segments are sealed."""
        limit = self._segment_age_ms
        return q.segment_age_ms if limit is None else min(limit, q.segment_age_ms)

    def append(
        self, q: QueueState, seg: Segment, messages: list[StoredMessage], frames: list[bytes]
    ) -> None:
        size = self._store.append(q.key, seg.first_seq, messages, frames)
        if size != seg.size:
            raise InvariantBroken(
                f"queue {q.name!r} segment {seg.first_seq}: store size {size} != {seg.size}"
            )

    def seal(self, q: QueueState, seg: Segment) -> None:
        seg.sealed = True
        self._store.seal(q.key, seg.first_seq)
        self.maybe_release(q, seg)

    def maybe_release(self, q: QueueState, seg: Segment) -> None:
        """Release ``seg`` if it is sealed and every message is deleted: kept for the archive
        (``archive`` queues), else forgotten (its files go after the next snapshot)."""
        if seg.released or not (seg.sealed and seg.full()):
            return
        if q.attributes.archive and seg.archivable() > 0:
            seg.released = True
            return
        self.forget_segment(q, seg)

    def forget_segment(self, q: QueueState, seg: Segment) -> None:
        """Drop ``seg`` from the state; its files are removed once no durable snapshot lists
        it (see `snapshot`)."""
        i = bisect_right(q.firsts, seg.first_seq) - 1
        if i < 0 or q.segments[i] is not seg:
            raise InvariantBroken(f"queue {q.name!r}: segment {seg.first_seq} not in its list")
        del q.segments[i]
        del q.firsts[i]
        self._released.append((q.key, seg))

    def _delete_one(self, q: QueueState, seq: int, outcome: int) -> bool:
        """Delete the live message ``seq`` (recording ``outcome``); False if already gone."""
        seg = q.segment_of(seq)
        if seg is None:
            return False
        rel = seq - seg.first_seq
        if rel in seg.deleted:
            return False
        slot = q.touched.slot_of.get(seq)
        seg.record(rel, outcome, 0 if slot is None else q.touched.get(slot, COUNT))
        seg.deleted.add(rel)
        q.forget_moved(seq)
        q.live -= 1
        q.ready.discard(seq)
        q.timer_of.pop(seq, None)
        q.pending_dl.discard(seq)
        q.touched.remove(seq)
        if q.fifo is not None:
            q.fifo.drop(seq)
        self.maybe_release(q, seg)
        return True

    def _delete_prefix(self, q: QueueState, end_seq: int, outcome: int) -> int:
        """Delete every live message with seq < ``end_seq``; returns how many."""
        count, hit = q.delete_prefix(end_seq, outcome)
        if count and q.fifo is not None:
            q.fifo.drop_below(end_seq)
        for seg in hit:
            self.maybe_release(q, seg)
        return count

    # ------------------------------------------------------------------------ image
    def encode_image(self, *, reuse: bool = True) -> bytes:
        """The snapshot image: the in-memory part of `snapshot`, cheap enough for the event
        loop. Each queue's part is cached until a command touches that queue, and building one
        copies compact structures in C (bitmaps, one interleaved array); only dedup entries cost
        per-entry Python work. Layout: `cmq.fsm.image`. ``reuse=False`` rebuilds every queue's
        part (benchmarks: the worst case)."""
        version = image_version(self._queues.values())
        parts = [image_head(self._incarnations, len(self._queues), version)]
        for name in sorted(self._queues):
            q = self._queues[name]
            if q.image is None or q.image_version != version or not reuse:
                q.image, q.image_version = encode_queue(q, version), version
            parts.append(q.image)
        return b"".join(parts)
