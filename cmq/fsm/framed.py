"""`FramedStore`: the segment store logic shared by the file store (`cmq.fsm.segments`) and its
in-memory twin (`cmq.fsm.memory`), over raw bytes per segment that each backend keeps its way
(pure: no I/O here).

Per open segment it keeps the byte offset of each record (so older messages are read with one
``pread``) and a bounded cache of recently appended messages (so receives rarely touch the disk);
recovery scans a segment's records against the layout a snapshot recorded. Record format and
the protocol contract: `cmq.fsm.store`.

Segment indexes (`cmq.fsm.segindex`): while the index gate is open (the ``segment_index``
feature flag, `index_when`), a segment created then collects its records' times as they are
appended; sealing it stages its index, which the backend's `flush` writes after making the
segment's bytes durable (an index never describes bytes a power loss can still take). A flush
also writes the active segment's index (of the records so far) once it grew by
`ACTIVE_INDEX_RECORDS` since its last one. `recover` uses a segment's index when its recorded
size and count are the snapshot's, or a prefix of them (then it scans only the records after
it), and the last record it covers (one read, checksum checked) agrees with it; otherwise it
scans every record as before: a missing, stale, damaged or newer-version index is not damage in
the data, only a slower restore (logged when it is not plain absence), and a sealed segment
not wholly indexed gets its index staged again while the gate is open.
"""

from __future__ import annotations

import logging
import struct
from abc import ABC, abstractmethod
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from cmq.errors import InvalidParameter, InvariantBroken, NewerLayout, SegmentDamaged
from cmq.fsm.message_cache import MessageCache
from cmq.fsm.record_check import check_frame, decode_record, scan_records
from cmq.fsm.segindex import INDEX_VERSION, SegmentIndex, decode_index, encode_index
from cmq.fsm.store import (
    FRAME,
    RecoveredSegment,
    SegmentLayout,
    StoredMessage,
)

__all__ = ["DEFAULT_CACHE_BYTES", "FramedStore", "Key", "RecoveryCounts"]

log = logging.getLogger("cmq.fsm.segments")

_VISIBLE_AT = struct.Struct("<q")
_VISIBLE_AT_OFFSET = FRAME.size + 16
"""Where a framed record keeps its ``visible_at_ms`` (after its seq and send time)."""

DEFAULT_CACHE_BYTES = 64 << 20

Key = tuple[str, int]
"""A segment: (queue store key, first seq)."""

ACTIVE_INDEX_RECORDS = 32_768
"""A flush writes the active segment's index again once it has this many records more than
the index last written (a restore scans at most about this many of its records)."""


class _Collected:
    """The send and visibility times of an unsealed segment's records, collected for its
    index, and how many records its last written index covers."""

    __slots__ = ("indexed", "sent_at", "visible_at")

    def __init__(self, sent_at: array[int], visible_at: array[int], indexed: int) -> None:
        self.sent_at = sent_at
        self.visible_at = visible_at
        self.indexed = indexed


def _closed() -> bool:
    return False


def _open() -> bool:
    return True


@dataclass(frozen=True, slots=True)
class RecoveryCounts:
    """How the last `FramedStore.recover` read each listed segment: wholly from its index
    (``indexed``), from an index of a prefix then the records after it (``partly``), or by
    scanning every record (``scanned``); ``staged``: indexes staged for the next flush (sealed
    segments not wholly indexed, read while the index gate is open)."""

    indexed: int = 0
    partly: int = 0
    scanned: int = 0
    staged: int = 0


class FramedStore(ABC):
    """The store logic shared by both backends: record offsets, the cache, recovery scanning.

    Subclasses provide raw byte storage per ``(queue, first_seq)`` key.
    """

    def __init__(
        self,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        *,
        indexes: bool = False,
        active_index_records: int = ACTIVE_INDEX_RECORDS,
    ) -> None:
        """``indexes``: open the index gate for good (tests, benchmarks); a node passes the
        feature flag instead (`index_when`). ``active_index_records``: see
        `ACTIVE_INDEX_RECORDS`."""
        # Per segment: the byte offset of each record plus a final entry = the end of the last.
        self._offsets: dict[Key, array[int]] = {}
        # Recently appended messages, oldest first; bounded by the approximate body bytes.
        self._cache = MessageCache(cache_bytes)
        self._index_gate: Callable[[], bool] = _open if indexes else _closed
        # Times of the records of unsealed segments created (or recovered) with the gate open.
        self._times: dict[Key, _Collected] = {}
        self._active_step = max(1, active_index_records)
        # Index bytes of sealed segments, written by the next flush (after the segment's fsync;
        # the flush adds the active segments' due, `_take_staged`).
        self._staged: dict[Key, bytes] = {}
        self.last_recovery = RecoveryCounts()
        """How the last `recover` went (tests and benchmarks read it)."""
        self._counts = [0, 0, 0]  # indexed, partly, scanned: during a recover

    # -- backend primitives ------------------------------------------------------------------
    @abstractmethod
    def _write(self, key: Key, data: bytes) -> None: ...

    @abstractmethod
    def _pread(self, key: Key, offset: int, size: int) -> bytes: ...

    @abstractmethod
    def _size(self, key: Key) -> int | None:
        """Current stored size, None if the segment does not exist."""

    @abstractmethod
    def _truncate(self, key: Key, size: int) -> None: ...

    @abstractmethod
    def _remove(self, key: Key) -> None: ...

    @abstractmethod
    def _remove_queue(self, queue: str) -> None: ...

    @abstractmethod
    def _listing(self) -> dict[str, list[int]]:
        """Every stored segment, by queue."""

    @abstractmethod
    def _close(self, key: Key) -> None: ...

    @abstractmethod
    def _describe(self, key: Key) -> str:
        """Where the segment lives, for error messages."""

    @abstractmethod
    def _read_index(self, key: Key) -> bytes | None:
        """The segment's index file, None if there is none."""

    @abstractmethod
    def _write_index(self, key: Key, data: bytes) -> None:
        """Replace the segment's index file with ``data`` (the caller made the segment's bytes
        durable first); a torn write must fail the index's checksum, never pass it."""

    @abstractmethod
    def _remove_index(self, key: Key) -> None:
        """Remove the segment's index file (nothing if there is none)."""

    @abstractmethod
    def _describe_index(self, key: Key) -> str:
        """Where the segment's index lives, for log lines."""

    @abstractmethod
    def _read_copy(self, key: Key, size: int) -> bytes:
        """The first ``size`` bytes of a segment, read without touching shared handles (may
        run on a worker thread while the event loop appends)."""

    # -- SegmentStore ------------------------------------------------------------------------
    def index_when(self, gate: Callable[[], bool]) -> None:
        """Write segment indexes only while ``gate()`` is true (the ``segment_index`` feature
        flag, asked when a segment is created and when recovery scans a sealed one). Indexes
        already on disk are read whatever the gate says."""
        self._index_gate = gate

    def write_out(self) -> None:  # noqa: B027 - a hook with nothing to do by default
        """`SegmentStore.write_out` (nothing is held by default)."""

    def export(self, queue: str, segment: int, size: int) -> bytes:
        """The first ``size`` bytes of a segment (for shipping it to a follower); a missing or
        shorter segment raises `InvariantBroken`. Thread-safe with respect to appends."""
        data = self._read_copy((queue, segment), size)
        if len(data) != size:
            raise SegmentDamaged(
                self._describe((queue, segment)), -1, f"{len(data)} B, expected {size} B to export"
            )
        return data

    def scan(self, queue: str, segment: int, size: int, chunk: int) -> Iterator[bytes]:
        """`SegmentStore.scan`."""
        return self._scan((queue, segment), size, max(1, chunk))

    @abstractmethod
    def _scan(self, key: Key, size: int, chunk: int) -> Iterator[bytes]: ...

    def verify(self, queue: str, segment: int, size: int, chunk: int) -> Iterator[int]:
        """`SegmentStore.verify`."""
        key = (queue, segment)
        pending = b""  # bytes read and not yet parsed; they start at file offset ``base``
        base = checked = 0
        seq = segment
        for data in self._scan(key, size, max(1, chunk)):
            checked += len(data)
            pending += data
            used = 0
            while len(pending) - used >= FRAME.size:
                length, _ = FRAME.unpack_from(pending, used)
                if len(pending) - used < FRAME.size + length:
                    break
                view = memoryview(pending)[used:]
                payload, times = check_frame(self._describe(key), base + used, view, seq)
                seq = times[0] + 1
                used += FRAME.size + len(payload)
            pending = pending[used:]
            base += used
            yield checked
        where = self._describe(key)
        if checked < size:
            raise SegmentDamaged(where, -1, f"{checked} B, shorter than the recorded {size} B")
        if pending:
            raise SegmentDamaged(where, base, "torn record")

    def install(self, queue: str, segment: int, data: bytes) -> None:
        """Replace a segment with ``data`` (received with a leader's snapshot); made durable by
        the next `flush` and validated by `recover`."""
        key = (queue, segment)
        self._close(key)
        self._discard(key)
        self._cache.forget(key)
        self._offsets.pop(key, None)
        self._write(key, data)

    def append(
        self,
        queue: str,
        segment: int,
        messages: Sequence[StoredMessage],
        frames: Sequence[bytes],
    ) -> int:
        key = (queue, segment)
        offsets = self._offsets.get(key)
        if offsets is None:
            if self._size(key) not in (None, 0):
                raise InvariantBroken(f"{self._describe(key)}: new segment already has data")
            offsets = self._offsets[key] = array("Q", [0])
            if self._index_gate():
                self._times[key] = _Collected(array("q"), array("q"), 0)
        expected_seq = segment + len(offsets) - 1
        end = offsets[-1]
        for m, f in zip(messages, frames, strict=True):
            if m.seq != expected_seq:
                raise InvariantBroken(f"{self._describe(key)}: appending seq {m.seq}")
            expected_seq += 1
            end += len(f)
            offsets.append(end)
            self._cache.remember((queue, m.seq), m)
        times = self._times.get(key)
        if times is not None:
            times.sent_at.extend([m.sent_at_ms for m in messages])
            times.visible_at.extend(
                [_VISIBLE_AT.unpack_from(f, _VISIBLE_AT_OFFSET)[0] for f in frames]
            )
        self._write(key, b"".join(frames))
        return end

    def seal(self, queue: str, segment: int) -> None:
        """`SegmentStore.seal`; stages the segment's index if its times were collected."""
        key = (queue, segment)
        self._close(key)
        times = self._times.pop(key, None)
        if times is not None:
            self._stage(key, times)

    def read(self, queue: str, segment: int, seq: int) -> StoredMessage:
        cached = self._cache.get((queue, seq))
        if cached is not None:
            return cached
        key = (queue, segment)
        offsets = self._offsets.get(key)
        rel = seq - segment
        if offsets is None or not 0 <= rel < len(offsets) - 1:
            raise InvariantBroken(f"{self._describe(key)}: no record for seq {seq}")
        start, end = offsets[rel], offsets[rel + 1]
        data = self._pread(key, start, end - start)
        message, _ = decode_record(self._describe(key), start, memoryview(data), seq)
        return message

    def release(self, queue: str, segment: int) -> None:
        key = (queue, segment)
        offsets = self._offsets.pop(key, None)
        if offsets is not None:
            for seq in range(segment, segment + len(offsets) - 1):
                self._cache.forget((queue, seq))
        self._discard(key)

    def drop_queue(self, queue: str) -> None:
        for key in [k for k in self._offsets if k[0] == queue]:
            del self._offsets[key]
        self._cache.forget_queue(queue)
        for key in [k for k in self._staged if k[0] == queue]:
            del self._staged[key]
        for key in [k for k in self._times if k[0] == queue]:
            del self._times[key]
        self._remove_queue(queue)

    def recover(
        self, layout: Mapping[str, Sequence[SegmentLayout]]
    ) -> dict[str, list[RecoveredSegment]]:
        self._offsets.clear()
        self._cache.clear()
        self._times.clear()
        self._staged.clear()  # staged again below for every sealed segment still listed
        wanted = {q: {s.first_seq for s in segs} for q, segs in layout.items()}
        for queue, firsts in self._listing().items():
            if queue not in wanted:
                self._remove_queue(queue)
                continue
            for first in firsts:
                if first not in wanted[queue]:
                    self._remove((queue, first))
        out: dict[str, list[RecoveredSegment]] = {}
        self._counts = [0, 0, 0]
        for queue, segs in layout.items():
            out[queue] = [self._recover_segment(queue, s) for s in segs]
        indexed, partly, scanned = self._counts
        self.last_recovery = RecoveryCounts(indexed, partly, scanned, len(self._staged))
        return out

    # -- internals -----------------------------------------------------------------------------
    def _discard(self, key: Key) -> None:
        """Remove a segment, its index and whatever was held for its index."""
        self._staged.pop(key, None)
        self._times.pop(key, None)
        self._remove(key)

    def _stage(self, key: Key, times: _Collected) -> None:
        """Stage the index of every record of ``key`` so far (nothing if ``times`` missed
        some)."""
        offsets = self._offsets.get(key)
        if offsets is None or len(times.sent_at) != len(offsets) - 1:
            return
        self._staged[key] = encode_index(
            SegmentIndex(key[1], offsets[-1], offsets, times.sent_at, times.visible_at)
        )
        times.indexed = len(times.sent_at)

    def _take_staged(self) -> dict[Key, bytes]:
        """The indexes for a flush to write once their segments are durable: those staged
        (sealed segments) and those of active segments grown by `ACTIVE_INDEX_RECORDS` since
        their last index (a prefix: the records appended so far, which this flush makes
        durable). Flush runs between batches of applies, so nothing appends or seals
        meanwhile."""
        for key, times in self._times.items():
            if len(times.sent_at) - times.indexed >= self._active_step:
                self._stage(key, times)
        staged, self._staged = self._staged, {}
        return staged

    def _recover_segment(self, queue: str, layout: SegmentLayout) -> RecoveredSegment:
        key = (queue, layout.first_seq)
        self._close(key)
        size = self._size(key)
        where = self._describe(key)
        if size is None:
            raise SegmentDamaged(where, -1, f"segment missing (snapshot records {layout.size} B)")
        if size < layout.size:
            raise SegmentDamaged(where, -1, f"{size} B, shorter than the recorded {layout.size} B")
        if size > layout.size:
            # Appended after the snapshot: those records come back from the Raft log suffix.
            self._truncate(key, layout.size)
        index = self._usable_index(key, layout)
        if index is not None and index.size == layout.size:
            self._counts[0] += 1
            self._offsets[key] = index.offsets
            if not layout.sealed and self._index_gate():
                self._collect(key, index.sent_at, index.visible_at, index.count)
            return RecoveredSegment(layout.first_seq, index.sent_at, index.visible_at)
        records = None
        if index is not None:
            try:
                records = self._scan_records(key, layout, index)
                self._counts[1] += 1
            except SegmentDamaged as e:
                # The prefix's records were checked at its end only: the scan decides.
                log.warning(
                    "%s: the records after it do not follow (%s)", self._describe_index(key), e
                )
                self._remove_index(key)
                index = None
        if records is None:
            records = self._scan_records(key, layout, None)
            self._counts[2] += 1
        offsets, sent_at, visible_at = records
        self._offsets[key] = offsets
        if self._index_gate():
            self._collect(key, sent_at, visible_at, 0 if index is None else index.count)
            if layout.sealed:
                self._stage(key, self._times.pop(key))
        return RecoveredSegment(layout.first_seq, sent_at, visible_at)

    def _collect(self, key: Key, sent_at: array[int], visible_at: array[int], indexed: int) -> None:
        """Go on collecting the times of a recovered segment's records for its index (copies:
        the machine keeps and changes the arrays it is given)."""
        self._times[key] = _Collected(array("q", sent_at), array("q", visible_at), indexed)

    def _usable_index(self, key: Key, layout: SegmentLayout) -> SegmentIndex | None:
        """The segment's index if it describes the layout's bytes or a prefix of them (an
        active segment's index, written by an earlier flush), else None (and an index that
        exists but cannot be used is removed and, unless merely stale, logged). The last
        record it covers is read and checked against it: damage there raises
        `SegmentDamaged` as a scan would."""
        raw = self._read_index(key)
        if raw is None:
            return None
        where = self._describe_index(key)
        try:
            index = decode_index(raw)
        except NewerLayout:
            log.warning(
                "%s: segment index version %d is from a newer release (this release reads "
                "version %d); scanning the segment instead",
                where,
                raw[4],
                INDEX_VERSION,
            )
            return None  # kept: the newer release that wrote it can still use it
        except InvalidParameter as e:
            log.warning("%s: damaged segment index (%s); scanning the segment instead", where, e)
            self._remove_index(key)
            return None
        if (
            index.first_seq != layout.first_seq
            or index.size > layout.size
            or index.count > layout.count
            or (index.size == layout.size) != (index.count == layout.count)
        ):
            # Written for the segment at a larger size (the snapshot predates it): stale.
            log.info(
                "%s: segment index of %d records, %d B is stale (the snapshot records %d, %d B)",
                where,
                index.count,
                index.size,
                layout.count,
                layout.size,
            )
            self._remove_index(key)
            return None
        if index.count:
            start = index.offsets[-2]
            last = layout.first_seq + index.count - 1
            data = memoryview(self._pread(key, start, index.size - start))
            payload, (_, sent, vis) = check_frame(self._describe(key), start, data, last)
            if FRAME.size + len(payload) != len(data) or (sent, vis) != (
                index.sent_at[-1],
                index.visible_at[-1],
            ):
                log.warning(
                    "%s: segment index disagrees with the segment's last record; scanning the "
                    "segment instead",
                    where,
                )
                self._remove_index(key)
                return None
        return index

    def _scan_records(
        self, key: Key, layout: SegmentLayout, prefix: SegmentIndex | None
    ) -> tuple[array[int], array[int], array[int]]:
        """`scan_records` of segment ``key``."""
        return scan_records(
            self._describe(key), lambda at, n: self._pread(key, at, n), layout, prefix
        )
