"""`WalDisk`: a data directory's `Wal` as the log disk a `MultiRaft` host is given.

The host sees each data directory as a `raftlog.runtime.host.LogDisk` (satisfied structurally
here: this module does not import the runtime) and opens it through a `LogDisks` factory; in
production that factory is `WalDisks`, whose disks are real WALs with group commit and whose
group logs are `GroupLog`s. The in-memory twin is `raftlog.storage.memory`.

Blocking: `WalDisks.__call__` (recovery reads every segment), `WalDisk.open_group` (a founding
member's bootstrap snapshot is fsynced) and `WalDisk.close` (drains the writer) block; the host
runs them through its offload (a worker thread).
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

from raftlog.core.types import ConfState
from raftlog.storage.logstore import GroupLog
from raftlog.storage.repairs import RepairMarks
from raftlog.storage.wal import Wal
from raftlog.storage.walstats import WalOptions, WalStats


class WalDisk:
    """One data directory's WAL and the `GroupLog`s opened on it."""

    __slots__ = ("wal",)

    def __init__(self, wal: Wal) -> None:
        self.wal = wal
        """The directory's WAL (open; closed by `close`)."""

    @property
    def directory(self) -> str:
        return self.wal.directory

    def groups(self) -> tuple[int, ...]:
        """Groups with state in this directory (recovered or written since), sorted."""
        return self.wal.groups()

    def open_group(self, group: int, initial_conf: ConfState | None) -> GroupLog:
        """``group``'s log on this WAL (one owner per group; blocks: see the module docstring)."""
        return GroupLog(self.wal, group, initial_conf=initial_conf)

    def drop_group(self, group: int) -> Future[None]:
        """`Wal.drop_group`: a DROP record voids the group's history; its snapshot files go."""
        return self.wal.drop_group(group)

    @property
    def repairs(self) -> RepairMarks:
        return self.wal.repairs

    def segments(self) -> tuple[int, ...]:
        return self.wal.segments()

    def pinning_groups(self) -> tuple[int, ...]:
        return self.wal.pinning_groups()

    def stats(self) -> WalStats:
        return self.wal.stats()

    def close(self) -> None:
        """Drain and close the WAL (blocks)."""
        self.wal.close()


@dataclass(frozen=True, slots=True)
class WalDisks:
    """Opens (recovering) a directory's WAL with ``options``: the production `LogDisks`."""

    options: WalOptions = field(default_factory=WalOptions)

    def __call__(self, directory: str) -> WalDisk:
        return WalDisk(Wal.open(directory, self.options))
