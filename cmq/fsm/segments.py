"""Segment stores: `FileSegmentStore` (one directory per queue, one file per segment) and
`MemorySegmentStore` (the same bytes in memory, for tests and simulation).

Both keep, per open segment, the byte offset of each record (so older messages are read with one
``pread``) and a bounded cache of recently appended messages (so receives rarely touch the disk).
Record format and the protocol contract: `cmq.fsm.store`.
"""

from __future__ import annotations

import os
import re
import shutil
import zlib
from abc import ABC, abstractmethod
from array import array
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence

from cmq.errors import InvalidParameter, InvariantBroken, NewerFormat, NewerLayout
from cmq.fsm.store import (
    FRAME,
    RecoveredSegment,
    SegmentLayout,
    SegmentStore,
    StoredMessage,
    decode_payload,
    encode_record,
    record_times,
)

__all__ = [
    "FileSegmentStore",
    "MemorySegmentStore",
    "RecoveredSegment",
    "SegmentLayout",
    "SegmentStore",
    "StoredMessage",
    "encode_record",
]

DEFAULT_CACHE_BYTES = 64 << 20
_SEGMENT_FILE = re.compile(r"^(\d{20})\.seg$")

_Key = tuple[str, int]


class _FramedStore(ABC):
    """The store logic shared by both backends: record offsets, the cache, recovery scanning.

    Subclasses provide raw byte storage per ``(queue, first_seq)`` key.
    """

    def __init__(self, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        # Per segment: the byte offset of each record plus a final entry = the end of the last.
        self._offsets: dict[_Key, array[int]] = {}
        # Recently appended messages, oldest first; bounded by the approximate body bytes.
        self._cache: OrderedDict[_Key, StoredMessage] = OrderedDict()
        self._cache_bytes = 0
        self._cache_limit = cache_bytes

    # -- backend primitives ------------------------------------------------------------------
    @abstractmethod
    def _write(self, key: _Key, data: bytes) -> None: ...

    @abstractmethod
    def _pread(self, key: _Key, offset: int, size: int) -> bytes: ...

    @abstractmethod
    def _size(self, key: _Key) -> int | None:
        """Current stored size, None if the segment does not exist."""

    @abstractmethod
    def _truncate(self, key: _Key, size: int) -> None: ...

    @abstractmethod
    def _remove(self, key: _Key) -> None: ...

    @abstractmethod
    def _remove_queue(self, queue: str) -> None: ...

    @abstractmethod
    def _listing(self) -> dict[str, list[int]]:
        """Every stored segment, by queue."""

    @abstractmethod
    def _close(self, key: _Key) -> None: ...

    @abstractmethod
    def _describe(self, key: _Key) -> str:
        """Where the segment lives, for error messages."""

    @abstractmethod
    def _read_copy(self, key: _Key, size: int) -> bytes:
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
            raise InvariantBroken(
                f"{self._describe((queue, segment))}: {len(data)} B, expected {size} B to export"
            )
        return data

    def scan(self, queue: str, segment: int, size: int, chunk: int) -> Iterator[bytes]:
        """`SegmentStore.scan`."""
        return self._scan((queue, segment), size, max(1, chunk))

    @abstractmethod
    def _scan(self, key: _Key, size: int, chunk: int) -> Iterator[bytes]: ...

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
            raise InvariantBroken(f"{where}: segment missing (snapshot records {layout.size} B)")
        if size < layout.size:
            raise InvariantBroken(f"{where}: {size} B, shorter than the recorded {layout.size} B")
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
            raise InvariantBroken(
                f"{where}: {len(sent_at)} records up to byte {layout.size}, "
                f"the snapshot records {layout.count}"
            )
        self._offsets[key] = offsets
        return RecoveredSegment(layout.first_seq, sent_at, visible_at)

    def _check_frame(
        self, key: _Key, offset: int, data: memoryview, seq: int
    ) -> tuple[memoryview, tuple[int, int, int]]:
        """The payload of the frame at the start of ``data`` (stored at ``offset``) and its
        times; any damage is `InvariantBroken` naming the segment and offset."""
        where = self._describe(key)
        if len(data) < FRAME.size:
            raise InvariantBroken(f"{where}: torn record header at offset {offset}")
        length, crc = FRAME.unpack_from(data, 0)
        payload = data[FRAME.size : FRAME.size + length]
        if len(payload) != length:
            raise InvariantBroken(f"{where}: torn record at offset {offset}")
        if zlib.crc32(payload) != crc:
            raise InvariantBroken(f"{where}: checksum mismatch in the record at offset {offset}")
        try:
            times = record_times(payload)
        except InvalidParameter as e:
            raise InvariantBroken(f"{where}: bad record at offset {offset}: {e}") from None
        if times[0] != seq:
            raise InvariantBroken(f"{where}: seq {times[0]} at offset {offset}, expected {seq}")
        return payload, times

    def _decode(
        self, key: _Key, offset: int, data: memoryview, seq: int
    ) -> tuple[StoredMessage, int]:
        payload, _ = self._check_frame(key, offset, data, seq)
        try:
            return decode_payload(payload)
        except NewerLayout as e:
            where = self._describe(key)
            raise NewerFormat(f"{where}: the record at offset {offset}: {e}") from None
        except InvalidParameter as e:
            where = self._describe(key)
            raise InvariantBroken(f"{where}: bad record at offset {offset}: {e}") from None

    def _remember(self, key: _Key, message: StoredMessage) -> None:
        if self._cache_limit <= 0:
            return
        self._cache[key] = message
        self._cache_bytes += _cost(message)
        while self._cache_bytes > self._cache_limit and self._cache:
            _, old = self._cache.popitem(last=False)
            self._cache_bytes -= _cost(old)

    def _forget(self, key: _Key) -> None:
        old = self._cache.pop(key, None)
        if old is not None:
            self._cache_bytes -= _cost(old)


def _cost(m: StoredMessage) -> int:
    """Approximate memory of a cached message (body plus a fixed overhead)."""
    return len(m.body) + 256


class MemorySegmentStore(_FramedStore):
    """Segments as bytearrays: same format, offsets and checks as files, nothing durable.

    ``flush`` only counts calls. The bytes survive `recover`, so a machine restored from a
    snapshot into the same store behaves like a restarted node on the same disk.
    """

    def __init__(self, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        super().__init__(cache_bytes)
        self.segments: dict[_Key, bytearray] = {}
        self.flushes = 0
        # What a flush made durable (segment sizes), so `crash` can model a power loss.
        self._durable: dict[_Key, int] = {}

    def crash(self) -> None:
        """Power loss: every segment falls back to its size at the last flush (segments never
        flushed vanish), and the in-memory indexes are lost."""
        self.segments = {
            key: buf[: self._durable[key]]
            for key, buf in self.segments.items()
            if key in self._durable
        }
        self._offsets.clear()
        self._cache.clear()
        self._cache_bytes = 0

    def _write(self, key: _Key, data: bytes) -> None:
        self.segments.setdefault(key, bytearray()).extend(data)

    def _pread(self, key: _Key, offset: int, size: int) -> bytes:
        return bytes(self.segments[key][offset : offset + size])

    def _size(self, key: _Key) -> int | None:
        buf = self.segments.get(key)
        return None if buf is None else len(buf)

    def _truncate(self, key: _Key, size: int) -> None:
        del self.segments[key][size:]

    def _remove(self, key: _Key) -> None:
        self.segments.pop(key, None)

    def _remove_queue(self, queue: str) -> None:
        for key in [k for k in self.segments if k[0] == queue]:
            del self.segments[key]

    def _listing(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for q, first in self.segments:
            out.setdefault(q, []).append(first)
        return out

    def _close(self, key: _Key) -> None:
        del key

    def _read_copy(self, key: _Key, size: int) -> bytes:
        buf = self.segments.get(key)
        return b"" if buf is None else bytes(buf[:size])

    def _describe(self, key: _Key) -> str:
        return f"memory:{key[0]}/{key[1]:020d}.seg"

    def _scan(self, key: _Key, size: int, chunk: int) -> Iterator[bytes]:
        data = bytes(self.segments.get(key, b"")[:size])
        for pos in range(0, len(data), chunk):
            yield data[pos : pos + chunk]

    def flush(self) -> None:
        self.flushes += 1
        self._durable = {key: len(buf) for key, buf in self.segments.items()}


class FileSegmentStore(_FramedStore):
    """Segments as files ``<directory>/<queue>/<first_seq:020d>.seg``.

    Appends are held in memory until `write_out` (which the raftlog runtime calls after each
    batch of applies, through `cmq.routing.ops.WakingMachine`), then written with one ``write`` per
    segment on an ``O_APPEND`` descriptor (readable at once through the page cache, no fsync):
    one system call per segment per batch instead of one per command. Whatever reads, sizes,
    truncates, closes or fsyncs a segment on the caller's thread writes its held appends out
    first; `export` and `scan` (which may run on worker threads) read only what ended batches
    wrote, so a direct user calls `write_out` after its applies as the runtime does. Appends
    held when the process dies are lost like unsynced page-cache data: recovery truncates
    segments to the snapshot's layout and replays the log. At most ``max_open`` descriptors
    stay open (least recently used closed first). `flush` fsyncs every segment written since
    the previous flush and every directory that gained or lost a file.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        max_open: int = 128,
        durable_root: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(cache_bytes)
        self.directory = os.fspath(directory)
        self._max_open = max(1, max_open)
        self._fds: OrderedDict[_Key, int] = OrderedDict()
        self._held: dict[_Key, list[bytes]] = {}
        """Appends not yet written, per segment, oldest first (see `write_out`)."""
        self._dirty: set[_Key] = set()
        # Directories whose entries changed since the last flush: a snapshot must never list
        # files a power loss can still forget. A created directory puts its parent here. So
        # does every directory found at open, up to ``durable_root``: an earlier process may
        # have created them and crashed before making them durable (they then exist only in
        # the page cache), so the first flush makes the whole tree durable once.
        self._dirty_dirs: set[str] = set(_make_dirs(self.directory))
        self._dirty_dirs.add(self.directory)
        with os.scandir(self.directory) as entries:
            self._dirty_dirs.update(e.path for e in entries if e.is_dir(follow_symlinks=False))
        if durable_root is not None:
            root = os.path.abspath(durable_root)
            level = os.path.abspath(self.directory)
            while level != root and os.path.dirname(level) != level:
                level = os.path.dirname(level)
                self._dirty_dirs.add(level)

    def close(self) -> None:
        """Write held appends out and close every open descriptor (appends stay in the page
        cache, not fsynced)."""
        self.write_out()
        for key in list(self._fds):
            self._close(key)

    def write_out(self) -> None:
        """Write every held append to its segment file (one ``write`` per segment)."""
        for key in list(self._held):
            self._write_out(key)

    def _write_out(self, key: _Key) -> None:
        chunks = self._held.pop(key, None)
        if not chunks:
            return
        fd = self._fd(key, create=True)
        view = memoryview(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        while view:
            n = os.write(fd, view)
            view = view[n:]
        self._dirty.add(key)

    def _path(self, key: _Key) -> str:
        return os.path.join(self.directory, key[0], f"{key[1]:020d}.seg")

    def _describe(self, key: _Key) -> str:
        return self._path(key)

    def _fd(self, key: _Key, create: bool = False) -> int:
        fd = self._fds.get(key)
        if fd is not None:
            self._fds.move_to_end(key)
            return fd
        path = self._path(key)
        flags = os.O_RDWR | os.O_APPEND
        if create and not os.path.exists(path):
            qdir = os.path.dirname(path)
            self._dirty_dirs.update(_make_dirs(qdir))
            self._dirty_dirs.add(qdir)
            flags |= os.O_CREAT
        fd = os.open(path, flags, 0o644)
        self._fds[key] = fd
        while len(self._fds) > self._max_open:
            _, old = self._fds.popitem(last=False)
            os.close(old)
        return fd

    def _write(self, key: _Key, data: bytes) -> None:
        held = self._held.get(key)
        if held is None:
            self._held[key] = [data]
        else:
            held.append(data)

    def _pread(self, key: _Key, offset: int, size: int) -> bytes:
        self._write_out(key)
        fd = self._fd(key)
        out = os.pread(fd, size, offset)
        if len(out) != size:
            raise InvariantBroken(f"{self._path(key)}: short read at offset {offset}")
        return out

    def _size(self, key: _Key) -> int | None:
        self._write_out(key)
        try:
            return os.stat(self._path(key)).st_size
        except FileNotFoundError:
            return None

    def _read_copy(self, key: _Key, size: int) -> bytes:
        try:
            fd = os.open(self._path(key), os.O_RDONLY)
        except FileNotFoundError:
            return b""
        try:
            chunks = []
            pos = 0
            while pos < size:
                chunk = os.pread(fd, min(size - pos, 1 << 20), pos)
                if not chunk:
                    break
                chunks.append(chunk)
                pos += len(chunk)
            return b"".join(chunks)
        finally:
            os.close(fd)

    def _scan(self, key: _Key, size: int, chunk: int) -> Iterator[bytes]:
        # No `_write_out` here: a scan may run on a worker thread (the replica digest) while
        # the event loop applies; what it reads (a released segment, or sizes recorded between
        # batches) was written out when its batch ended.
        try:
            fd = os.open(self._path(key), os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            pos = 0
            while pos < size:
                data = os.pread(fd, min(size - pos, chunk), pos)
                if not data:
                    return
                pos += len(data)
                yield data
        finally:
            os.close(fd)

    def _truncate(self, key: _Key, size: int) -> None:
        self._close(key)  # writes held appends out first
        os.truncate(self._path(key), size)
        self._dirty.add(key)

    def _remove(self, key: _Key) -> None:
        self._held.pop(key, None)
        self._close(key)
        self._dirty.discard(key)
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            return
        # Not fsynced on purpose: if the unlink is lost in a crash, recovery removes the file
        # again (it is not in the snapshot's layout).

    def _remove_queue(self, queue: str) -> None:
        for key in [k for k in self._held if k[0] == queue]:
            del self._held[key]
        for key in [k for k in self._fds if k[0] == queue]:
            self._close(key)
        self._dirty = {k for k in self._dirty if k[0] != queue}
        qdir = os.path.join(self.directory, queue)
        self._dirty_dirs.discard(qdir)
        shutil.rmtree(qdir, ignore_errors=True)

    def _listing(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for entry in os.scandir(self.directory):
            if not entry.is_dir():
                continue
            firsts = []
            for f in os.scandir(entry.path):
                m = _SEGMENT_FILE.match(f.name)
                if m:
                    firsts.append(int(m.group(1)))
            out[entry.name] = firsts
        return out

    def _close(self, key: _Key) -> None:
        self._write_out(key)
        fd = self._fds.pop(key, None)
        if fd is not None:
            os.close(fd)

    def flush(self) -> None:
        # Nothing is held here when the runtime calls this (off the event loop, between
        # batches of applies, which end with `write_out`); a direct caller may hold appends.
        self.write_out()
        sync = getattr(os, "fdatasync", os.fsync)
        # Always a fresh descriptor: flush runs on a worker thread (raftlog offloads snapshots)
        # while reads on the event loop may evict and close cached ones, and syncing any
        # descriptor of a file makes that file's data durable.
        for key in sorted(self._dirty):
            fd = os.open(self._path(key), os.O_RDONLY)
            try:
                sync(fd)
            finally:
                os.close(fd)
        self._dirty.clear()
        # Parents after children: a new queue directory's entry in the root comes last.
        for d in sorted(self._dirty_dirs, key=len, reverse=True):
            try:
                fd = os.open(d, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._dirty_dirs.clear()


def _make_dirs(path: str) -> list[str]:
    """Create ``path`` and any missing ancestors; the parents of the levels created (their
    new entries must be fsynced to survive a power loss)."""
    missing = []
    level = os.path.abspath(path)
    while not os.path.isdir(level):
        missing.append(level)
        parent = os.path.dirname(level)
        if parent == level:
            break
        level = parent
    os.makedirs(path, exist_ok=True)
    return [os.path.dirname(d) for d in missing]


def _check_protocol(store: FileSegmentStore | MemorySegmentStore) -> SegmentStore:
    """Type-level proof that both stores implement `SegmentStore`."""
    return store
