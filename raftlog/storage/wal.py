"""The write-ahead log of one data directory, shared by every Raft group bound to it.

One writer thread per directory does all WAL I/O. Group commit: it takes *everything* queued
since its last fsync, writes it with one ``writev``, calls ``fdatasync`` once, and then completes
every submission of that batch in submission order. There is no timer: while one fsync is in
flight, new submissions pile up and form the next batch by themselves.

Contracts:

- `Wal.submit` is thread-safe and returns a ``concurrent.futures.Future`` that completes once the
  records are written and, when any submission of the batch asked for it, fsynced (``sync=False``
  submissions never trigger an fsync themselves; they ride along with the next batch). The
  optional ``on_done`` callback runs on the writer thread *before* the future completes, in
  submission order across the whole directory: a group's in-memory state updated there is
  visible to anyone woken by the future.
- The submit queue is bounded by count and bytes; when full, `Overloaded` (retriable) is raised.
- `Wal.close` completes (``drain=True``) or fails with `WalClosed` every queued submission, then
  joins the writer thread. An I/O error (a failed ``writev``, ``fdatasync``, rotation or
  directory fsync: EIO, ENOSPC, anything) stops the WAL for good: after a failed fsync the
  kernel may have dropped the dirty pages, so an fsync is never retried and nothing of the batch
  is reported durable. The batch, every pending and every later submission fail with
  `DiskFailed` (a `WalClosed`) naming the directory and errno, chained to the cause; `failure`
  and the stats (``failed``) say so. No waiter is ever left hanging. An ENOSPC is no exception:
  the groups on the directory already hold the batch's entries in memory (a leader may have
  sent them to its followers), so failing only those submissions would leave them believing in
  entries that are not in their log; the node keeps a free-space reserve so that a real ENOSPC
  is rare (`cmq.node.diskwatch`). A restart recovers what reads back with valid checksums.
- The fsync in progress (its start, ``WalStats.fsync_started``) and the last one's duration are
  in the stats, so a slow or hung disk can be seen while it hangs.
- Segment files ``wal-<16-digit seq>.log`` rotate once they reach ``segment_bytes`` (at batch
  boundaries). A new segment starts with every live group's latest snapshot marker, conf and
  hard state, so the old ones can be deleted as soon as their entries are all snapshotted
  (see `raftlog.storage.segments`). Deletion is automatic, oldest first.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future

from raftlog.errors import DiskFailed, InvariantViolation, Overloaded, WalClosed
from raftlog.storage.completion import accepted_future, complete
from raftlog.storage.files import (
    SNAP_DIR,
    SNAP_NAME,
    TMP_SUFFIX,
    fsync_dir,
    snapshot_name,
    wal_name,
)
from raftlog.storage.record import (
    DropRecord,
    Record,
    SnapshotRecord,
    encode_record,
)
from raftlog.storage.recovery import Damage, RecoveredGroup, TornTail, recover
from raftlog.storage.repairs import RepairMarks
from raftlog.storage.segments import SegmentIndex
from raftlog.storage.walstats import FSYNC_BUCKETS, WalCounters, WalOptions, WalStats

__all__ = ["FSYNC_BUCKETS", "Wal", "WalOptions", "WalStats"]

log = logging.getLogger("raftlog.storage")

_IOV_MAX = 1024  # writev's portable limit on buffers per call


class _Submission:
    """One `Wal.submit` call: encoded frames, the records they hold and who waits for them."""

    __slots__ = ("data", "future", "group", "nbytes", "on_done", "records", "sync")

    def __init__(
        self,
        group: int,
        records: tuple[Record, ...],
        data: list[bytes],
        sync: bool,
        on_done: Callable[[], None] | None,
    ) -> None:
        self.group = group
        self.records = records
        self.data = data
        self.nbytes = sum(len(d) for d in data)
        self.sync = sync
        self.on_done = on_done
        self.future = accepted_future()


def _write_all(fd: int, bufs: list[bytes]) -> None:
    """Write every buffer, in order, with as few ``writev`` calls as the OS allows."""
    views = [memoryview(b) for b in bufs if b]
    while views:
        chunk = views[:_IOV_MAX]
        written = os.writev(fd, chunk)
        # Drop fully written buffers, then trim a partially written one.
        done = 0
        while done < len(chunk) and written >= len(chunk[done]):
            written -= len(chunk[done])
            done += 1
        views = views[done:]
        if written:
            views[0] = views[0][written:]


class Wal:
    """The WAL of one data directory. Create with `Wal.open`; always `close` it."""

    __slots__ = (
        "_active_seq",
        "_active_size",
        "_claimed",
        "_closed",
        "_closing",
        "_cond",
        "_counters",
        "_damage",
        "_dir",
        "_dirty",
        "_failed",
        "_fd",
        "_index",
        "_meta",
        "_options",
        "_pending_bytes",
        "_queue",
        "_recovered",
        "_repairs",
        "_thread",
        "_torn_tail",
    )

    def __init__(self, directory: str, options: WalOptions) -> None:
        """Private: use `Wal.open`, which recovers the directory first."""
        self._dir = directory
        self._options = options
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[_Submission] = deque()
        self._pending_bytes = 0
        self._closing = False
        self._closed = False
        self._failed: DiskFailed | None = None
        # _meta guards the segment index, the claimed groups and the counters: the writer
        # updates them while other threads ask for stats and pins.
        self._meta = threading.Lock()
        self._index = SegmentIndex()
        self._recovered: dict[int, RecoveredGroup] = {}
        self._claimed: set[int] = set()
        self._counters = WalCounters()
        self._torn_tail: TornTail | None = None
        self._damage: Damage | None = None
        self._repairs = RepairMarks(directory)
        # Owned by the writer thread once it runs.
        self._fd = -1
        self._active_seq = 0
        self._active_size = 0
        self._dirty = False
        self._thread = threading.Thread(target=self._run, name=f"wal-writer:{directory}")
        self._thread.daemon = True

    # -- lifecycle -------------------------------------------------------------------------------
    @classmethod
    def open(cls, directory: str, options: WalOptions | None = None) -> Wal:
        """Recover ``directory`` (creating it if needed) and start its writer thread.

        Truncates a torn tail of the last segment; raises `CorruptRecord` for any other damage
        and `NewerFormat` for an intact record of a newer release (never truncated).
        Removes leftover temporary files and snapshot files no group refers to.
        """
        options = options or WalOptions()
        directory = os.path.abspath(directory)
        if not os.path.isdir(directory):
            os.makedirs(directory, exist_ok=True)
            fsync_dir(os.path.dirname(directory))
        snap_dir = os.path.join(directory, SNAP_DIR)
        if not os.path.isdir(snap_dir):
            os.mkdir(snap_dir)
            fsync_dir(directory)
        wal = cls(directory, options)
        salvage = wal._salvage if options.salvage else None
        rec = recover(directory, options.max_record_bytes, salvage=salvage)
        wal._index = rec.index
        wal._recovered = dict(rec.groups)
        wal._torn_tail = rec.torn_tail
        wal._damage = rec.damage
        if rec.torn_tail is not None:
            t = rec.torn_tail
            # Normal after a crash mid-write; the same cut also hides a file damaged or rolled
            # back at its end, so it is always reported.
            log.warning(
                "WAL %s: cut %d bytes at offset %d (%s): a torn last write, or damage at the end",
                t.path,
                t.dropped_bytes,
                t.offset,
                t.reason,
                extra={"event": "wal_tail_cut"},
            )
        wal._remove_orphans(rec.groups)
        if rec.segments:
            wal._active_seq = rec.segments[-1]
            wal._fd = os.open(
                os.path.join(directory, wal_name(wal._active_seq)), os.O_WRONLY | os.O_CLOEXEC
            )
            os.lseek(wal._fd, rec.last_segment_size, os.SEEK_SET)
            wal._active_size = rec.last_segment_size
        else:
            wal._active_seq = 1
            wal._index.add_segment(1)
            wal._fd = os.open(
                os.path.join(directory, wal_name(1)),
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                0o644,
            )
            fsync_dir(directory)
        wal._thread.start()
        return wal

    def _salvage(self, damage: Damage) -> None:
        """Recovery found damage before the tail: mark every group that may have lost records
        (durably, before recovery cuts anything), and say so loudly."""
        log.error(
            "WAL %s: damage at offset %d (%s): cutting it and %d later segment(s); groups %s "
            "are repaired from their other replicas",
            damage.path,
            damage.offset,
            damage.reason,
            len(damage.dropped_segments),
            list(damage.groups),
            extra={"event": "wal_damaged"},
        )
        now_ms = int(time.time() * 1000)
        for g in damage.groups:
            self._repairs.mark(g, f"WAL damaged: {damage.reason}", now_ms)

    def _remove_orphans(self, groups: Mapping[int, RecoveredGroup]) -> None:
        """Delete temporaries and snapshot files that no recovered snapshot marker refers to
        (left by a crash between writing a snapshot file and its marker, or before the old file
        of a superseded snapshot was removed)."""
        wanted = {(g, r.snapshot.index) for g, r in groups.items() if r.snapshot.index}
        for directory, is_snap in ((self._dir, False), (self.snapshot_dir, True)):
            removed = False
            for name in os.listdir(directory):
                m = SNAP_NAME.match(name)
                orphan = name.endswith(TMP_SUFFIX) or (
                    is_snap and m is not None and (int(m.group(1)), int(m.group(2))) not in wanted
                )
                if orphan:
                    os.unlink(os.path.join(directory, name))
                    removed = True
            if removed:
                fsync_dir(directory)

    def close(self, *, drain: bool = True) -> None:
        """Stop the WAL: complete (``drain``) or fail every queued submission, join the writer,
        and close the segment (fsyncing any unsynced tail). Idempotent. Must not be called from
        an ``on_done`` callback (the writer thread cannot join itself)."""
        if threading.current_thread() is self._thread:
            raise InvariantViolation("Wal.close called from the WAL writer thread")
        dropped: list[_Submission] = []
        with self._cond:
            self._closing = True
            if not drain:
                dropped = list(self._queue)
                self._queue.clear()
                self._pending_bytes = 0
            self._cond.notify_all()
        for sub in dropped:
            sub.future.set_exception(WalClosed("the WAL was closed before this write"))
        if self._thread.ident is not None:  # started
            self._thread.join()
        with self._cond:  # two concurrent closers must not both close the descriptor
            if self._closed:
                return
            self._closed = True
            fd, self._fd = self._fd, -1
        if fd >= 0:
            try:
                if self._dirty and self._failed is None:
                    os.fdatasync(fd)
            finally:
                os.close(fd)

    def __enter__(self) -> Wal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- submission ------------------------------------------------------------------------------
    def submit(
        self,
        group: int,
        records: Sequence[Record],
        *,
        sync: bool = True,
        on_done: Callable[[], None] | None = None,
    ) -> Future[None]:
        """Queue ``records`` of ``group`` as one unit; thread-safe.

        The future completes after the records are written and (if ``sync`` or any other
        submission in the same batch asked for it) fsynced; ``on_done`` runs on the writer
        thread just before that. If ``on_done`` raises, the future carries that exception.
        Raises ``ValueError`` for an unencodable record, `Overloaded` when the queue is full and
        `WalClosed` after close or failure.
        """
        recs = tuple(records)
        if not recs:
            raise ValueError("a submission needs at least one record")
        data = [encode_record(group, r, self._options.max_record_bytes) for r in recs]
        sub = _Submission(group, recs, data, sync, on_done)
        with self._cond:
            if (f := self._failed) is not None:
                raise DiskFailed(f.directory, f.errno, f.reason) from f.__cause__
            if self._closing:
                raise WalClosed("the WAL is closed")
            opts = self._options
            if len(self._queue) >= opts.max_pending_submissions or (
                self._queue and self._pending_bytes + sub.nbytes > opts.max_pending_bytes
            ):
                raise Overloaded(
                    f"WAL queue full ({len(self._queue)} submissions, {self._pending_bytes} bytes)"
                )
            self._queue.append(sub)
            self._pending_bytes += sub.nbytes
            if len(self._queue) == 1:
                self._cond.notify()
        return sub.future

    async def write(self, group: int, records: Sequence[Record], *, sync: bool = True) -> None:
        """`submit` and wait for completion on the running event loop."""
        await asyncio.wrap_future(self.submit(group, records, sync=sync))

    # -- groups ----------------------------------------------------------------------------------
    def groups(self) -> tuple[int, ...]:
        """Every group with state in this directory (recovered or written since), sorted."""
        with self._meta:
            return tuple(self._index.groups())

    def claim_group(self, group: int) -> RecoveredGroup | None:
        """Register the single owner of ``group`` and hand it the recovered state (once).

        Raises `InvariantViolation` if the group is already claimed.
        """
        with self._meta:
            if group in self._claimed:
                raise InvariantViolation(f"group {group} is already open on {self._dir}")
            self._claimed.add(group)
            return self._recovered.pop(group, None)

    def drop_group(self, group: int) -> Future[None]:
        """Durably forget ``group``: a DROP record voids its history, its snapshot files are
        removed and its claim released once the record is durable. The owner must stop using
        its `GroupLog` first."""

        def done() -> None:
            for name in os.listdir(self.snapshot_dir):
                m = SNAP_NAME.match(name)
                if m is not None and int(m.group(1)) == group:
                    os.unlink(os.path.join(self.snapshot_dir, name))
            with self._meta:
                self._claimed.discard(group)
                self._recovered.pop(group, None)

        return self.submit(group, [DropRecord()], on_done=done)

    def pinning_groups(self) -> tuple[int, ...]:
        """Groups whose unsnapshotted entries keep the oldest segment from being deleted
        (empty when only the active segment exists): snapshot these to free disk."""
        with self._meta:
            segs = self._index.segments()
            if len(segs) < 2:
                return ()
            return tuple(self._index.pinning_groups(segs[0]))

    def segments(self) -> tuple[int, ...]:
        """Sequence numbers of the live segment files, oldest first (the last one is active)."""
        with self._meta:
            return tuple(self._index.segments())

    @property
    def directory(self) -> str:
        return self._dir

    @property
    def snapshot_dir(self) -> str:
        return os.path.join(self._dir, SNAP_DIR)

    @property
    def options(self) -> WalOptions:
        return self._options

    @property
    def damage(self) -> Damage | None:
        """What recovery cut away when this WAL was opened (``WalOptions.salvage``), if any."""
        return self._damage

    @property
    def repairs(self) -> RepairMarks:
        """The groups of this directory whose replica is being repaired."""
        return self._repairs

    @property
    def failure(self) -> DiskFailed | None:
        """Why this WAL stopped after an I/O error, or None while it works."""
        with self._cond:
            return self._failed

    @property
    def torn_tail(self) -> TornTail | None:
        """What recovery truncated when this WAL was opened, if anything."""
        return self._torn_tail

    def snapshot_path(self, group: int, index: int) -> str:
        """Where ``group``'s snapshot data at ``index`` lives."""
        return os.path.join(self.snapshot_dir, snapshot_name(group, index))

    def stats(self) -> WalStats:
        """A consistent copy of the counters (cheap; safe from any thread)."""
        with self._meta:
            return self._counters.stats(len(self._index.segments()))

    # -- writer thread ---------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                batch = list(self._queue)
                self._queue.clear()
                self._pending_bytes = 0
            try:
                self._write_batch(batch)
            except BaseException as exc:
                self._stop(exc, batch)
                return

    def _stop(self, exc: BaseException, batch: list[_Submission]) -> None:
        """Fail this batch and everything queued after an I/O error; refuse later submits."""
        code = exc.errno if isinstance(exc, OSError) and exc.errno else 0
        name = errno.errorcode.get(code, type(exc).__name__)
        failed = DiskFailed(self._dir, code, f"{name}: {exc}")
        failed.__cause__ = exc
        log.error(
            "WAL %s stopped for good: %s",
            self._dir,
            failed,
            exc_info=exc,
            extra={"event": "wal_failed"},
        )
        with self._cond:
            self._failed = failed
            rest = list(self._queue)
            self._queue.clear()
            self._pending_bytes = 0
        with self._meta:
            self._counters.failed = failed.reason
            self._counters.failed_errno = code
            self._counters.fsync_started = 0.0
        for sub in batch + rest:
            if not sub.future.done():
                err = DiskFailed(self._dir, code, failed.reason)
                err.__cause__ = exc
                sub.future.set_exception(err)

    def _write_batch(self, batch: list[_Submission]) -> None:
        rotated = False
        if self._active_size >= self._options.segment_bytes:
            self._rotate()
            rotated = True
        seq = self._active_seq
        bufs: list[bytes] = []
        n_records = 0
        sync = False
        may_unpin = rotated
        with self._meta:
            for sub in batch:
                for rec in sub.records:
                    self._index.note(seq, sub.group, rec)
                    may_unpin = may_unpin or isinstance(rec, SnapshotRecord | DropRecord)
                bufs.extend(sub.data)
                n_records += len(sub.records)
                sync = sync or sub.sync
        nbytes = sum(len(b) for b in bufs)
        _write_all(self._fd, bufs)
        self._active_size += nbytes
        latency: float | None = None
        if sync:
            start = time.perf_counter()
            with self._meta:
                self._counters.fsync_started = time.monotonic()
            self._sync(self._fd)
            latency = time.perf_counter() - start
            with self._meta:
                self._counters.fsync_started = 0.0
            self._dirty = False
        else:
            self._dirty = True
        with self._meta:
            self._counters.wrote(len(batch), n_records, nbytes, latency)
        if may_unpin:
            # Before completing the batch, so that a caller who saw its snapshot marker become
            # durable also sees the segments it freed gone (deterministic for the runtime).
            self._collect()
        for sub in batch:
            complete(sub.future, sub.on_done)

    def _sync(self, fd: int) -> None:
        """``fdatasync`` a batch: once, never retried (see the module docstring)."""
        os.fdatasync(fd)

    def _rotate(self) -> None:
        """Seal the active segment (fsynced) and start the next one with every group's head."""
        if self._dirty:
            os.fdatasync(self._fd)
            self._dirty = False
        os.close(self._fd)
        self._fd = -1
        seq = self._active_seq + 1
        with self._meta:
            heads = self._index.head_records()
            self._index.add_segment(seq)
        data = [encode_record(g, r, self._options.max_record_bytes) for g, r in heads]
        fd = os.open(
            os.path.join(self._dir, wal_name(seq)),
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
            0o644,
        )
        self._fd = fd
        self._active_seq = seq
        _write_all(fd, data)
        os.fdatasync(fd)
        fsync_dir(self._dir)
        self._active_size = sum(len(d) for d in data)
        with self._meta:
            self._counters.rotations += 1

    def _collect(self) -> None:
        """Delete the oldest segments while no group pins them (one directory fsync each, so a
        crash can never resurrect an older segment without the ones after it)."""
        while True:
            with self._meta:
                segs = self._index.segments()
                if len(segs) < 2 or segs[0] == self._active_seq:
                    return
                oldest = segs[0]
                if self._index.pinning_groups(oldest):
                    return
                self._index.remove_segment(oldest)
            os.unlink(os.path.join(self._dir, wal_name(oldest)))
            fsync_dir(self._dir)
            with self._meta:
                self._counters.segments_deleted += 1
