"""`FileSegmentStore`: the queue machine's segments as files, one directory per queue and one
file per segment. The one module of `cmq.fsm` that does file I/O (the `fsm-pure` import
contract exempts it by name); its in-memory twin is `cmq.fsm.memory.MemorySegmentStore`, the
logic both share `cmq.fsm.framed`, the record format and the protocol contract `cmq.fsm.store`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections import OrderedDict
from collections.abc import Iterator

from cmq.errors import InvariantBroken
from cmq.fsm.framed import ACTIVE_INDEX_RECORDS, DEFAULT_CACHE_BYTES, FramedStore, Key
from cmq.fsm.memory import MemorySegmentStore
from cmq.fsm.store import SegmentLayout, SegmentStore, StoredMessage, encode_record

__all__ = [
    "FileSegmentStore",
    "MemorySegmentStore",
    "SegmentLayout",
    "SegmentStore",
    "StoredMessage",
    "encode_record",
]
# MemorySegmentStore, SegmentLayout, StoredMessage and encode_record are re-exported: code and
# recorded tests import them from here, where they lived before the twin had its own module.

_SEGMENT_FILE = re.compile(r"^(\d{20})\.(?:seg|idx|idx\.tmp)$")
"""A segment, its index (`cmq.fsm.segindex`) or an index being written: named by first seq."""


class FileSegmentStore(FramedStore):
    """Segments as files ``<directory>/<queue>/<first_seq:020d>.seg``, each one created while
    the index gate is open with its index ``<first_seq:020d>.idx`` beside it once sealed (or,
    while active, once it grew by ``active_index_records``; `cmq.fsm.framed`).

    Appends are held in memory until `write_out` (which the raftlog runtime calls after each
    batch of applies, through `cmq.routing.wakeups.WakingMachine`), then written with one
    ``write`` per segment on an ``O_APPEND`` descriptor (readable at once through the page
    cache, no fsync): one system call per segment per batch instead of one per command.
    Whatever reads, sizes, truncates, closes or fsyncs a segment on the caller's thread writes
    its held appends out first; `export` and `scan` (which may run on worker threads) read only
    what ended batches wrote, so a direct user calls `write_out` after its applies as the
    runtime does. Appends held when the process dies are lost like unsynced page-cache data:
    recovery truncates segments to the snapshot's layout and replays the log. At most
    ``max_open`` descriptors stay open (least recently used closed first). `flush` fsyncs
    every segment written since the previous flush and every directory that gained or lost a
    file, then writes the indexes of the segments sealed since and of the active ones due (each
    segment fsynced first; each index through a temporary file, fdatasynced and renamed; the
    rename is not made durable: an index lost in a crash only costs a scan).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        cache_bytes: int = DEFAULT_CACHE_BYTES,
        max_open: int = 128,
        durable_root: str | os.PathLike[str] | None = None,
        indexes: bool = False,
        active_index_records: int = ACTIVE_INDEX_RECORDS,
    ) -> None:
        super().__init__(cache_bytes, indexes=indexes, active_index_records=active_index_records)
        self.directory = os.fspath(directory)
        self._max_open = max(1, max_open)
        self._fds: OrderedDict[Key, int] = OrderedDict()
        self._held: dict[Key, list[bytes]] = {}
        """Appends not yet written, per segment, oldest first (see `write_out`)."""
        self._dirty: set[Key] = set()
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

    def _write_out(self, key: Key) -> None:
        chunks = self._held.pop(key, None)
        if not chunks:
            return
        fd = self._fd(key, create=True)
        view = memoryview(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        while view:
            n = os.write(fd, view)
            view = view[n:]
        self._dirty.add(key)

    def _path(self, key: Key) -> str:
        return os.path.join(self.directory, key[0], f"{key[1]:020d}.seg")

    def _describe(self, key: Key) -> str:
        return self._path(key)

    def _index_path(self, key: Key) -> str:
        return os.path.join(self.directory, key[0], f"{key[1]:020d}.idx")

    def _describe_index(self, key: Key) -> str:
        return self._index_path(key)

    def _read_index(self, key: Key) -> bytes | None:
        try:
            with open(self._index_path(key), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def _write_index(self, key: Key, data: bytes) -> None:
        path = self._index_path(key)
        tmp = path + ".tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            getattr(os, "fdatasync", os.fsync)(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)

    def _remove_index(self, key: Key) -> None:
        for path in (self._index_path(key), self._index_path(key) + ".tmp"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def _fd(self, key: Key, create: bool = False) -> int:
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

    def _write(self, key: Key, data: bytes) -> None:
        held = self._held.get(key)
        if held is None:
            self._held[key] = [data]
        else:
            held.append(data)

    def _pread(self, key: Key, offset: int, size: int) -> bytes:
        self._write_out(key)
        fd = self._fd(key)
        out = os.pread(fd, size, offset)
        if len(out) != size:
            raise InvariantBroken(f"{self._path(key)}: short read at offset {offset}")
        return out

    def _size(self, key: Key) -> int | None:
        self._write_out(key)
        try:
            return os.stat(self._path(key)).st_size
        except FileNotFoundError:
            return None

    def _read_copy(self, key: Key, size: int) -> bytes:
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

    def _scan(self, key: Key, size: int, chunk: int) -> Iterator[bytes]:
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

    def _truncate(self, key: Key, size: int) -> None:
        self._close(key)  # writes held appends out first
        os.truncate(self._path(key), size)
        self._dirty.add(key)

    def _remove(self, key: Key) -> None:
        self._held.pop(key, None)
        self._close(key)
        self._dirty.discard(key)
        self._remove_index(key)
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            return
        # Not fsynced on purpose: if the unlink is lost in a crash, recovery removes the file
        # (and its index) again (it is not in the snapshot's layout).

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
            firsts = set()
            for f in os.scandir(entry.path):
                m = _SEGMENT_FILE.match(f.name)
                if m:
                    firsts.add(int(m.group(1)))
            out[entry.name] = sorted(firsts)
        return out

    def _close(self, key: Key) -> None:
        self._write_out(key)
        fd = self._fds.pop(key, None)
        if fd is not None:
            os.close(fd)

    def flush(self) -> None:
        # Nothing is held here when the runtime calls this (off the event loop, between
        # batches of applies, which end with `write_out`); a direct caller may hold appends.
        self.write_out()
        staged = self._take_staged()
        sync = getattr(os, "fdatasync", os.fsync)
        # Always a fresh descriptor: flush runs on a worker thread (raftlog offloads snapshots)
        # while reads on the event loop may evict and close cached ones, and syncing any
        # descriptor of a file makes that file's data durable. A segment with a staged index
        # is synced whether or not it is dirty: its index must never outlive its bytes.
        for key in sorted(self._dirty | staged.keys()):
            try:
                fd = os.open(self._path(key), os.O_RDONLY)
            except FileNotFoundError:
                if key in self._dirty:
                    raise
                staged.pop(key, None)  # an index staged by a recovery of a vanished file
                continue
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
        # Last: each index describes a segment whose bytes and directory entry are durable.
        for key, data in sorted(staged.items()):
            self._write_index(key, data)


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
