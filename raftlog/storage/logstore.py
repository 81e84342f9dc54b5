"""`GroupLog`: one Raft group's durable log on a shared `Wal`.

Read side: the `raftlog.core.storage.Storage` protocol, served from memory (a memtable of every
entry since the snapshot, the hard state, the conf and the snapshot meta), so replication never
reads the disk. It describes *durable* state only: a write becomes visible when the WAL reports
it written (and fsynced when asked), never earlier.

Write side: the same operations as ``MemoryStorage`` (`append`, `set_hard_state`, `set_conf`,
`apply_snapshot`, `create_snapshot`, `compact`), each in two forms:

- ``submit_*`` stages the records, hands them to the WAL as one submission and returns a
  ``concurrent.futures.Future`` (wrap it with ``asyncio.wrap_future``). `submit_ready` persists a
  Raft ``Ready`` -- snapshot, then entries, then hard state -- as a single submission.
- The plain names block until durable (for tests and simple callers; never on an event loop).

Threading: the write side must be called from one thread at a time (the group's owner). Reads
are safe from any thread; the WAL writer thread applies completed writes under the same lock.
Writes are validated against the *staged* log (including writes still in flight), so a caller
can pipeline several submissions; the WAL completes them in order.

Differences from ``MemoryStorage``: `compact` is memory-only, and after a restart the log starts
right after the latest snapshot (entries kept below it by a lenient `compact` are not restored).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future

from raftlog.core.storage import bootstrap_snapshot, limit_size
from raftlog.core.types import ConfState, Entry, HardState, Snapshot, SnapshotMeta
from raftlog.errors import Compacted, CorruptRecord, InvariantViolation, Unavailable
from raftlog.storage.completion import done_future
from raftlog.storage.files import atomic_write, decode_snapshot_file, encode_snapshot_file
from raftlog.storage.record import (
    ConfRecord,
    EntriesRecord,
    HardStateRecord,
    Record,
    SnapshotRecord,
)
from raftlog.storage.wal import Wal


class GroupLog:
    """One group's log, hard state, conf and latest snapshot, made durable through a `Wal`."""

    __slots__ = (
        "_conf",
        "_entries",
        "_group",
        "_hard_state",
        "_lock",
        "_snap_data",
        "_snap_meta",
        "_staged_floor",
        "_staged_last",
        "_staged_snap",
        "_wal",
    )

    def __init__(self, wal: Wal, group: int, *, initial_conf: ConfState | None = None) -> None:
        """Open ``group`` on ``wal`` with its recovered state (one owner per group).

        A group new to the directory starts like ``MemoryStorage(initial_conf)``: empty, or --
        for a founding member, whose ``initial_conf`` has voters -- from
        ``bootstrap_snapshot(initial_conf)``, made durable before this returns. Recovered groups
        ignore ``initial_conf``.
        """
        self._wal = wal
        self._group = group
        self._lock = threading.Lock()
        recovered = wal.claim_group(group)
        self._snap_data: bytes | None = b""
        # _entries[0] is a dummy standing for the compaction point (index, term).
        self._entries: list[Entry] = [Entry(0, 0)]
        if recovered is None:
            self._hard_state = HardState()
            self._conf = ConfState()
            self._snap_meta = SnapshotMeta()
        else:
            self._hard_state = recovered.hard_state
            self._conf = recovered.conf
            snap = recovered.snapshot
            self._snap_meta = snap
            if snap.index:
                self._snap_data = None  # loaded from its file on first use
            self._entries = [Entry(snap.term, snap.index), *recovered.entries]
        self._staged_last = self.last_index()
        self._staged_floor = self._entries[0].index
        self._staged_snap = self._snap_meta.index
        if recovered is None and initial_conf is not None and initial_conf.voters:
            self.apply_snapshot(bootstrap_snapshot(initial_conf))

    @property
    def group(self) -> int:
        return self._group

    # -- read side (Storage protocol) ------------------------------------------------------------
    def initial_state(self) -> tuple[HardState, ConfState]:
        """`Storage.initial_state`: the recovered hard state and the configuration of the
        latest snapshot, created here or installed (`raftlog.storage.recovery`)."""
        with self._lock:
            return self._hard_state, self._conf

    def first_index(self) -> int:
        with self._lock:
            return self._entries[0].index + 1

    def last_index(self) -> int:
        with self._lock:
            return self._entries[0].index + len(self._entries) - 1

    def term(self, index: int) -> int:
        with self._lock:
            offset = self._entries[0].index
            if index < offset:
                raise Compacted(f"index {index} is below the snapshot at {offset}")
            if index - offset >= len(self._entries):
                last = offset + len(self._entries) - 1
                raise Unavailable(f"index {index} is beyond the last index {last}")
            return self._entries[index - offset].term

    def entries(self, lo: int, hi: int, max_bytes: int) -> list[Entry]:
        with self._lock:
            offset = self._entries[0].index
            last = offset + len(self._entries) - 1
            if lo <= offset:
                raise Compacted(f"index {lo} is compacted (snapshot at {offset})")
            if hi > last + 1:
                raise Unavailable(f"index {hi - 1} is beyond the last index {last}")
            return limit_size(self._entries[lo - offset : hi - offset], max_bytes)

    def snapshot(self) -> Snapshot:
        """The latest durable snapshot; its data is read from disk on first use after a restart.

        Raises `CorruptRecord` when the data file is missing or damaged.
        """
        with self._lock:
            meta = self._snap_meta
            if self._snap_data is None:
                path = self._wal.snapshot_path(self._group, meta.index)
                try:
                    with open(path, "rb") as f:
                        raw = f.read()
                except FileNotFoundError:
                    raise CorruptRecord(
                        path,
                        0,
                        "snapshot data file is missing (deleted, or the WAL was cut short or "
                        "rolled back to before a newer snapshot)",
                    ) from None
                self._snap_data = decode_snapshot_file(
                    path, raw, self._group, meta.index, meta.term
                )
            return Snapshot(meta, self._snap_data)

    def verify_snapshot(self) -> int:
        """`DurableLog.verify_snapshot`: read the latest snapshot's data file again and check
        its checksum, group, index and term (a scrub); `CorruptRecord` on damage or when it is
        gone while still the latest. Returns the file's size (0: no snapshot yet)."""
        with self._lock:
            meta = self._snap_meta
        if not meta.index:
            return 0
        path = self._wal.snapshot_path(self._group, meta.index)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            with self._lock:
                if self._snap_meta.index != meta.index:
                    return 0  # replaced by a newer snapshot meanwhile
            raise CorruptRecord(path, 0, "snapshot data file is missing") from None
        decode_snapshot_file(path, raw, self._group, meta.index, meta.term)
        return len(raw)

    # -- write side: staged submissions ----------------------------------------------------------
    def submit_ready(
        self,
        *,
        snapshot: Snapshot | None = None,
        entries: Sequence[Entry] = (),
        hard_state: HardState | None = None,
        sync: bool = True,
    ) -> Future[None]:
        """Persist a Ready's snapshot, entries and hard state as one WAL submission.

        Like ``MemoryStorage``: a snapshot not newer than the current one is ignored; entries at
        or below the compaction point are skipped; the first remaining entry replaces the stored
        entry at its index and everything after it; a gap raises `InvariantViolation` (nothing
        is written then). A snapshot's data file is written and fsynced (atomically) in the
        calling thread before the submission; call this off the event loop when installing a
        large snapshot. ``sync`` is ``Ready.must_sync``.
        """
        records: list[Record] = []
        floor, last, snap_index = self._staged_floor, self._staged_last, self._staged_snap
        if snapshot is not None and snapshot.meta.index > snap_index:
            meta = snapshot.meta
            records.append(SnapshotRecord(meta, installed=True))
            floor = last = snap_index = meta.index
        else:
            snapshot = None
        ents = [e for e in entries if e.index > floor]
        if ents:
            if ents[0].index > last + 1:
                raise InvariantViolation(f"gap: appending {ents[0].index} after last {last}")
            records.append(EntriesRecord(tuple(ents)))
            last = ents[-1].index
        if hard_state is not None:
            records.append(HardStateRecord(hard_state))
        if not records:
            return done_future()
        if snapshot is not None:
            self._write_snapshot_file(snapshot)
        old_snap_index = self._staged_snap

        def done() -> None:
            with self._lock:
                if snapshot is not None:
                    self._install(snapshot)
                if ents:
                    self._append(ents)
                if hard_state is not None:
                    self._hard_state = hard_state
            if snapshot is not None:
                self._remove_snapshot_file(old_snap_index)

        fut = self._wal.submit(self._group, records, sync=sync, on_done=done)
        self._staged_floor, self._staged_last, self._staged_snap = floor, last, snap_index
        return fut

    async def persist_ready(
        self,
        *,
        snapshot: Snapshot | None = None,
        entries: Sequence[Entry] = (),
        hard_state: HardState | None = None,
        sync: bool = True,
    ) -> None:
        """`submit_ready` and wait on the running event loop until the write is durable."""
        fut = self.submit_ready(
            snapshot=snapshot, entries=entries, hard_state=hard_state, sync=sync
        )
        await asyncio.wrap_future(fut)

    def submit_conf(self, conf: ConfState, *, sync: bool = True) -> Future[None]:
        """Record the configuration reported by `initial_state` (after a conf change applies)."""

        def done() -> None:
            with self._lock:
                self._conf = conf

        return self._wal.submit(self._group, [ConfRecord(conf)], sync=sync, on_done=done)

    def submit_create_snapshot(
        self, index: int, conf: ConfState, data: bytes
    ) -> tuple[Snapshot, Future[None]]:
        """Record a snapshot of the state machine at ``index`` (a durable entry, or the current
        snapshot point): its data file is written atomically in the calling thread, then the
        marker goes through the WAL. Returns the snapshot and when it is durable. A snapshot not
        newer than the staged one is not written: the current one is returned, already done."""
        if index <= self._staged_snap:
            return self.snapshot(), done_future()
        snap = Snapshot(SnapshotMeta(index, self.term(index), conf), data)
        self._write_snapshot_file(snap)
        old_snap_index = self._staged_snap

        def done() -> None:
            with self._lock:
                if snap.meta.index > self._snap_meta.index:
                    self._snap_meta = snap.meta
                    self._snap_data = snap.data
            self._remove_snapshot_file(old_snap_index)

        fut = self._wal.submit(
            self._group, [SnapshotRecord(snap.meta, installed=False)], on_done=done
        )
        self._staged_snap = index
        return snap, fut

    # -- write side: blocking, MemoryStorage-compatible ------------------------------------------
    def append(self, entries: tuple[Entry, ...] | list[Entry]) -> None:
        """Durably store ``entries`` (replace-suffix semantics, see `submit_ready`)."""
        self.submit_ready(entries=entries).result()

    def set_hard_state(self, hs: HardState, *, sync: bool = True) -> None:
        """Durably record ``hs``."""
        self.submit_ready(hard_state=hs, sync=sync).result()

    def set_conf(self, conf: ConfState) -> None:
        """Durably record the configuration reported by `initial_state`."""
        self.submit_conf(conf).result()

    def apply_snapshot(self, snap: Snapshot) -> None:
        """Durably replace everything with ``snap`` (ignored unless newer than the current)."""
        self.submit_ready(snapshot=snap).result()

    def create_snapshot(self, index: int, conf: ConfState, data: bytes) -> Snapshot:
        """Durably record a snapshot at ``index`` (which must be stored)."""
        snap, fut = self.submit_create_snapshot(index, conf, data)
        fut.result()
        return snap

    def compact(self, index: int) -> None:
        """Drop in-memory entries up to and including ``index`` (<= the durable snapshot index).

        Memory only: the WAL keeps the entries until its segments are deleted, and a restart
        starts the log after the snapshot anyway.
        """
        with self._lock:
            offset = self._entries[0].index
            if index <= offset:
                return
            if index > self._snap_meta.index:
                raise InvariantViolation(f"compact {index} beyond snapshot {self._snap_meta.index}")
            term = self._entries[index - offset].term
            self._entries = [Entry(term, index), *self._entries[index - offset + 1 :]]
        self._staged_floor = max(self._staged_floor, index)

    # -- internals -------------------------------------------------------------------------------
    def _install(self, snap: Snapshot) -> None:
        """Replace the memtable with ``snap`` (caller holds the lock)."""
        if snap.meta.index <= self._snap_meta.index:
            return
        self._snap_meta = snap.meta
        self._snap_data = snap.data
        self._entries = [Entry(snap.meta.term, snap.meta.index)]
        self._conf = snap.meta.conf

    def _append(self, entries: list[Entry]) -> None:
        """``MemoryStorage.append`` on the memtable (caller holds the lock; validated when
        staged, so a gap here is a broken invariant)."""
        offset = self._entries[0].index
        first = entries[0].index
        if first <= offset:
            entries = entries[offset + 1 - first :]
            if not entries:
                return
            first = offset + 1
        last = offset + len(self._entries) - 1
        if first > last + 1:
            raise InvariantViolation(f"gap: applying {first} after last {last}")
        del self._entries[first - offset :]
        self._entries.extend(entries)

    def _write_snapshot_file(self, snap: Snapshot) -> None:
        meta = snap.meta
        path = self._wal.snapshot_path(self._group, meta.index)
        atomic_write(path, encode_snapshot_file(self._group, meta.index, meta.term, snap.data))

    def _remove_snapshot_file(self, index: int) -> None:
        """Remove a superseded snapshot's data file (its successor's marker is durable). A
        crash before this leaves an orphan that `Wal.open` removes."""
        if index == 0:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._wal.snapshot_path(self._group, index))
