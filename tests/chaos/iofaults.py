"""I/O faults planted in a LazyFS mount (`tests.chaos.lazyfs`): failing writes and fsyncs, a disk
that fills, slow and hung fsyncs. The fault state lives in the file system's process; the test
plants faults through `LazyFS.inject` / `LazyFS.clear_faults` (commands on its stdin).

A `Fault` applies to the files under the mount whose path (relative to the mount, with a leading
``/``) matches its ``glob`` (`fnmatch`; ``*`` also matches ``/``):

- ``op="write", kind="eio"``: the write returns EIO (nothing is written).
- ``op="fsync", kind="eio"``: ``fsync``/``fdatasync`` returns EIO. Like Linux after a failed
  writeback, the file's unsynced data is then *lost*: the dirty pages were dropped, so a later
  fsync that succeeds does not make them durable and the next `LazyFS.drop_unsynced` still takes
  them back (the file stays "poisoned" until that drop; the worst case, the one PostgreSQL's
  "fsyncgate" met). Whatever reads the file before the drop still sees the data (the page cache).
- ``op="write", kind="enospc"``: the write returns ENOSPC, at once (``limit`` None) or once the
  mount holds more than ``limit`` bytes of regular files (counting the write's growth): a disk
  that fills. While a limit is planted, ``statfs`` reports the space left under it, so
  ``os.statvfs`` on the mount sees the disk filling.
- ``op="fsync", kind="delay"``: each matching fsync takes ``seconds`` longer (a slow disk).
- ``op="fsync", kind="hang"``: each matching fsync blocks until the faults are cleared.

``once``: the fault fires once and is then gone; otherwise it stays until `clear_faults`.
Clearing also releases every hung fsync (which then succeeds). Other operations are untouched.
The FUSE loop runs multi-threaded so a slow or hung fsync does not stall reads and other files
(the LazyFS operations serialise on their lock; a planted delay waits outside it).
"""

from __future__ import annotations

import errno
import fnmatch
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

OPS = ("write", "fsync")
KINDS = {"write": ("eio", "enospc"), "fsync": ("eio", "delay", "hang")}


@dataclass(frozen=True, slots=True)
class Fault:
    """One planted fault (see the module docstring). Validated on construction."""

    op: str
    kind: str
    glob: str = "*"
    once: bool = False
    limit: int | None = None
    """``enospc`` only: the bytes the mount may hold (None: every matching write fails)."""
    seconds: float = 0.0
    """``delay`` only: added to each matching fsync."""

    def __post_init__(self) -> None:
        if self.op not in OPS or self.kind not in KINDS[self.op]:
            raise ValueError(f"no such fault: op={self.op!r} kind={self.kind!r}")
        if self.limit is not None and (self.kind != "enospc" or self.limit < 0):
            raise ValueError("limit is for enospc faults, and not negative")
        if self.seconds < 0 or (self.seconds and self.kind != "delay"):
            raise ValueError("seconds is for delay faults, and not negative")

    def matches(self, path: str) -> bool:
        return fnmatch.fnmatchcase(path, self.glob)

    @classmethod
    def of(cls, data: dict[str, Any]) -> Fault:
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class FaultState:
    """The faults planted in one mount and what they did; thread-safe (FUSE threads call the
    ``on_*`` hooks, the control thread plants and clears)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self._released = threading.Event()
        self.counters = {"write_eio": 0, "write_enospc": 0, "fsync_eio": 0, "fsync_delayed": 0}
        self.counters["fsync_hung"] = 0

    def plant(self, fault: Fault) -> None:
        with self._lock:
            if not self._faults:
                self._released = threading.Event()
            self._faults.append(fault)

    def clear(self) -> None:
        """Remove every fault and release every hung fsync."""
        with self._lock:
            self._faults.clear()
            self._released.set()

    def planted(self) -> list[Fault]:
        with self._lock:
            return list(self._faults)

    def limit(self) -> int | None:
        """The smallest byte limit planted (what ``statfs`` reports against), or None."""
        with self._lock:
            limits = [f.limit for f in self._faults if f.limit is not None]
        return min(limits) if limits else None

    def _take(self, op: str, path: str, fires: Callable[[Fault], bool]) -> Fault | None:
        """The first planted fault of ``op`` matching ``path`` that fires (removed if once)."""
        with self._lock:
            for i, f in enumerate(self._faults):
                if f.op == op and f.matches(path) and fires(f):
                    if f.once:
                        del self._faults[i]
                    return f
        return None

    def on_write(self, path: str, growth: int, used: Callable[[], int]) -> None:
        """Before a write growing the mount by ``growth`` bytes: raise its planted error."""

        def fires(f: Fault) -> bool:
            return f.kind == "eio" or f.limit is None or used() + growth > f.limit

        f = self._take("write", path, fires)
        if f is None:
            return
        code = errno.EIO if f.kind == "eio" else errno.ENOSPC
        with self._lock:
            self.counters["write_" + f.kind] += 1
        raise OSError(code, os.strerror(code))

    def on_fsync(self, path: str) -> bool:
        """Before an fsync of ``path`` (called outside the file system's lock): wait out a
        planted delay or hang; True when the fsync must fail with EIO."""
        f = self._take("fsync", path, lambda f: True)
        if f is None:
            return False
        if f.kind == "delay":
            with self._lock:
                self.counters["fsync_delayed"] += 1
            time.sleep(f.seconds)
            return False
        if f.kind == "hang":
            with self._lock:
                self.counters["fsync_hung"] += 1
                released = self._released
            released.wait()
            return False
        with self._lock:
            self.counters["fsync_eio"] += 1
        return True

    def describe(self) -> dict[str, Any]:
        with self._lock:
            return {"faults": [f.to_dict() for f in self._faults], **self.counters}


def used_bytes(root: str) -> int:
    """Bytes of regular files under ``root`` (what a planted ``limit`` counts)."""
    total = 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except FileNotFoundError:
                continue
            total += st.st_size
    return total


def limited_statfs(sv: dict[str, int], limit: int, used: int) -> dict[str, int]:
    """``statfs`` answer ``sv`` of the backing file system, shrunk to a disk of ``limit`` bytes
    holding ``used``."""
    bsize = sv["f_frsize"] or sv["f_bsize"] or 4096
    free = max(0, limit - used) // bsize
    return {**sv, "f_blocks": max(1, limit // bsize), "f_bfree": free, "f_bavail": free}
