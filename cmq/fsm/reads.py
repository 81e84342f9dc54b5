"""The read-only queries of a data group's queues (`MachineReads`, the base class of
`cmq.fsm.machine.QueueMachine`): what the leader's service and the archive read side ask between
applies. Pure: reads go through the `SegmentStore`; they reflect the state after the last
applied command.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace
from itertools import islice

from cmq import errors
from cmq.export_values import ExportPage
from cmq.fsm import export, fifo, lifecycle, segdata, timedwork
from cmq.fsm.cells import Segment
from cmq.fsm.effects import Effects
from cmq.fsm.gauges import QueueGauges, queue_gauges, queue_stats, segment_figures
from cmq.fsm.image import decode_image, segments_digest
from cmq.fsm.queue import QueueState
from cmq.fsm.store import SegmentStore, StoredMessage
from cmq.fsm.timedwork import Due
from cmq.model import QueueAttributes, QueueStats, SegmentCounts
from cmq.segment_values import SegmentInfo, SegmentRecord


class MachineReads:
    """The queries (see the module docstring) over ``queues`` (by name; the machine replaces
    the mapping on restore), their segments in ``store`` and the files awaiting removal that
    ``effects`` keeps."""

    def __init__(
        self, queues: dict[str, QueueState], store: SegmentStore, effects: Effects
    ) -> None:
        self._queues = queues
        self._store = store
        self._effects = effects

    def _read_live(self, q: QueueState, seq: int) -> StoredMessage:
        seg = q.segment_of(seq)
        if seg is None:
            raise errors.InvariantBroken(f"queue {q.name!r}: live seq {seq} has no segment")
        return self._store.read(q.key, seg.first_seq, seq)

    def pending_segments(self, key: str) -> list[Segment]:
        """The segments of queue store key ``key`` whose files await removal here."""
        return self._effects.pending(key)

    def files_pending(self) -> bool:
        """Whether segment files (or a deleted queue's) await removal: the next snapshot but
        one removes them (`QueueMachine.snapshot`)."""
        return self._effects.files_pending()

    def pending_files(self, key: str) -> tuple[int, int]:
        """(segments, bytes) of queue store key ``key`` whose files await removal here."""
        pending = self.pending_segments(key)
        return len(pending), sum(s.size for s in pending)

    # ------------------------------------------------------------------------ reads
    def queue_names(self) -> list[str]:
        """Every queue of this group, sorted."""
        return sorted(self._queues)

    def attributes(self, name: str) -> QueueAttributes | None:
        q = self._queues.get(name)
        return None if q is None else q.attributes

    def incarnation(self, name: str) -> int | None:
        """The incarnation of queue ``name`` in this group (a re-created queue gets another),
        None if there is no such queue."""
        q = self._queues.get(name)
        return None if q is None else q.incarnation

    def stats(self, name: str, now_ms: int) -> QueueStats | None:
        """Exact counts at the queue's time at ``now_ms`` (`cmq.fsm.gauges.queue_stats`)."""
        q = self._queues.get(name)
        return None if q is None else queue_stats(q, now_ms, self.pending_files(q.key))

    def segment_figures(self, now_ms: int) -> list[tuple[str, SegmentCounts, int, int]]:
        """Every queue's (name, segments by state, file bytes, archive backlog ms) on this
        replica at ``now_ms`` (`cmq.fsm.gauges.segment_figures`), sorted by name: O(segments),
        nothing read from files."""
        return [
            (name, *segment_figures(q, now_ms, self.pending_files(q.key)))
            for name, q in sorted(self._queues.items())
        ]

    def gauges(self, now_ms: int) -> list[QueueGauges]:
        """Every queue's monitoring figures at ``now_ms`` (`cmq.fsm.gauges.queue_gauges`), in
        no particular order: one pass, nothing read from segment files."""
        return [queue_gauges(q, now_ms) for q in self._queues.values()]

    def read(self, name: str, seqs: Iterable[int]) -> list[StoredMessage]:
        """The stored messages among ``seqs`` that are still live (others skipped), in the
        given order. A message copied forward since (`Tidy`: a lease's answer may be rendered
        after a copy applied) is read from its copy but named by the seq asked for."""
        q = self._queues.get(name)
        if q is None:
            return []
        out = []
        for seq in seqs:
            current = q.resolve(seq)
            if q.is_live(current):
                stored = self._read_live(q, current)
                out.append(stored if current == seq else replace(stored, seq=seq))
        return out

    def segments_digest(self, data: bytes) -> tuple[str, int]:
        """`image.segments_digest` of the segments the snapshot image ``data`` lists (on a
        worker thread: it reads files)."""
        return segments_digest(decode_image(data)[1].values() if data else (), self._store)

    def peek(self, name: str, limit: int) -> list[StoredMessage]:
        """Up to ``limit`` messages visible at the queue's clock (as of the last applied
        command), lowest seq first, without leasing them: a read, nothing changes."""
        q = self._queues.get(name)
        return [] if q is None else [self._read_live(q, s) for s in islice(q.ready, limit)]

    def export_page(
        self, name: str, *, after: int, upto: int, limit: int, max_bytes: int, now_ms: int
    ) -> ExportPage | None:
        """A page of the export of queue ``name`` (`cmq.fsm.export.export_page`); None when
        the queue is not here."""
        q = self._queues.get(name)
        if q is None:
            return None
        return export.export_page(
            q, self._store, after=after, upto=upto, limit=limit, max_bytes=max_bytes, now_ms=now_ms
        )

    def segments(self, name: str, state: str = "all") -> list[SegmentInfo] | None:
        """The segments of queue ``name`` in ``state`` on this replica (see
        `lifecycle.listing`); None when the queue is not here. `InvalidParameter` for an
        unknown state."""
        q = self._queues.get(name)
        return None if q is None else lifecycle.listing(q, state, self.pending_segments(q.key))

    def sealed_segments(self, name: str) -> list[tuple[str, int, int]]:
        """(queue store key, first seq, size) of every sealed segment of queue ``name`` the
        image lists (their bytes are final: what a scrub re-reads); empty when not here."""
        q = self._queues.get(name)
        if q is None:
            return []
        return [(q.key, s.first_seq, s.size) for s in q.segments if s.sealed]

    def records(
        self, name: str, first_seq: int, chunk: int = lifecycle.READ_CHUNK
    ) -> tuple[str, Iterator[list[SegmentRecord]]]:
        """(checksum, records) of the released segment ``first_seq`` of ``name``, read from
        this replica's files (`lifecycle.read_records`: lazily, one chunk at a time).
        `QueueNotFound`, `SegmentNotFound` or `SegmentNotReleased` at once."""
        q, seg = self._released(name, first_seq)
        return f"{seg.crc:08x}", lifecycle.read_records(self._store, q.key, seg, chunk)

    def segment_data(
        self, name: str, first_seq: int, chunk: int = lifecycle.READ_CHUNK
    ) -> tuple[str, Iterator[bytes]]:
        """(checksum, pieces) of the binary read of the released segment ``first_seq`` of
        ``name`` (`cmq.fsm.segdata`: lazily, one chunk of the file at a time).
        `QueueNotFound`, `SegmentNotFound` or `SegmentNotReleased` at once."""
        q, seg = self._released(name, first_seq)
        return f"{seg.crc:08x}", segdata.stream(self._store, q.key, seg, chunk)

    def _released(self, name: str, first_seq: int) -> tuple[QueueState, Segment]:
        """Queue ``name`` and its released segment ``first_seq``: `QueueNotFound`,
        `SegmentNotFound` or `SegmentNotReleased` otherwise."""
        q = self._queues.get(name)
        if q is None:
            raise errors.QueueNotFound(f"queue {name!r} does not exist")
        return q, lifecycle.released_segment(q, first_seq)

    def has_visible(self, name: str, now_ms: int) -> bool:
        """Whether a `Lease` at ``now_ms`` would find a message (a hint for long polls)."""
        q = self._queues.get(name)
        if q is None or not timedwork.has_visible(q, now_ms):
            return False
        if q.fifo is None:
            return True
        return fifo.has_visible(q, q.fifo, now_ms)

    def fifo_ids(self, name: str, seqs: Iterable[int]) -> dict[int, tuple[str, str]]:
        """FIFO queues: (group id, deduplication id) of each live message among ``seqs``;
        standard queues: (group id, "") of each one with a group id (its tenant)."""
        q = self._queues.get(name)
        if q is None:
            return {}
        if q.fifo is None:
            tenants = q.ready.tenants
            if tenants is None:
                return {}
            return {seq: (tenants.of[seq], "") for seq in seqs if seq in tenants.of}
        meta = q.fifo.meta
        return {seq: meta[seq] for seq in seqs if seq in meta}

    def ttl_deadlines(self, name: str, seqs: Iterable[int]) -> dict[int, int]:
        """The time-to-live deadline (queue time, ms) of each live message among ``seqs`` that
        has one."""
        q = self._queues.get(name)
        if q is None or not q.ttl:
            return {}
        ttl = q.ttl
        return {seq: ttl[seq] for seq in seqs if seq in ttl}

    def priorities(self, name: str, seqs: Iterable[int]) -> dict[int, int]:
        """The priority level of each live message among ``seqs`` that has one above 0."""
        q = self._queues.get(name)
        if q is None or not q.ready.members:
            return {}
        levels = {seq: q.ready.level_of(seq) for seq in seqs}
        return {seq: level for seq, level in levels.items() if level}

    def next_visible_at(self, name: str) -> int | None:
        """The earliest time an invisible message (delayed, leased, nacked) becomes visible."""
        q = self._queues.get(name)
        return None if q is None else timedwork.next_visible_at(q)

    def queue_time(self, name: str, now_ms: int) -> int:
        """The queue's time when the leader's clock reads ``now_ms`` (its deadlines are on
        it; ``now_ms`` itself if the queue does not exist)."""
        q = self._queues.get(name)
        return now_ms if q is None else q.time_at(now_ms)

    def time_ahead(self, name: str, now_ms: int) -> int:
        """How far (ms) the queue's time stands ahead of the leader's clock ``now_ms`` beyond
        the lead it is already slewing off: the case for a `Retime` (0: none, or no queue)."""
        q = self._queues.get(name)
        return 0 if q is None else max(0, q.clock - now_ms - q.skew_at(now_ms))

    def expirable(self, name: str, now_ms: int) -> bool:
        """Whether an `Expire` at ``now_ms`` would delete something."""
        q = self._queues.get(name)
        return q is not None and timedwork.expirable(q, now_ms)

    def due(self, name: str, now_ms: int, dead_letter_limit: int = 100) -> Due | None:
        """The timed work due on queue ``name`` at ``now_ms``: whether an `Expire` would delete
        something, and up to ``dead_letter_limit`` seqs marked for its dead-letter queue
        (none when it has no dead-letter queue). None when nothing is due."""
        q = self._queues.get(name)
        return None if q is None else timedwork.due(q, now_ms, dead_letter_limit)

    def pending_dead_letters(self, name: str) -> list[int]:
        """Seqs marked for the dead-letter queue, awaiting a `DeadLetter` (ascending)."""
        q = self._queues.get(name)
        return [] if q is None else q.pending_dl_seqs()
