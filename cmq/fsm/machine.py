"""`QueueMachine`: the deterministic state machine of a data group (many queues per group).

Pure: no clocks, no randomness, no os/asyncio/time. Message bytes go through a `SegmentStore`;
everything else is in memory, shaped so that a snapshot copies compact structures in C:

* per segment: a roaring `BitMap` of deleted offsets and an array of send times (the latter is
  *not* in the snapshot: it is read back from the segment files on restore);
* per queue, the messages received at least once ("touched") as parallel `array`s (seq,
  visibility deadline, lease id, receive count, flags) — the snapshot copies them with memcpy;
* per queue, the priority level of each live message above level 0 (one roaring `BitMap64`
  per level, in the snapshot: `cmq.fsm.ready.ReadyIndex`);
* derived indexes rebuilt on restore and never snapshotted: ``ready`` (a `BitMap64` of seqs
  visible at the queue's clock, and its part at each level above 0), ``timers`` (a bucketed
  `cmq.fsm.timers.TimerIndex`: when each invisible message becomes visible) and ``pending_dl``
  (seqs waiting for a `DeadLetter`).

Every live message is in exactly one of ready / timers (a standing entry) / pending_dl.

Time: each queue keeps ``clock`` = the largest ``now_ms`` any command for it carried, and uses it
instead of the command's own ``now_ms`` (time never runs backwards across leader changes, so
visibility is monotonic and send times are non-decreasing in seq — which makes retention expiry
delete a prefix of the queue). Every ``now_ms`` is a leader's clock (`cmq.routing.ops`). If the
clock stands ahead of the leaders' clocks anyway (a stamp from a clock far ahead got in), a `Retime`
keeps the lead as a skew added to later stamps and slewed off
(`cmq.fsm.queuetime.QueueTime.advance`), so the queue's time runs on rather than standing still
until real time catches up.

Leases: a lease is *unexpired* while its deadline (``visible_at``) is after the clock. A lease id
stays *current* until the message is leased again, nacked, or deleted. Ack accepts the current
lease id even after its deadline (nobody else holds the message; SQS does the same);
ChangeVisibility and Nack need an unexpired lease (``MessageNotInflight`` otherwise). Any other
lease id, or a message that is gone, gets ``LeaseStale``.

The machine is the hub: it decodes a command, looks its queue up and hands the queue's state
(`cmq.fsm.queue.QueueState`), the `cmq.fsm.writer.SegmentWriter` (segment appends, seals,
deletions, releases through the store) and the `cmq.fsm.effects.Effects` sink to the command's
handler: `cmq.fsm.messages` (produce, acks, visibility, expiry, purge), `cmq.fsm.leasing`
(Lease), `cmq.fsm.lifecycle` (archive claims, copy-forward) or `cmq.fsm.rewind` (Rewind); the
queue commands (create, delete, attributes) are its own. The read-only queries are
`cmq.fsm.reads` (what timed work is due: `cmq.fsm.timedwork`), the snapshot image
`cmq.fsm.image`.
"""

from __future__ import annotations

from array import array

from cmq import errors
from cmq.errors import InvalidParameter, InvariantBroken, NewerFormat, NewerLayout
from cmq.fsm import leasing, lifecycle, messages, rewind
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
    Expire,
    Lease,
    MarkArchived,
    Nack,
    Produce,
    Purge,
    Result,
    Retime,
    Rewind,
    SetAttributes,
    Tidy,
    decode_command,
)
from cmq.fsm.effects import Effects
from cmq.fsm.fifo_state import FifoState
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
from cmq.fsm.queue import QueueState, encode_head
from cmq.fsm.reads import MachineReads
from cmq.fsm.results import queue_not_found
from cmq.fsm.store import SegmentLayout, SegmentStore
from cmq.fsm.timedwork import Due
from cmq.fsm.writer import SegmentWriter
from cmq.model import QUEUE_NAME, is_fifo_name

__all__ = ["MAX_DEAD_LETTER_PER_LEASE", "Due", "QueueMachine"]


class QueueMachine(MachineReads):
    """The data-group state machine (implements `raftlog.runtime.statemachine.StateMachine`
    with `Result` results).

    ``apply`` is total and deterministic: user errors are `CommandFailed` results; only a broken
    invariant (undecodable committed bytes, damaged segment files) raises `InvariantBroken`.
    The read-only methods serve the leader's service without a Raft round trip; they reflect
    the state after the last applied command.

    Effects instead of calls: ``apply`` and ``restore`` call nothing outside the machine. They
    record which queues changed (`Effects`); `take_changed` hands that set over (the node wakes
    the long polls waiting on those queues after each batch of applies). Timed work is a query
    too: `due` says what retention expiry and dead-letter moves are due, for the group's leader
    to propose.
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
        effects = Effects()
        super().__init__({}, store, effects)
        self._writer = SegmentWriter(
            store, effects, segment_bytes=segment_bytes, segment_age_ms=segment_age_ms
        )
        self._incarnations = 0
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
        for key, seg in self._effects.removable():
            if seg is None:
                self._store.drop_queue(key)
            else:
                self._store.release(key, seg.first_seq)
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
        Costs a read of the live segments' indexes (per-record times are not in the image;
        `cmq.fsm.segindex`), or of every record of a segment without a usable index (the
        active one, or all of them before the ``segment_index`` flag). A shipped image
        (`export_snapshot`) first installs the segments it carries (without indexes: recovery
        scans them and stages their indexes for the next snapshot's flush)."""
        if data.startswith(SHIPPED_FAMILY):
            data = install_shipped(data, self._store)
        before = set(self._queues)
        incarnations, queues = decode_image(data) if data else (0, {})
        layout = {
            q.key: [SegmentLayout(s.first_seq, s.count, s.size, s.sealed) for s in q.segments]
            for q in queues.values()
        }
        recovered = self._store.recover(layout)
        self._effects.forget_releases()
        self._incarnations = incarnations
        for q in queues.values():
            live = sum(seg.count - len(seg.deleted) for seg in q.segments)
            if live != q.live:
                raise InvariantBroken(f"snapshot of {q.name!r}: {live} live messages != {q.live}")
            q.rebuild_alias()
            for seg, rec in zip(q.segments, recovered[q.key], strict=True):
                seg.sent_at = rec.sent_at
                # As `Segment.add_visible` keeps it live: once a record's first visibility
                # differs from its send time, or the segment holds a copy (forced there).
                if seg.copies or rec.visible_at != rec.sent_at:
                    seg.visible_from = array("q", rec.visible_at)
                lifecycle.restore_sent_keys(q, seg)
                q.rebuild_derived(seg, rec.visible_at)
            q.rebuild_touched()
            if q.fifo is not None:
                q.fifo.rebuild()
        self._queues = queues
        self.applied_index = index
        for name in before | queues.keys():
            self._effects.change(name)

    # ------------------------------------------------------------------------ commands
    def execute(self, cmd: Command) -> Result:
        """Apply a decoded command (what `apply` does after decoding): look its queue up and
        hand it to the command's handler (see the module docstring)."""
        w, fx = self._writer, self._effects
        match cmd:
            case Produce():
                if (q := self._mutable(cmd.queue)) is None:
                    return queue_not_found(cmd.queue)
                return messages.produce(q, cmd, w, fx)
            case Lease():
                if (q := self._mutable(cmd.queue)) is None:
                    return queue_not_found(cmd.queue)
                if q.ttl:  # nothing is delivered past its time to live
                    messages.expire_ttl(q, cmd.now_ms, w, fx)
                return leasing.lease(q, cmd)
            case Ack():
                if (q := self._mutable(cmd.queue)) is None:
                    return queue_not_found(cmd.queue)
                return messages.ack(q, cmd, w, fx)
            case ChangeVisibility():
                if (q := self._mutable(cmd.queue)) is None:
                    return queue_not_found(cmd.queue)
                return messages.change_visibility(q, cmd, fx)
            case Nack():
                if (q := self._mutable(cmd.queue)) is None:
                    return queue_not_found(cmd.queue)
                return messages.nack(q, cmd, fx)
            case DeadLetter():
                if (q := self._mutable(cmd.queue)) is None:
                    return queue_not_found(cmd.queue)
                return messages.dead_letter(q, cmd, w, fx)
            case Expire():
                if (q := self._mutable(cmd.queue)) is None:
                    return queue_not_found(cmd.queue)
                return messages.expire(q, cmd, w, fx)
            case Purge():
                if (q := self._mutable(cmd.name)) is None:
                    return queue_not_found(cmd.name)
                return messages.purge(q, cmd, w, fx)
            case Retime():
                if (q := self._mutable(cmd.queue)) is None:
                    return queue_not_found(cmd.queue)
                return messages.retime(q, cmd, fx)
            case Rewind():
                if (q := self._mutable(cmd.queue)) is None:
                    return queue_not_found(cmd.queue)
                return rewind.rewind(q, cmd, w, fx)
            case Tidy():
                if (q := self._mutable(cmd.queue)) is None:
                    return queue_not_found(cmd.queue)
                return lifecycle.tidy(q, cmd, w, fx)
            case ClaimSegments():
                if (bad := lifecycle.bad_batch(cmd.batch_id)) is not None:
                    return bad
                if (q := self._mutable(cmd.queue)) is None:
                    return queue_not_found(cmd.queue)
                return lifecycle.claim(q, cmd)
            case MarkArchived():
                if (bad := lifecycle.bad_batch(cmd.batch_id)) is not None:
                    return bad
                if (q := self._mutable(cmd.queue)) is None:
                    return queue_not_found(cmd.queue)
                return lifecycle.mark_archived(q, cmd, w, fx)
            case CreateQueue():
                return self._create(cmd)
            case DeleteQueue():
                return self._delete_queue(cmd)
            case SetAttributes():
                return self._set_attributes(cmd)

    def _mutable(self, name: str) -> QueueState | None:
        """The queue a command is about to change (its cached image and figures are dropped)."""
        q = self._queues.get(name)
        if q is not None:
            q.image = None
            q.gauges = None
        return q

    def end_batch(self) -> None:
        """After a batch of `apply` calls: the segment store writes the batch's appends out
        (`SegmentStore.write_out`); applying without it is correct, only less batched."""
        self._store.write_out()

    def take_changed(self) -> set[str]:
        """The queues changed since the last call (an effect of `apply`/`restore`; bounded by
        the queue names, so a machine nobody drains does not grow without limit)."""
        return self._effects.take_changed()

    # ------------------------------------------------------------------------ queues
    def _create(self, cmd: CreateQueue) -> Created | CommandFailed:
        if not QUEUE_NAME.match(cmd.name):
            # The service validates names; re-checked because names become directory names.
            return CommandFailed(errors.InvalidQueueName.code, f"bad queue name {cmd.name!r}")
        if is_fifo_name(cmd.name) != cmd.attributes.fifo:
            return CommandFailed(
                errors.InvalidParameter.code, "a FIFO queue's name ends in .fifo, and only its"
            )
        q = self._mutable(cmd.name)
        if q is not None:
            if q.attributes != cmd.attributes:
                return CommandFailed(
                    errors.QueueAlreadyExists.code,
                    f"queue {cmd.name!r} exists with different attributes",
                )
            return Created(False, q.attributes)
        self._incarnations += 1
        q = QueueState(
            cmd.name,
            self._incarnations,
            cmd.attributes,
            cmd.now_ms,
            segment_bytes=max(1, cmd.segment_bytes),
            segment_age_ms=max(0, cmd.segment_age_ms),
        )
        if cmd.attributes.fifo:
            q.fifo = FifoState()
        self._queues[cmd.name] = q
        self._effects.change(cmd.name)
        return Created(True, cmd.attributes)

    def _delete_queue(self, cmd: DeleteQueue) -> Done | CommandFailed:
        q = self._queues.pop(cmd.name, None)
        if q is None:
            return queue_not_found(cmd.name)
        self._effects.release(q.key, None)
        self._effects.change(cmd.name)
        return Done()

    def _set_attributes(self, cmd: SetAttributes) -> Done | CommandFailed:
        q = self._mutable(cmd.name)
        if q is None:
            return queue_not_found(cmd.name)
        if cmd.attributes.fifo != q.attributes.fifo:
            return CommandFailed(errors.InvalidParameter.code, "fifo is fixed at creation")
        before = q.attributes
        q.attributes = cmd.attributes
        q.head = encode_head(q.name, q.attributes)
        if before.retry is not None or cmd.attributes.retry is not None:
            # Leased messages' timers follow the new back-off (what a restore would compute).
            q.reschedule_leased()
        # The segments kept for the archive or the rewind retention go once neither keeps
        # them any more (no archive now, a shorter retention).
        for seg in [seg for seg in q.segments if seg.released]:
            self._writer.settle(q, seg)
        self._effects.change(cmd.name)
        return Done()

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
