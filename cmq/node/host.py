"""`NodeHost`: the I/O a `cmq.node.queue_node.QueueNode` is given.

A node does I/O in six places, each a seam here with the real implementation and an in-memory
twin side by side, so the same node code runs on sockets, files and the system clock in
production and on twins under the whole-node simulator (`tests/nodesim`):

==============  ==============================================  ================================
seam            real (the default)                              twin
==============  ==============================================  ================================
``transport``   `raftlog.transport.Transport` (TCP, peer TLS)   `raftlog.transport.memory`
``disks``       `raftlog.storage.WalDisks` (a WAL per data dir) `raftlog.storage.memory`
``clock``       `cmq.routing.clock.node_clock()` (+ hooks)      `raftlog.runtime.host.LoopClock`
``offload``     ``asyncio.to_thread``                           `raftlog.runtime.host.inline`
``segments``    `cmq.fsm.segments.FileSegmentStore`             `MemoryFiles.segment_store`
``files``       `OS_FILES` (flag markers, removing segments,    `MemoryFiles`
                free space)
==============  ==============================================  ================================

``seed`` seeds the node's own random choices (election timeouts, the router's retry jitter);
None draws them from the operating system.

Every blocking call of the node (removing a dropped group's segments, hashing segments for a
digest) goes through ``offload``; the raftlog host runs its own blocking calls (recovery,
snapshots, closing a WAL) through the same one.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from cmq.fsm.segments import FileSegmentStore, MemorySegmentStore
from cmq.fsm.store import SegmentStore
from cmq.node.feature_marker import read_file, write_file_durably
from raftlog.runtime import Clock, LogDisks, Offload, PeerTransport


class SegmentStores(Protocol):
    """Opens the segment store of one data group: ``directory`` holds its segments,
    ``durable_root`` is the data directory (fsynced up to it when a directory is created)."""

    def __call__(self, directory: str, *, durable_root: str) -> SegmentStore: ...


class NodeFiles(Protocol):
    """The node's files outside the log and the segments: the feature-flag marker of each data
    directory (`cmq.node.feature_marker`) and the removal of a dropped group's segments.
    Every method may block (called through the host's offload, or at start)."""

    def read(self, path: str) -> bytes | None:
        """The file's bytes; None when it does not exist."""
        ...

    def write_durably(self, path: str, data: bytes) -> None:
        """Replace the file atomically and durably (a temporary file, fsynced, renamed over
        it, the directory fsynced)."""
        ...

    def remove_tree(self, path: str) -> None:
        """Remove a directory and everything under it (nothing if it does not exist)."""
        ...

    def free_bytes(self, path: str) -> int | None:
        """Free space an unprivileged writer may still use on ``path``'s file system (None:
        unknown, never short). Read by `cmq.node.diskwatch` through the offload."""
        ...


class OsFiles:
    """`NodeFiles` on the operating system's file system."""

    __slots__ = ()

    def read(self, path: str) -> bytes | None:
        return read_file(path)

    def write_durably(self, path: str, data: bytes) -> None:
        write_file_durably(path, data)

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def free_bytes(self, path: str) -> int | None:
        sv = os.statvfs(path)
        return sv.f_bavail * sv.f_frsize


OS_FILES = OsFiles()


def _file_segments(directory: str, *, durable_root: str) -> SegmentStore:
    return FileSegmentStore(directory, durable_root=durable_root)


@dataclass(frozen=True, slots=True)
class NodeHost:
    """What a node's I/O is (see the module docstring); every field defaults to the real one.
    ``transport`` and ``disks`` left None are built by `raftlog.runtime.MultiRaft` from the
    node's configuration (TCP on its peer address, with peer TLS when configured; a WAL per
    data directory)."""

    transport: PeerTransport | None = None
    disks: LogDisks | None = None
    clock: Clock | None = None
    """None: the node builds its production clock when it is built
    (`cmq.routing.clock.node_clock`: the system's, with the test hooks of its environment)."""
    offload: Offload = asyncio.to_thread
    segments: SegmentStores = _file_segments
    files: NodeFiles = OS_FILES
    seed: int | None = None


PRODUCTION = NodeHost()
"""The real I/O: what `QueueNode` runs on when given no host."""


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


@dataclass(slots=True)
class MemoryFiles:
    """The twin of `NodeFiles` and of the segment stores for one simulated node: files and
    segment stores in memory, outliving the hosts that use them (a restarted node finds them).

    A file written durably survives everything; a segment store keeps what its last ``flush``
    made durable through a `power_loss` (`cmq.fsm.segments.MemorySegmentStore.crash`: unflushed
    appends are lost, as the page cache is). `remove_tree` forgets the files and the segment
    stores under a path."""

    files: dict[str, bytes] = field(default_factory=dict)
    stores: dict[str, MemorySegmentStore] = field(default_factory=dict)
    on_write: Callable[[str], None] | None = None
    """Called with each path written (a simulator may count or trace them)."""

    def read(self, path: str) -> bytes | None:
        return self.files.get(path)

    def write_durably(self, path: str, data: bytes) -> None:
        self.files[path] = bytes(data)
        if self.on_write is not None:
            self.on_write(path)

    def remove_tree(self, path: str) -> None:
        for name in [p for p in self.files if _under(p, path)]:
            del self.files[name]
        for name in [p for p in self.stores if _under(p, path)]:
            del self.stores[name]

    def free_bytes(self, path: str) -> int | None:
        """Unknown: a simulated disk never fills."""
        del path
        return None

    def segment_store(self, directory: str, *, durable_root: str) -> SegmentStore:
        """The store of ``directory`` (created empty the first time; the same one after)."""
        del durable_root
        store = self.stores.get(directory)
        if store is None:
            store = self.stores[directory] = MemorySegmentStore()
        return store

    def power_loss(self) -> None:
        """Every segment store falls back to what it last flushed."""
        for name in sorted(self.stores):
            self.stores[name].crash()
