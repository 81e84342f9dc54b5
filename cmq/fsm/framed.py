"""`FramedStore`: the segment store logic shared by the file store (`cmq.fsm.segments`) and its
in-memory twin (`cmq.fsm.memory`), over raw bytes per segment that each backend keeps its way
(pure: no I/O here).

Per open segment it keeps the byte offset of each record (so older messages are read with one
``pread``) and a bounded cache of recently appended messages (so receives rarely touch the disk);
recovery scans a segment's records against the layout a snapshot recorded. Record format and
the protocol contract: `cmq.fsm.store`.
"""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from array import array
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence

from cmq.errors import InvalidParameter, InvariantBroken, NewerFormat, NewerLayout, SegmentDamaged
from cmq.fsm.store import (
    FRAME,
    RecoveredSegment,
    SegmentLayout,
    StoredMessage,
    decode_payload,
    record_times,
)

__all__ = ["DEFAULT_CACHE_BYTES", "FramedStore", "Key"]

DEFAULT_CACHE_BYTES = 64 << 20

Key = tuple[str, int]
"""A segment: (queue store key, first seq)."""


class FramedStore(ABC):
    """The store logic shared by both backends: record offsets, the cache, recovery scanning.

    Subclasses provide raw byte storage per ``(queue, first_seq)`` key.
    """

    def __init__(self, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        # Per segment: the byte offset of each record plus a final entry = the end of the last.
        self._offsets: dict[Key, array[int]] = {}
        # Recently appended messages, oldest first; bounded by the approximate body bytes.
        self._cache: OrderedDict[Key, StoredMessage] = OrderedDict()
        self._cache_bytes = 0
        self._cache_limit = cache_bytes

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
    def _read_copy(self, key: Key, size: int) -> bytes:
        """The first ``size`` bytes of a segment, read without touching shared handles (may
        run on a worker thread while the event loop appends)."""

    # -- SegmentStore ------------------------------------------------------------------------
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
                payload, times = self._check_frame(key, base + used, view, seq)
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
        self._remove(key)
        self._forget(key)
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
        expected_seq = segment + len(offsets) - 1
        end = offsets[-1]
        for m, f in zip(messages, frames, strict=True):
            if m.seq != expected_seq:
                raise InvariantBroken(f"{self._describe(key)}: appending seq {m.seq}")
            expected_seq += 1
            end += len(f)
            offsets.append(end)
            self._remember((queue, m.seq), m)
        self._write(key, b"".join(frames))
        return end

    def seal(self, queue: str, segment: int) -> None:
        self._close((queue, segment))

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
        message, _ = self._decode(key, start, memoryview(data), seq)
        return message

    def release(self, queue: str, segment: int) -> None:
        key = (queue, segment)
        offsets = self._offsets.pop(key, None)
        if offsets is not None:
            for seq in range(segment, segment + len(offsets) - 1):
                self._forget((queue, seq))
        self._remove(key)

    def drop_queue(self, queue: str) -> None:
        for key in [k for k in self._offsets if k[0] == queue]:
            del self._offsets[key]
        for ck in [k for k in self._cache if k[0] == queue]:
            self._forget(ck)
        self._remove_queue(queue)

    def recover(
        self, layout: Mapping[str, Sequence[SegmentLayout]]
    ) -> dict[str, list[RecoveredSegment]]:
        self._offsets.clear()
        self._cache.clear()
        self._cache_bytes = 0
        wanted = {q: {s.first_seq for s in segs} for q, segs in layout.items()}
        for queue, firsts in self._listing().items():
            if queue not in wanted:
                self._remove_queue(queue)
                continue
            for first in firsts:
                if first not in wanted[queue]:
                    self._remove((queue, first))
        out: dict[str, list[RecoveredSegment]] = {}
        for queue, segs in layout.items():
            out[queue] = [self._recover_segment(queue, s) for s in segs]
        return out

    # -- internals -----------------------------------------------------------------------------
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
        data = memoryview(self._pread(key, 0, layout.size))
        offsets: array[int] = array("Q", [0])
        sent_at: array[int] = array("q")
        visible_at: array[int] = array("q")
        pos = 0
        seq = layout.first_seq
        while pos < layout.size:
            payload, (s, sent, vis) = self._check_frame(key, pos, data[pos:], seq)
            pos += FRAME.size + len(payload)
            offsets.append(pos)
            sent_at.append(sent)
            visible_at.append(vis)
            seq = s + 1
        if len(sent_at) != layout.count:
            raise SegmentDamaged(
                where,
                -1,
                f"{len(sent_at)} records up to byte {layout.size}, "
                f"the snapshot records {layout.count}",
            )
        self._offsets[key] = offsets
        return RecoveredSegment(layout.first_seq, sent_at, visible_at)

    def _check_frame(
        self, key: Key, offset: int, data: memoryview, seq: int
    ) -> tuple[memoryview, tuple[int, int, int]]:
        """The payload of the frame at the start of ``data`` (stored at ``offset``) and its
        times; any damage is `InvariantBroken` naming the segment and offset."""
        where = self._describe(key)
        if len(data) < FRAME.size:
            raise SegmentDamaged(where, offset, "torn record header")
        length, crc = FRAME.unpack_from(data, 0)
        payload = data[FRAME.size : FRAME.size + length]
        if len(payload) != length:
            raise SegmentDamaged(where, offset, "torn record")
        if zlib.crc32(payload) != crc:
            raise SegmentDamaged(where, offset, "checksum mismatch in the record")
        try:
            times = record_times(payload)
        except InvalidParameter as e:
            raise SegmentDamaged(where, offset, f"bad record: {e}") from None
        if times[0] != seq:
            raise SegmentDamaged(where, offset, f"seq {times[0]} where {seq} belongs")
        return payload, times

    def _decode(
        self, key: Key, offset: int, data: memoryview, seq: int
    ) -> tuple[StoredMessage, int]:
        payload, _ = self._check_frame(key, offset, data, seq)
        try:
            return decode_payload(payload)
        except NewerLayout as e:
            where = self._describe(key)
            raise NewerFormat(f"{where}: the record at offset {offset}: {e}") from None
        except InvalidParameter as e:
            raise SegmentDamaged(self._describe(key), offset, f"bad record: {e}") from None

    def _remember(self, key: Key, message: StoredMessage) -> None:
        if self._cache_limit <= 0:
            return
        self._cache[key] = message
        self._cache_bytes += _cost(message)
        while self._cache_bytes > self._cache_limit and self._cache:
            _, old = self._cache.popitem(last=False)
            self._cache_bytes -= _cost(old)

    def _forget(self, key: Key) -> None:
        old = self._cache.pop(key, None)
        if old is not None:
            self._cache_bytes -= _cost(old)


def _cost(m: StoredMessage) -> int:
    """Approximate memory of a cached message (body plus a fixed overhead)."""
    return len(m.body) + 256
