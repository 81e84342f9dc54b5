"""`MemorySegmentStore`: the segment store's in-memory twin (pure), for tests and simulation:
the same bytes, offsets and checks as `cmq.fsm.segments.FileSegmentStore`, nothing durable (a
power loss is modelled by `crash`).
"""

from __future__ import annotations

from collections.abc import Iterator

from cmq.fsm.framed import ACTIVE_INDEX_RECORDS, DEFAULT_CACHE_BYTES, FramedStore, Key

__all__ = ["MemorySegmentStore"]


class MemorySegmentStore(FramedStore):
    """Segments as bytearrays: same format, offsets and checks as files, nothing durable.

    ``flush`` counts calls, records what a power loss keeps, and writes the staged segment
    indexes into ``indexes`` (durable at once, as the file store's are after their segment's
    fsync). The bytes survive `recover`, so a machine restored from a snapshot into the same
    store behaves like a restarted node on the same disk.
    """

    def __init__(
        self,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        *,
        indexes: bool = False,
        active_index_records: int = ACTIVE_INDEX_RECORDS,
    ) -> None:
        super().__init__(cache_bytes, indexes=indexes, active_index_records=active_index_records)
        self.segments: dict[Key, bytearray] = {}
        self.indexes: dict[Key, bytes] = {}
        """The index "files" (`cmq.fsm.segindex`), by segment; tests may damage or drop them."""
        self.flushes = 0
        # What a flush made durable (segment sizes), so `crash` can model a power loss.
        self._durable: dict[Key, int] = {}

    def drop_cache(self) -> None:
        """Forget the cached messages (a later read goes to the bytes)."""
        self._cache.clear()

    def crash(self) -> None:
        """Power loss: every segment falls back to its size at the last flush (segments never
        flushed vanish), the in-memory indexes and the staged index files are lost."""
        self.segments = {
            key: buf[: self._durable[key]]
            for key, buf in self.segments.items()
            if key in self._durable
        }
        self._offsets.clear()
        self._cache.clear()
        self._times.clear()
        self._staged.clear()

    def _write(self, key: Key, data: bytes) -> None:
        self.segments.setdefault(key, bytearray()).extend(data)

    def _pread(self, key: Key, offset: int, size: int) -> bytes:
        return bytes(self.segments[key][offset : offset + size])

    def _size(self, key: Key) -> int | None:
        buf = self.segments.get(key)
        return None if buf is None else len(buf)

    def _truncate(self, key: Key, size: int) -> None:
        del self.segments[key][size:]

    def _remove(self, key: Key) -> None:
        self.segments.pop(key, None)
        self.indexes.pop(key, None)

    def _remove_queue(self, queue: str) -> None:
        for key in [k for k in self.segments if k[0] == queue]:
            del self.segments[key]
        for key in [k for k in self.indexes if k[0] == queue]:
            del self.indexes[key]

    def _listing(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for q, first in sorted(self.segments.keys() | self.indexes.keys()):
            out.setdefault(q, []).append(first)
        return out

    def _read_index(self, key: Key) -> bytes | None:
        return self.indexes.get(key)

    def _write_index(self, key: Key, data: bytes) -> None:
        self.indexes[key] = bytes(data)

    def _remove_index(self, key: Key) -> None:
        self.indexes.pop(key, None)

    def _describe_index(self, key: Key) -> str:
        return f"memory:{key[0]}/{key[1]:020d}.idx"

    def _close(self, key: Key) -> None:
        del key

    def _read_copy(self, key: Key, size: int) -> bytes:
        buf = self.segments.get(key)
        return b"" if buf is None else bytes(buf[:size])

    def _describe(self, key: Key) -> str:
        return f"memory:{key[0]}/{key[1]:020d}.seg"

    def _scan(self, key: Key, size: int, chunk: int) -> Iterator[bytes]:
        data = bytes(self.segments.get(key, b"")[:size])
        for pos in range(0, len(data), chunk):
            yield data[pos : pos + chunk]

    def flush(self) -> None:
        self.flushes += 1
        self._durable = {key: len(buf) for key, buf in self.segments.items()}
        for key, data in self._take_staged().items():
            if key in self.segments:
                self._write_index(key, data)
