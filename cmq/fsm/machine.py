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
delete a prefix of the queue).

Leases: a lease is *unexpired* while its deadline (``visible_at``) is after the clock. A lease id
stays *current* until the message is leased again, nacked, or deleted. Ack accepts the current
lease id even after its deadline (nobody else holds the message; SQS does the same);
ChangeVisibility and Nack need an unexpired lease (``MessageNotInflight`` otherwise). Any other
lease id, or a message that is gone, gets ``LeaseStale``.
"""

from __future__ import annotations

import heapq
import struct
import zlib
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable

from pyroaring import BitMap, BitMap64

from cmq import errors
from cmq.errors import InvalidParameter, InvariantBroken
from cmq.fsm.commands import (
    Ack,
    ChangeVisibility,
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
    Leased,
    LeasedMessage,
    Nack,
    Produce,
    Produced,
    Purge,
    Purged,
    Result,
    SetAttributes,
    decode_command,
    read_attributes,
    write_attributes,
)
from cmq.fsm.store import SegmentLayout, SegmentStore, StoredMessage, encode_record
from cmq.fsm.wire import Reader, Writer
from cmq.model import DEDUP_WINDOW_MS, QUEUE_NAME, QueueAttributes, QueueStats

SEGMENT_BYTES = 8 << 20
"""A segment is sealed once it holds this many bytes..."""
SEGMENT_AGE_MS = 60 * 60 * 1000
"""...or once it is this old (by the queue clock) when the next message arrives."""
MAX_DEAD_LETTER_PER_LEASE = 100
"""At most this many messages are marked pending-dead-letter by one `Lease` (bounds its work)."""

IMAGE_MAGIC = b"CMQF"
IMAGE_VERSION = 1

_PENDING_DEAD_LETTER = 1
# Cells of a touched slot.
_SEQ, _VIS, _LEASE, _COUNT, _FLAGS = range(5)
_WIDTH = 5
_IMAGE_HEAD = struct.Struct("<BqI")
_QUEUE_HEAD = struct.Struct("<10qI")
_SEGMENT_HEAD = struct.Struct("<qqqBqI")
_DEDUP_TAIL = struct.Struct("<qq")
_SHIPPED_MAGIC = b"CMQSHIP1"
_SHIPPED_HEAD = struct.Struct("<QI")  # light image length, segment count
_SHIPPED_SEGMENT = struct.Struct("<HqQI")  # key length, first seq, size, crc32


class _Touched:
    """State of the live messages received at least once: one interleaved ``array('q')`` of
    `_WIDTH` cells per slot (seq, visibility deadline, lease id, receive count, flags), so a
    snapshot copies it with one memcpy.

    Slots are dense: removing a message moves the last slot into its place. The order is a pure
    function of the command history, so equal histories give equal snapshot bytes.
    ``slot_of`` is derived (rebuilt on restore).
    """

    __slots__ = ("cells", "slot_of")

    def __init__(self) -> None:
        self.cells: array[int] = array("q")
        self.slot_of: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self.slot_of)

    def seqs(self) -> array[int]:
        """The seq of every slot, in slot order (a copy)."""
        return self.cells[_SEQ::_WIDTH]

    def get(self, slot: int, field: int) -> int:
        return self.cells[slot * _WIDTH + field]

    def set(self, slot: int, field: int, value: int) -> None:
        self.cells[slot * _WIDTH + field] = value

    def add(self, seq: int) -> int:
        slot = len(self.slot_of)
        self.cells.extend((seq, 0, 0, 0, 0))
        self.slot_of[seq] = slot
        return slot

    def remove(self, seq: int) -> None:
        slot = self.slot_of.pop(seq, None)
        if slot is None:
            return
        last = len(self.slot_of)
        cells = self.cells
        if slot != last:
            at, src = slot * _WIDTH, last * _WIDTH
            cells[at : at + _WIDTH] = cells[src : src + _WIDTH]
            self.slot_of[cells[at + _SEQ]] = slot
        del cells[last * _WIDTH :]

    def clear(self) -> None:
        del self.cells[:]
        self.slot_of.clear()

    def reindex(self) -> None:
        self.slot_of = {seq: slot for slot, seq in enumerate(self.seqs())}


class _Segment:
    """One segment of a queue: ``count`` records from ``first_seq``, ``size`` bytes."""

    __slots__ = ("count", "created_ms", "deleted", "first_seq", "sealed", "sent_at", "size")

    def __init__(self, first_seq: int, created_ms: int) -> None:
        self.first_seq = first_seq
        self.created_ms = created_ms
        self.count = 0
        self.size = 0
        self.sealed = False
        self.deleted = BitMap()
        self.sent_at: array[int] = array("q")

    def full(self) -> bool:
        return len(self.deleted) >= self.count


class _Queue:
    """All state of one queue (see the module docstring)."""

    __slots__ = (
        "acked_total",
        "attributes",
        "clock",
        "created_ms",
        "dead_lettered_total",
        "dedup",
        "expired_total",
        "firsts",
        "head",
        "heap",
        "image",
        "incarnation",
        "key",
        "lease_counter",
        "live",
        "name",
        "next_seq",
        "pending_dl",
        "ready",
        "segments",
        "sent_total",
        "timer_of",
        "touched",
    )

    def __init__(
        self, name: str, incarnation: int, attributes: QueueAttributes, created_ms: int
    ) -> None:
        self.name = name
        self.incarnation = incarnation
        # The store's name for this queue: a re-created queue never meets its predecessor's
        # files (which may outlive it until the next snapshot).
        self.key = f"{name}.{incarnation}"
        self.attributes = attributes
        self.head = _encode_head(name, attributes)
        self.created_ms = created_ms
        self.clock = created_ms
        self.next_seq = 1
        self.lease_counter = 0
        self.live = 0
        self.sent_total = 0
        self.acked_total = 0
        self.dead_lettered_total = 0
        self.expired_total = 0
        self.segments: list[_Segment] = []
        self.firsts: list[int] = []
        self.touched = _Touched()
        # dedup id -> (message id, seq, produced at); insertion order is time order.
        self.dedup: dict[str, tuple[str, int, int]] = {}
        self.ready = BitMap64()
        self.timer_of: dict[int, int] = {}
        self.heap: list[tuple[int, int]] = []
        self.pending_dl = BitMap64()
        # This queue's part of the snapshot image, kept until a command touches the queue.
        self.image: bytes | None = None

    def segment_of(self, seq: int) -> _Segment | None:
        i = bisect_right(self.firsts, seq) - 1
        if i < 0:
            return None
        seg = self.segments[i]
        return seg if seq < seg.first_seq + seg.count else None

    def is_live(self, seq: int) -> bool:
        seg = self.segment_of(seq)
        return seg is not None and (seq - seg.first_seq) not in seg.deleted

    def advance(self, now_ms: int) -> None:
        """Move the clock to ``now_ms`` (never back) and make due messages ready."""
        self.clock = max(self.clock, now_ms)
        heap, timer_of = self.heap, self.timer_of
        while heap and heap[0][0] <= self.clock:
            at, seq = heapq.heappop(heap)
            if timer_of.get(seq) == at:
                del timer_of[seq]
                self.ready.add(seq)

    def schedule(self, seq: int, at: int) -> None:
        """The live, not pending-dead-letter message ``seq`` becomes visible at ``at``."""
        if at <= self.clock:
            self.timer_of.pop(seq, None)
            self.ready.add(seq)
            return
        self.ready.discard(seq)
        self.timer_of[seq] = at
        heapq.heappush(self.heap, (at, seq))
        if len(self.heap) > 2 * len(self.timer_of) + 1024:
            # Superseded entries pile up with re-leases; rebuild rather than grow unbounded.
            self.heap = [(t, s) for s, t in self.timer_of.items()]
            heapq.heapify(self.heap)

    def prune_heap(self) -> None:
        """Drop superseded entries from the top of the heap (a derived index only)."""
        heap, timer_of = self.heap, self.timer_of
        while heap and timer_of.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)

    def first_live(self) -> tuple[_Segment, int] | None:
        for seg in self.segments:
            if not seg.full():
                return seg, seg.deleted.flip(0, seg.count).min()
        return None

    def pending_dl_seqs(self) -> list[int]:
        return list(self.pending_dl)


class QueueMachine:
    """The data-group state machine (implements `raftlog.runtime.statemachine.StateMachine`).

    ``apply`` is total and deterministic: user errors are `CommandFailed` results; only a broken
    invariant (undecodable committed bytes, damaged segment files) raises `InvariantBroken`.
    The read-only methods serve the leader's service without a Raft round trip; they reflect
    the state after the last applied command. ``on_change(queue)`` is called after every
    command that changed a queue except `Lease` (which only hides messages), and for every
    queue after `restore`, so long polls can wake and re-check.
    """

    def __init__(
        self,
        store: SegmentStore,
        *,
        on_change: Callable[[str], None] | None = None,
        segment_bytes: int = SEGMENT_BYTES,
        segment_age_ms: int = SEGMENT_AGE_MS,
    ) -> None:
        self._store = store
        self.on_change = on_change
        self._segment_bytes = segment_bytes
        self._segment_age_ms = segment_age_ms
        self._queues: dict[str, _Queue] = {}
        self._incarnations = 0
        # Segments (queue key, first seq) and whole queues (first seq None) no longer in the
        # state. Their files are removed only once no durable snapshot lists them: those
        # released before the previous `snapshot()` are removed by the next one.
        self._released: list[tuple[str, int | None]] = []
        self._releasing: list[tuple[str, int | None]] = []
        self.applied_index = 0

    # ------------------------------------------------------------------------ StateMachine
    def apply(self, index: int, command: bytes) -> object:
        """Apply one committed command; returns its `Result`."""
        try:
            cmd = decode_command(command)
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
        for key, first in self._releasing:
            if first is None:
                self._store.drop_queue(key)
            else:
                self._store.release(key, first)
        self._releasing, self._released = self._released, []
        return image

    def export_snapshot(self, data: bytes) -> bytes:
        """A self-contained form of the image ``data`` for a follower that lacks the segment
        files: the image plus every segment it lists, up to its recorded size, each with a
        CRC-32. `restore` accepts both forms. Runs on a worker thread (reads files only)."""
        if not data or data.startswith(_SHIPPED_MAGIC):
            return data
        _, queues = self._decode_image(data)
        parts = [_SHIPPED_MAGIC, b"", data]
        count = 0
        for q in queues.values():
            key = q.key.encode()
            for seg in q.segments:
                blob = self._store.export(q.key, seg.first_seq, seg.size)
                crc = zlib.crc32(blob)
                parts.append(_SHIPPED_SEGMENT.pack(len(key), seg.first_seq, seg.size, crc))
                parts.append(key)
                parts.append(blob)
                count += 1
        parts[1] = _SHIPPED_HEAD.pack(len(data), count)
        return b"".join(parts)

    def _install_shipped(self, data: bytes) -> bytes:
        """Write the segments of a shipped image into the store; return the plain image."""
        view = memoryview(data)
        pos = len(_SHIPPED_MAGIC)
        try:
            image_len, count = _SHIPPED_HEAD.unpack_from(view, pos)
            pos += _SHIPPED_HEAD.size
            image = bytes(view[pos : pos + image_len])
            pos += image_len
            for _ in range(count):
                key_len, first, size, crc = _SHIPPED_SEGMENT.unpack_from(view, pos)
                pos += _SHIPPED_SEGMENT.size
                key = bytes(view[pos : pos + key_len]).decode()
                pos += key_len
                blob = bytes(view[pos : pos + size])
                pos += size
                if len(blob) != size or zlib.crc32(blob) != crc:
                    raise InvariantBroken(f"shipped segment {key}/{first} fails its checksum")
                self._store.install(key, first, blob)
        except (struct.error, UnicodeDecodeError) as e:
            raise InvariantBroken(f"malformed shipped snapshot: {e}") from None
        if pos != len(view) or len(image) != image_len:
            raise InvariantBroken("malformed shipped snapshot: length mismatch")
        return image

    def restore(self, index: int, data: bytes) -> None:
        """Replace the state with the image ``data`` (``b""``: empty) and bring the segment
        files to the recorded layout (longer files truncated; missing/short: `InvariantBroken`).
        Costs a read of the live segments (per-record times are not in the image). A shipped
        image (`export_snapshot`) first installs the segments it carries."""
        if data.startswith(_SHIPPED_MAGIC):
            data = self._install_shipped(data)
        before = set(self._queues)
        incarnations, queues = self._decode_image(data) if data else (0, {})
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
            for seg, rec in zip(q.segments, recovered[q.key], strict=True):
                seg.sent_at = rec.sent_at
                self._rebuild_derived(q, seg, rec.visible_at)
            self._rebuild_touched(q)
        self._queues = queues
        self.applied_index = index
        if self.on_change is not None:
            for name in sorted(before | set(queues)):
                self.on_change(name)

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

    def _mutable(self, name: str) -> _Queue | None:
        """The queue a command is about to change (its cached image is dropped)."""
        q = self._queues.get(name)
        if q is not None:
            q.image = None
        return q

    def _changed(self, name: str) -> None:
        if self.on_change is not None:
            self.on_change(name)

    @staticmethod
    def _not_found(name: str) -> CommandFailed:
        return CommandFailed(errors.QueueNotFound.code, f"queue {name!r} does not exist")

    def _create(self, cmd: CreateQueue) -> Result:
        if not QUEUE_NAME.match(cmd.name):
            # The service validates names; re-checked because names become directory names.
            return CommandFailed(errors.InvalidQueueName.code, f"bad queue name {cmd.name!r}")
        q = self._mutable(cmd.name)
        if q is not None:
            if q.attributes != cmd.attributes:
                return CommandFailed(
                    errors.QueueAlreadyExists.code,
                    f"queue {cmd.name!r} exists with different attributes",
                )
            return Created(False, q.attributes)
        self._incarnations += 1
        self._queues[cmd.name] = _Queue(cmd.name, self._incarnations, cmd.attributes, cmd.now_ms)
        self._changed(cmd.name)
        return Created(True, cmd.attributes)

    def _delete_queue(self, cmd: DeleteQueue) -> Result:
        q = self._queues.pop(cmd.name, None)
        if q is None:
            return self._not_found(cmd.name)
        self._released.append((q.key, None))
        self._changed(cmd.name)
        return Done()

    def _set_attributes(self, cmd: SetAttributes) -> Result:
        q = self._mutable(cmd.name)
        if q is None:
            return self._not_found(cmd.name)
        q.attributes = cmd.attributes
        q.head = _encode_head(q.name, q.attributes)
        self._changed(cmd.name)
        return Done()

    def _purge(self, cmd: Purge) -> Result:
        q = self._mutable(cmd.name)
        if q is None:
            return self._not_found(cmd.name)
        q.advance(cmd.now_ms)
        count = self._delete_prefix(q, q.next_seq)
        self._changed(cmd.name)
        return Purged(count)

    def _produce(self, cmd: Produce) -> Result:
        q = self._mutable(cmd.queue)
        if q is None:
            return self._not_found(cmd.queue)
        limit = q.attributes.max_message_size
        for m in cmd.messages:
            # Any node builds produce commands from its own replica's view of the attributes;
            # the committed attributes decide.
            if len(m.body) > limit:
                return CommandFailed(
                    errors.MessageTooLarge.code,
                    f"a message body has {len(m.body)} bytes; the queue allows {limit}",
                )
        q.advance(cmd.now_ms)
        clock = q.clock
        dedup = q.dedup
        while dedup:
            oldest = next(iter(dedup))
            if clock - dedup[oldest][2] < DEDUP_WINDOW_MS:
                break
            del dedup[oldest]
        default_delay = q.attributes.delay_seconds * 1000
        out: list[tuple[str, int]] = []
        seg = q.segments[-1] if q.segments and not q.segments[-1].sealed else None
        messages: list[StoredMessage] = []
        frames: list[bytes] = []
        for m in cmd.messages:
            if m.dedup_id is not None:
                hit = dedup.get(m.dedup_id)
                if hit is not None:
                    out.append((hit[0], hit[1]))
                    continue
            if seg is None or self._must_seal(q, seg):
                if seg is not None:
                    self._append(q, seg, messages, frames)
                    messages, frames = [], []
                    self._seal(q, seg)
                seg = _Segment(q.next_seq, clock)
                q.segments.append(seg)
                q.firsts.append(seg.first_seq)
            seq = q.next_seq
            q.next_seq += 1
            delay = default_delay if m.delay_ms is None else m.delay_ms
            visible_at = clock + max(0, delay)
            stored = StoredMessage(m.id, seq, m.body, m.binary, m.attributes, clock)
            frame = encode_record(stored, visible_at)
            messages.append(stored)
            frames.append(frame)
            seg.count += 1
            seg.size += len(frame)
            seg.sent_at.append(clock)
            q.live += 1
            q.sent_total += 1
            q.schedule(seq, visible_at)
            if m.dedup_id is not None:
                dedup[m.dedup_id] = (m.id, seq, clock)
            out.append((m.id, seq))
        if seg is not None and messages:
            self._append(q, seg, messages, frames)
        self._changed(cmd.queue)
        return Produced(tuple(out))

    def _lease(self, cmd: Lease) -> Result:
        q = self._mutable(cmd.queue)
        if q is None:
            return self._not_found(cmd.queue)
        q.advance(cmd.now_ms)
        attrs = q.attributes
        visibility = (
            attrs.visibility_timeout * 1000 if cmd.visibility_ms is None else cmd.visibility_ms
        )
        deadline = q.clock + max(0, visibility)
        limit = attrs.max_receive_count if attrs.dead_letter_queue else 0
        touched = q.touched
        leased: list[LeasedMessage] = []
        dead: list[int] = []
        while len(leased) < cmd.max_messages and q.ready:
            seq = q.ready.min()
            slot = touched.slot_of.get(seq)
            if limit > 0 and slot is not None and touched.get(slot, _COUNT) >= limit:
                if len(dead) >= MAX_DEAD_LETTER_PER_LEASE:
                    break
                q.ready.remove(seq)
                touched.set(slot, _FLAGS, touched.get(slot, _FLAGS) | _PENDING_DEAD_LETTER)
                q.pending_dl.add(seq)
                dead.append(seq)
                continue
            q.ready.remove(seq)
            if slot is None:
                slot = touched.add(seq)
            q.lease_counter += 1
            count = touched.get(slot, _COUNT) + 1
            touched.set(slot, _LEASE, q.lease_counter)
            touched.set(slot, _COUNT, count)
            touched.set(slot, _VIS, deadline)
            message = self._read_live(q, seq)
            leased.append(
                LeasedMessage(seq, q.lease_counter, count, message.id, message.sent_at_ms)
            )
        # Scheduled after the loop: with a zero visibility a message is ready again at once and
        # must not be picked twice by one Lease.
        for m in leased:
            q.schedule(m.seq, deadline)
        return Leased(tuple(leased), tuple(dead))

    def _lease_slot(self, q: _Queue, seq: int, lease_id: int) -> int | None:
        """The touched slot of ``seq`` if ``lease_id`` is its current lease."""
        slot = q.touched.slot_of.get(seq)
        if slot is None or lease_id == 0 or q.touched.get(slot, _LEASE) != lease_id:
            return None
        return slot

    def _ack(self, cmd: Ack) -> Result:
        q = self._mutable(cmd.queue)
        if q is None:
            return self._not_found(cmd.queue)
        q.advance(cmd.now_ms)
        out: list[str | None] = []
        for seq, lease_id in cmd.entries:
            if self._lease_slot(q, seq, lease_id) is None:
                out.append(errors.LEASE_STALE)
                continue
            self._delete_one(q, seq)
            q.acked_total += 1
            out.append(None)
        self._changed(cmd.queue)
        return EntryOutcomes(tuple(out))

    def _inflight_slot(self, q: _Queue, seq: int, lease_id: int) -> int | str:
        """The slot of ``seq`` if ``lease_id`` is its current *unexpired* lease, else a code."""
        slot = self._lease_slot(q, seq, lease_id)
        if slot is None:
            return errors.LEASE_STALE
        t = q.touched
        if t.get(slot, _FLAGS) & _PENDING_DEAD_LETTER or t.get(slot, _VIS) <= q.clock:
            return errors.MESSAGE_NOT_INFLIGHT
        return slot

    def _change_visibility(self, cmd: ChangeVisibility) -> Result:
        q = self._mutable(cmd.queue)
        if q is None:
            return self._not_found(cmd.queue)
        q.advance(cmd.now_ms)
        out: list[str | None] = []
        for seq, lease_id, visibility_ms in cmd.entries:
            slot = self._inflight_slot(q, seq, lease_id)
            if isinstance(slot, str):
                out.append(slot)
                continue
            at = q.clock + max(0, visibility_ms)
            q.touched.set(slot, _VIS, at)
            q.schedule(seq, at)
            out.append(None)
        self._changed(cmd.queue)
        return EntryOutcomes(tuple(out))

    def _nack(self, cmd: Nack) -> Result:
        q = self._mutable(cmd.queue)
        if q is None:
            return self._not_found(cmd.queue)
        q.advance(cmd.now_ms)
        at = q.clock + max(0, cmd.delay_ms)
        out: list[str | None] = []
        for seq, lease_id in cmd.entries:
            slot = self._inflight_slot(q, seq, lease_id)
            if isinstance(slot, str):
                out.append(slot)
                continue
            q.touched.set(slot, _LEASE, 0)
            q.touched.set(slot, _VIS, at)
            q.schedule(seq, at)
            out.append(None)
        self._changed(cmd.queue)
        return EntryOutcomes(tuple(out))

    def _dead_letter(self, cmd: DeadLetter) -> Result:
        q = self._mutable(cmd.queue)
        if q is None:
            return self._not_found(cmd.queue)
        for seq in cmd.seqs:
            if self._delete_one(q, seq):
                q.dead_lettered_total += 1
        self._changed(cmd.queue)
        return Done()

    def _expire(self, cmd: Expire) -> Result:
        q = self._mutable(cmd.queue)
        if q is None:
            return self._not_found(cmd.queue)
        q.advance(cmd.now_ms)
        cutoff = q.clock - q.attributes.message_retention_seconds * 1000
        end_seq = 0
        for seg in q.segments:
            # Send times are non-decreasing in seq (queue clock), so expiry is a prefix.
            k = bisect_right(seg.sent_at, cutoff)
            end_seq = seg.first_seq + k
            if k < seg.count:
                break
        count = self._delete_prefix(q, end_seq)
        q.expired_total += count
        self._changed(cmd.queue)
        return Expired(count)

    # ------------------------------------------------------------------------ helpers
    def _must_seal(self, q: _Queue, seg: _Segment) -> bool:
        return seg.size >= self._segment_bytes or q.clock - seg.created_ms >= self._segment_age_ms

    def _append(
        self, q: _Queue, seg: _Segment, messages: list[StoredMessage], frames: list[bytes]
    ) -> None:
        size = self._store.append(q.key, seg.first_seq, messages, frames)
        if size != seg.size:
            raise InvariantBroken(
                f"queue {q.name!r} segment {seg.first_seq}: store size {size} != {seg.size}"
            )

    def _seal(self, q: _Queue, seg: _Segment) -> None:
        seg.sealed = True
        self._store.seal(q.key, seg.first_seq)
        self._maybe_release(q, seg)

    def _maybe_release(self, q: _Queue, seg: _Segment) -> None:
        if not (seg.sealed and seg.full()):
            return
        i = bisect_right(q.firsts, seg.first_seq) - 1
        if i < 0 or q.segments[i] is not seg:
            raise InvariantBroken(f"queue {q.name!r}: segment {seg.first_seq} not in its list")
        del q.segments[i]
        del q.firsts[i]
        self._released.append((q.key, seg.first_seq))

    def _delete_one(self, q: _Queue, seq: int) -> bool:
        """Delete the live message ``seq``; False if it was already gone."""
        seg = q.segment_of(seq)
        if seg is None:
            return False
        rel = seq - seg.first_seq
        if rel in seg.deleted:
            return False
        seg.deleted.add(rel)
        q.live -= 1
        q.ready.discard(seq)
        q.timer_of.pop(seq, None)
        q.pending_dl.discard(seq)
        q.touched.remove(seq)
        self._maybe_release(q, seg)
        return True

    def _delete_prefix(self, q: _Queue, end_seq: int) -> int:
        """Delete every live message with seq < ``end_seq``; returns how many."""
        count = 0
        hit: list[_Segment] = []
        for seg in q.segments:
            if seg.first_seq >= end_seq:
                break
            hi = min(seg.count, end_seq - seg.first_seq)
            n = hi - seg.deleted.range_cardinality(0, hi)
            if n:
                seg.deleted.add_range(0, hi)
                count += n
                hit.append(seg)
        if not count:
            return 0
        q.live -= count
        q.ready.remove_range(0, end_seq)
        q.pending_dl.remove_range(0, end_seq)
        if end_seq >= q.next_seq:
            q.timer_of.clear()
            q.heap.clear()
            q.touched.clear()
        else:
            for seq in [s for s in q.timer_of if s < end_seq]:
                del q.timer_of[seq]
            for seq in [s for s in q.touched.seqs() if s < end_seq]:
                q.touched.remove(seq)
        for seg in hit:
            self._maybe_release(q, seg)
        return count

    def _read_live(self, q: _Queue, seq: int) -> StoredMessage:
        seg = q.segment_of(seq)
        if seg is None:
            raise InvariantBroken(f"queue {q.name!r}: live seq {seq} has no segment")
        return self._store.read(q.key, seg.first_seq, seq)

    # ------------------------------------------------------------------------ reads
    def queue_names(self) -> list[str]:
        """Every queue of this group, sorted."""
        return sorted(self._queues)

    def attributes(self, name: str) -> QueueAttributes | None:
        q = self._queues.get(name)
        return None if q is None else q.attributes

    def stats(self, name: str, now_ms: int) -> QueueStats | None:
        """Exact counts at ``max(now_ms, queue clock)``. ``in_flight`` includes messages
        waiting to be moved to the dead-letter queue; ``delayed`` = invisible without a lease
        (delayed sends, nacks with a delay). O(invisible messages)."""
        q = self._queues.get(name)
        if q is None:
            return None
        clock = max(now_ms, q.clock)
        due = in_flight = delayed = 0
        touched = q.touched
        for seq, at in q.timer_of.items():
            if at <= clock:
                due += 1
                continue
            slot = touched.slot_of.get(seq)
            if slot is not None and touched.get(slot, _LEASE) != 0:
                in_flight += 1
            else:
                delayed += 1
        first = q.first_live()
        oldest = 0 if first is None else max(0, clock - first[0].sent_at[first[1]])
        return QueueStats(
            visible=len(q.ready) + due,
            in_flight=in_flight + len(q.pending_dl),
            delayed=delayed,
            sent_total=q.sent_total,
            acked_total=q.acked_total,
            dead_lettered_total=q.dead_lettered_total,
            expired_total=q.expired_total,
            oldest_age_ms=oldest,
        )

    def read(self, name: str, seqs: Iterable[int]) -> list[StoredMessage]:
        """The stored messages among ``seqs`` that are still live (others skipped), in the
        given order."""
        q = self._queues.get(name)
        if q is None:
            return []
        return [self._read_live(q, seq) for seq in seqs if q.is_live(seq)]

    def has_visible(self, name: str, now_ms: int) -> bool:
        """Whether a `Lease` at ``now_ms`` would find a message (a hint for long polls)."""
        q = self._queues.get(name)
        if q is None:
            return False
        if q.ready:
            return True
        q.prune_heap()
        return bool(q.heap) and q.heap[0][0] <= max(now_ms, q.clock)

    def next_visible_at(self, name: str) -> int | None:
        """The earliest time an invisible message (delayed, leased, nacked) becomes visible."""
        q = self._queues.get(name)
        if q is None:
            return None
        q.prune_heap()
        return q.heap[0][0] if q.heap else None

    def expirable(self, name: str, now_ms: int) -> bool:
        """Whether an `Expire` at ``now_ms`` would delete something."""
        q = self._queues.get(name)
        if q is None:
            return False
        first = q.first_live()
        if first is None:
            return False
        retention = q.attributes.message_retention_seconds * 1000
        return first[0].sent_at[first[1]] + retention <= max(now_ms, q.clock)

    def pending_dead_letters(self, name: str) -> list[int]:
        """Seqs marked for the dead-letter queue, awaiting a `DeadLetter` (ascending)."""
        q = self._queues.get(name)
        return [] if q is None else q.pending_dl_seqs()

    # ------------------------------------------------------------------------ image
    def encode_image(self, *, reuse: bool = True) -> bytes:
        """The snapshot image: the in-memory part of `snapshot`, cheap enough for the event
        loop. Each queue's part is cached until a command touches that queue, and building one
        copies compact structures in C (bitmaps, one interleaved array); only dedup entries cost
        per-entry Python work. Layout: ``CMQF``, version, incarnation counter, queue count,
        then per queue (sorted by name): name, attributes, incarnation, clock and counters;
        segments (first seq, count, size, sealed, created, deleted bitmap); the touched cells;
        the dedup window. ``reuse=False`` rebuilds
        every queue's part (benchmarks: the worst case)."""
        parts = [
            IMAGE_MAGIC,
            _IMAGE_HEAD.pack(IMAGE_VERSION, self._incarnations, len(self._queues)),
        ]
        for name in sorted(self._queues):
            q = self._queues[name]
            if q.image is None or not reuse:
                q.image = _encode_queue(q)
            parts.append(q.image)
        return b"".join(parts)

    def _decode_image(self, data: bytes) -> tuple[int, dict[str, _Queue]]:
        try:
            return _decode_queues(Reader(data))
        except InvalidParameter as e:
            raise InvariantBroken(f"undecodable snapshot image: {e}") from None

    def _rebuild_derived(self, q: _Queue, seg: _Segment, visible_at: array[int]) -> None:
        """Ready/timers for the untouched live messages of ``seg`` (touched: separately)."""
        if seg.count == 0:
            return
        live = BitMap(range(seg.count))
        live.difference_update(seg.deleted)
        lo, hi = seg.first_seq, seg.first_seq + seg.count
        touched_rel = BitMap(s - lo for s in q.touched.seqs() if lo <= s < hi)
        live.difference_update(touched_rel)
        if not live:
            return
        if max(visible_at) <= q.clock:
            # The common case, in C: nothing of this segment is still delayed.
            rel = BitMap64(array("Q", live.to_array()))
            q.ready |= rel.shift(lo) if lo else rel
            return
        for r in live:
            q.schedule(lo + r, visible_at[r])

    def _rebuild_touched(self, q: _Queue) -> None:
        t = q.touched
        for slot, seq in enumerate(t.seqs()):
            if t.get(slot, _FLAGS) & _PENDING_DEAD_LETTER:
                q.pending_dl.add(seq)
            else:
                q.schedule(seq, t.get(slot, _VIS))


def _encode_head(name: str, attributes: QueueAttributes) -> bytes:
    """The first bytes of a queue's image part: its name and attributes."""
    w = Writer()
    w.text(name)
    write_attributes(w, attributes)
    return w.getvalue()


def _canonical_bits(bm: BitMap) -> bytes:
    """``bm`` serialized so that equal sets give equal bytes whatever their history: a bitmap
    grown from a run container can serialize differently from one built fresh (another
    format cookie), and replicas must encode identical images at equal applied index."""
    fresh = BitMap(bm.to_array())
    fresh.run_optimize()
    return bytes(fresh.serialize())


def _encode_queue(q: _Queue) -> bytes:
    w = Writer()
    w.raw(q.head)
    w.raw(
        _QUEUE_HEAD.pack(
            q.incarnation,
            q.created_ms,
            q.clock,
            q.next_seq,
            q.lease_counter,
            q.live,
            q.sent_total,
            q.acked_total,
            q.dead_lettered_total,
            q.expired_total,
            len(q.segments),
        )
    )
    for seg in q.segments:
        bits = _canonical_bits(seg.deleted)
        w.raw(
            _SEGMENT_HEAD.pack(
                seg.first_seq, seg.count, seg.size, int(seg.sealed), seg.created_ms, len(bits)
            )
        )
        w.raw(bits)
    w.int_array(q.touched.cells)
    w.u32(len(q.dedup))
    for dedup_id, (mid, seq, at) in q.dedup.items():
        w.text(dedup_id)
        w.text(mid)
        w.raw(_DEDUP_TAIL.pack(seq, at))
    return w.getvalue()


def _decode_queues(r: Reader) -> tuple[int, dict[str, _Queue]]:
    if r.raw(4) != IMAGE_MAGIC:
        raise InvalidParameter("not a queue machine image")
    version, incarnations, nqueues = _IMAGE_HEAD.unpack(r.raw(_IMAGE_HEAD.size))
    if version != IMAGE_VERSION:
        raise InvalidParameter(f"image version {version}")
    queues: dict[str, _Queue] = {}
    for _ in range(nqueues):
        name = r.text()
        attributes = read_attributes(r)
        head = _QUEUE_HEAD.unpack(r.raw(_QUEUE_HEAD.size))
        q = _Queue(name, head[0], attributes, head[1])
        (
            q.clock,
            q.next_seq,
            q.lease_counter,
            q.live,
            q.sent_total,
            q.acked_total,
            q.dead_lettered_total,
            q.expired_total,
            nsegments,
        ) = head[2:]
        for _ in range(nsegments):
            first, count, size, sealed, created, nbits = _SEGMENT_HEAD.unpack(
                r.raw(_SEGMENT_HEAD.size)
            )
            seg = _Segment(first, created)
            seg.count, seg.size, seg.sealed = count, size, bool(sealed)
            try:
                seg.deleted = BitMap.deserialize(r.raw(nbits))
            except (ValueError, OverflowError) as e:
                raise InvalidParameter(f"bad bitmap: {e}") from None
            q.segments.append(seg)
            q.firsts.append(first)
        t = q.touched
        t.cells = r.int_array("q")
        if len(t.cells) % _WIDTH:
            raise InvalidParameter(f"queue {name!r}: touched cells not a multiple of {_WIDTH}")
        t.reindex()
        if len(t.slot_of) * _WIDTH != len(t.cells):
            raise InvalidParameter(f"queue {name!r}: a seq is touched twice")
        for _ in range(r.u32()):
            dedup_id, mid = r.text(), r.text()
            seq, at = _DEDUP_TAIL.unpack(r.raw(_DEDUP_TAIL.size))
            q.dedup[dedup_id] = (mid, seq, at)
        queues[name] = q
    r.end()
    return incarnations, queues
