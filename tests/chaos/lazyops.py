"""The LazyFS file system itself: passthrough operations with an undo log of what a power loss
would take back (`tests.chaos.lazyfs` mounts it and is the handle tests use).

A power loss keeps only what reached the disk: file data that was ``fsync``/``fdatasync``ed, and
directory entries (creations, renames, removals) whose directory was fsynced. This file system
models that on top of an ordinary directory, the *backing* directory:

- Every operation goes straight through to the backing directory, so reads see the volatile
  state (the page cache) exactly as on a real disk.
- Beside it the file system keeps an **undo log** of what a power loss would take back:

  * per file (by backing inode): its size at the last fsync and the old bytes of every range
    overwritten or truncated since (appends need nothing: restoring the size drops them);
    ``fsync``/``fdatasync`` on the file forgets its undo log.
  * per directory: its entries (name -> inode) as of its last fsync, captured before the first
    change after it; every file among them is kept alive by a hard link in a trash directory
    beside the backing directory (``<backing>.lazyfs-trash``), so an unlinked or replaced file
    can be put back. ``fsync`` on the directory forgets the capture.

- `LazyOperations.drop` (`tests.chaos.lazyfs.LazyFS.drop_unsynced`, called once the process
  using the mount is dead) applies the undo log: every captured directory gets back exactly
  its durable entries (entries created since are removed, directories among them recursively;
  removed or replaced files are linked back), then every file gets back its durable size and
  bytes.

What a real disk might keep and this model does not: nothing is ever "lucky" (all unsynced
state is lost, never part of it; only ``drop_unsynced(torn_seed=...)`` keeps a random prefix of
each file's unsynced appends, a torn tail), and ``fsync`` on a new file does not make its name
durable (POSIX asks for the directory fsync; ext4 often does it anyway). Limits, all outside
what cmq does: ``rmdir`` and directory renames take effect durably at once; cross-directory file
renames are undone per directory; extended attributes, modes and times are passed through and
never undone. Backing-file fsyncs are not performed (the backing directory stands for the disk).

I/O faults (failing writes and fsyncs, a disk that fills, slow and hung fsyncs) are planted in
`LazyOperations.faults` (a `tests.chaos.iofaults.FaultState`), which says what each does.

It runs in its own process (``python -m tests.chaos.lazyops BACKING MOUNT``, started by
`tests.chaos.lazyfs.LazyFS.start`); it takes commands, one per line, on its stdin (``drop``,
``drop-torn SEED``, ``stats``, ``fault JSON``, ``clear-faults``, ``faults``) and answers each
with one JSON line on its stdout. FUSE runs with direct I/O and zero cache timeouts, so the
kernel never serves stale pages or sizes after a drop; its threads serialise on the operations'
lock (only a planted fsync delay waits outside it). I/O faults are `tests.chaos.iofaults`'.
"""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import IO, Any

from tests.chaos.iofaults import Fault, FaultState, limited_statfs, used_bytes

FUSERMOUNT = "fusermount3"


# -- the file system (runs in the child process) ---------------------------------------------------
@dataclass(slots=True)
class _FileUndo:
    """What a power loss takes back from one file: its durable size and the old bytes of every
    range overwritten since the last fsync, oldest first (applied newest first, so the oldest,
    durable bytes win)."""

    size: int
    chunks: list[tuple[int, bytes]] = field(default_factory=list)


Entry = tuple[int, bool]  # (inode, is_dir)


class LazyOperations:
    """The passthrough operations with the undo log (see the module docstring).

    Every method that reads or changes the undo log runs under one lock, which orders the FUSE
    threads and the control thread's `drop`; a planted fsync delay or hang waits before it.
    """

    use_ns = True

    def __init__(self, backing: str) -> None:
        self._root = os.path.realpath(backing)
        self._trash = self._root.rstrip("/") + ".lazyfs-trash"
        os.makedirs(self._trash, exist_ok=True)
        for name in os.listdir(self._trash):  # a previous run's leftovers
            os.unlink(os.path.join(self._trash, name))
        self._mutex = threading.RLock()
        self._files: dict[int, _FileUndo] = {}
        self._dirs: dict[str, dict[str, Entry]] = {}
        self._append: dict[int, bool] = {}
        self._counters = {"writes": 0, "fsyncs": 0, "fsyncdirs": 0, "drops": 0}
        self.faults = FaultState()
        self._poisoned: set[int] = set()  # inodes whose unsynced data a failed fsync lost

    # -- helpers -----------------------------------------------------------------------------
    def _full(self, path: str) -> str:
        return self._root + path if path != "/" else self._root

    @staticmethod
    def _parent(path: str) -> str:
        parent = os.path.dirname(path)
        return parent or "/"

    def _keep(self, full: str, ino: int) -> None:
        """Keep inode ``ino`` (reachable at ``full``) alive in the trash."""
        t = os.path.join(self._trash, str(ino))
        if not os.path.lexists(t):
            os.link(full, t, follow_symlinks=False)

    def _capture(self, d: str) -> None:
        """Record directory ``d``'s entries before its first change since its last fsync."""
        if d in self._dirs:
            return
        entries: dict[str, Entry] = {}
        with os.scandir(self._full(d)) as it:
            for e in it:
                is_dir = e.is_dir(follow_symlinks=False)
                entries[e.name] = (e.inode(), is_dir)
                if not is_dir:
                    self._keep(e.path, e.inode())
        self._dirs[d] = entries

    def _before_write(self, fd: int, offset: int, length: int) -> None:
        st = os.fstat(fd)
        undo = self._files.get(st.st_ino)
        if undo is None:
            undo = self._files[st.st_ino] = _FileUndo(st.st_size)
        end = min(offset + length, undo.size)
        if offset < end:
            undo.chunks.append((offset, os.pread(fd, end - offset, offset)))

    def _before_truncate(self, fd: int, length: int) -> None:
        st = os.fstat(fd)
        undo = self._files.get(st.st_ino)
        if undo is None:
            undo = self._files[st.st_ino] = _FileUndo(st.st_size)
        end = min(st.st_size, undo.size)
        if length < end:
            undo.chunks.append((length, os.pread(fd, end - length, length)))

    def _gc_trash(self) -> None:
        live = {ino for entries in self._dirs.values() for ino, is_dir in entries.values()}
        for name in os.listdir(self._trash):
            if int(name) not in live:
                os.unlink(os.path.join(self._trash, name))

    # -- attributes and reads ----------------------------------------------------------------
    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        with self._mutex:
            st = os.fstat(fh) if fh is not None else os.lstat(self._full(path))
        return {
            "st_mode": st.st_mode,
            "st_nlink": st.st_nlink,
            "st_size": st.st_size,
            "st_uid": st.st_uid,
            "st_gid": st.st_gid,
            "st_blocks": st.st_blocks,
            "st_atime": st.st_atime_ns,
            "st_mtime": st.st_mtime_ns,
            "st_ctime": st.st_ctime_ns,
        }

    def readdir(self, path: str, fh: int) -> list[str]:
        with self._mutex:
            return [".", "..", *os.listdir(self._full(path))]

    def readlink(self, path: str) -> str:
        return os.readlink(self._full(path))

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._full(path), amode):
            raise OSError(errno.EACCES, "access denied")
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        sv = os.statvfs(self._full(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files")
        out = {k: getattr(sv, k) for k in (*keys, "f_flag", "f_frsize", "f_namemax")}
        limit = self.faults.limit()
        return out if limit is None else limited_statfs(out, limit, used_bytes(self._root))

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        with self._mutex:
            return os.pread(fh, size, offset)

    # -- files ---------------------------------------------------------------------------------
    @staticmethod
    def _backing_flags(flags: int) -> int:
        # Read access too: the undo log reads what a write overwrites.
        if flags & os.O_ACCMODE == os.O_WRONLY:
            flags = (flags & ~os.O_ACCMODE) | os.O_RDWR
        return flags

    def open(self, path: str, flags: int) -> int:
        with self._mutex:
            fd = os.open(self._full(path), self._backing_flags(flags) & ~os.O_CREAT)
            self._append[fd] = bool(flags & os.O_APPEND)
            return fd

    def create(self, path: str, mode: int, flags: int = os.O_WRONLY) -> int:
        with self._mutex:
            self._capture(self._parent(path))
            fd = os.open(self._full(path), self._backing_flags(flags) | os.O_CREAT, mode)
            self._append[fd] = bool(flags & os.O_APPEND)
            return fd

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self._mutex:
            self._counters["writes"] += 1
            size = os.fstat(fh).st_size
            at = size if self._append.get(fh) else offset
            growth = max(0, at + len(data) - size)
            self.faults.on_write(path, growth, lambda: used_bytes(self._root))
            self._before_write(fh, at, len(data))
            if self._append.get(fh):
                return os.write(fh, data)
            return os.pwrite(fh, data, offset)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        with self._mutex:
            fd = os.open(self._full(path), os.O_RDWR) if fh is None else fh
            try:
                self._before_truncate(fd, length)
                os.ftruncate(fd, length)
            finally:
                if fh is None:
                    os.close(fd)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0  # close() does not make anything durable

    def release(self, path: str, fh: int) -> int:
        with self._mutex:
            self._append.pop(fh, None)
            os.close(fh)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        failed = self.faults.on_fsync(path)  # a planted delay or hang waits outside the lock
        with self._mutex:
            self._counters["fsyncs"] += 1
            ino = os.fstat(fh).st_ino
            if failed:
                # The dirty pages are gone: no later fsync makes them durable (iofaults).
                self._poisoned.add(ino)
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            if ino not in self._poisoned:
                self._files.pop(ino, None)
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        with self._mutex:
            self._counters["fsyncdirs"] += 1
            if self._dirs.pop(path, None) is not None:
                self._gc_trash()
        return 0

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._full(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        os.chown(self._full(path), uid, gid, follow_symlinks=False)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        if times is None:
            os.utime(self._full(path), follow_symlinks=False)
        else:
            os.utime(self._full(path), ns=times, follow_symlinks=False)
        return 0

    # -- names ---------------------------------------------------------------------------------
    def mkdir(self, path: str, mode: int) -> int:
        with self._mutex:
            self._capture(self._parent(path))
            os.mkdir(self._full(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        with self._mutex:
            os.rmdir(self._full(path))
            # Durable at once (see the module docstring).
            parent = self._dirs.get(self._parent(path))
            if parent is not None:
                parent.pop(os.path.basename(path), None)
            for d in [d for d in self._dirs if d == path or d.startswith(path + "/")]:
                del self._dirs[d]
        return 0

    def unlink(self, path: str) -> int:
        with self._mutex:
            self._capture(self._parent(path))
            os.unlink(self._full(path))
        return 0

    def rename(self, old: str, new: str) -> int:
        with self._mutex:
            src, dst = self._parent(old), self._parent(new)
            self._capture(src)
            self._capture(dst)
            st = os.lstat(self._full(old))
            os.rename(self._full(old), self._full(new))
            if os.path.isdir(self._full(new)) and not os.path.islink(self._full(new)):
                # Directory renames are durable at once (see the module docstring).
                self._dirs[src].pop(os.path.basename(old), None)
                self._dirs[dst][os.path.basename(new)] = (st.st_ino, True)
                for d in [d for d in self._dirs if d == old or d.startswith(old + "/")]:
                    self._dirs[new + d[len(old) :]] = self._dirs.pop(d)
        return 0

    def link(self, target: str, source: str) -> int:
        with self._mutex:
            self._capture(self._parent(target))
            os.link(self._full(source), self._full(target), follow_symlinks=False)
        return 0

    def symlink(self, target: str, source: str) -> int:
        with self._mutex:
            self._capture(self._parent(target))
            os.symlink(source, self._full(target))
        return 0

    # -- power loss ----------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        with self._mutex:
            return {
                "unsynced_files": len(self._files),
                "unsynced_dirs": sorted(self._dirs),
                **self._counters,
            }

    def drop(self, torn_seed: int | None = None) -> dict[str, Any]:
        """Take back everything not fsynced; returns what was done. With ``torn_seed``, each
        file keeps a random prefix of what was appended past its durable size (pages written
        back before the power went: a torn tail)."""
        rng = random.Random(torn_seed)
        with self._mutex:
            report: dict[str, Any] = {
                "entries_removed": [],
                "entries_restored": [],
                "files_reverted": 0,
                "bytes_dropped": 0,
            }
            for d in sorted(self._dirs, key=len):  # parents first
                self._restore_dir(d, self._dirs[d], report)
            where = self._inode_paths()
            for ino, undo in self._files.items():
                path = where.get(ino)
                if path is None:
                    continue  # no name left: nothing can see it
                fd = os.open(path, os.O_WRONLY)
                try:
                    size = os.fstat(fd).st_size
                    keep = undo.size
                    if torn_seed is not None and size > undo.size:
                        keep += rng.randrange(size - undo.size)
                    report["bytes_dropped"] += max(0, size - keep)
                    os.ftruncate(fd, keep)
                    for offset, data in reversed(undo.chunks):
                        os.pwrite(fd, data, offset)
                finally:
                    os.close(fd)
                report["files_reverted"] += 1
            self._files.clear()
            self._poisoned.clear()
            self._dirs.clear()
            self._gc_trash()
            self._counters["drops"] += 1
            return report

    def _restore_dir(self, d: str, durable: dict[str, Entry], report: dict[str, Any]) -> None:
        full = self._full(d)
        if not os.path.isdir(full):
            return  # removed durably, or inside a directory that was never durable
        with os.scandir(full) as it:
            now = {e.name: (e.inode(), e.is_dir(follow_symlinks=False)) for e in it}
        for name, entry in now.items():
            if durable.get(name) == entry:
                continue
            path = os.path.join(full, name)
            if entry[1]:
                shutil.rmtree(path)
            else:
                os.unlink(path)
            report["entries_removed"].append(os.path.join(d, name))
        for name, (ino, is_dir) in durable.items():
            path = os.path.join(full, name)
            if is_dir or os.path.lexists(path):
                continue
            kept = os.path.join(self._trash, str(ino))
            if os.path.lexists(kept):
                os.link(kept, path, follow_symlinks=False)
                report["entries_restored"].append(os.path.join(d, name))

    def _inode_paths(self) -> dict[int, str]:
        """A path of every regular file by inode (the tree first, then the trash)."""
        out: dict[int, str] = {}
        for dirpath, _dirs, names in os.walk(self._root):
            for name in names:
                p = os.path.join(dirpath, name)
                out.setdefault(os.lstat(p).st_ino, p)
        for name in os.listdir(self._trash):
            out.setdefault(int(name), os.path.join(self._trash, name))
        return out


def _control(ops: LazyOperations, stdin: IO[str], stdout: IO[str], mount: str) -> None:
    """Serve commands from the parent; at EOF (the parent is gone) unmount."""
    for line in stdin:
        cmd = line.strip()
        try:
            if cmd == "drop":
                reply: dict[str, Any] = {"ok": True, **ops.drop()}
            elif cmd.startswith("drop-torn "):
                reply = {"ok": True, **ops.drop(int(cmd.split()[1]))}
            elif cmd == "stats":
                reply = {"ok": True, **ops.stats()}
            elif cmd.startswith("fault "):
                ops.faults.plant(Fault.of(json.loads(cmd[len("fault ") :])))
                reply = {"ok": True, **ops.faults.describe()}
            elif cmd == "clear-faults":
                ops.faults.clear()
                reply = {"ok": True, **ops.faults.describe()}
            elif cmd == "faults":
                reply = {"ok": True, **ops.faults.describe()}
            else:
                reply = {"ok": False, "error": f"unknown command {cmd!r}"}
        except Exception as e:  # reported to the parent, which raises
            reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        stdout.write(json.dumps(reply) + "\n")
        stdout.flush()
    subprocess.run([FUSERMOUNT, "-u", "-z", mount], check=False, capture_output=True)


def _main(backing: str, mount: str) -> None:
    import mfusepy  # type: ignore[import-untyped]

    ops = LazyOperations(backing)
    threading.Thread(target=_control, args=(ops, sys.stdin, sys.stdout, mount), daemon=True).start()
    mfusepy.FUSE(
        ops,
        mount,
        foreground=True,
        nothreads=False,
        direct_io=True,
        attr_timeout=0,
        entry_timeout=0,
        negative_timeout=0,
        fsname="lazyfs",
    )


if __name__ == "__main__":
    _main(sys.argv[1], sys.argv[2])
