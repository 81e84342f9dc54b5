"""LazyFS in Python: a FUSE passthrough file system that can forget everything not fsynced; this
module is the handle tests use (`LazyFS`), the file system and its undo log are
`tests.chaos.lazyops`.

A power loss keeps only what reached the disk: file data that was fsynced, and directory entries
whose directory was fsynced. The mount passes every operation through to an ordinary *backing*
directory (so reads see the volatile state, the page cache) and keeps beside it an undo log of
what a power loss would take back; `LazyFS.drop_unsynced` (call it once the process using the
mount is dead) applies it. What the model keeps and does not is said in `tests.chaos.lazyops`.

I/O faults (failing writes and fsyncs, a disk that fills, slow and hung fsyncs) are planted with
`LazyFS.inject`; `tests.chaos.iofaults` holds their state and says what each does.

The file system runs in its own process (``python -m tests.chaos.lazyops BACKING MOUNT``, started
by `LazyFS.start`); the handle sends it commands, one per line, on its stdin and reads one JSON
line of answer to each from its stdout.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tests.chaos.iofaults import Fault
from tests.chaos.lazyops import FUSERMOUNT, LazyOperations

__all__ = ["FUSERMOUNT", "LazyFS", "LazyFSError", "LazyOperations", "unavailable_reason"]


def unavailable_reason() -> str | None:
    """Why a LazyFS cannot be mounted here, or None when it can."""
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (no FUSE in this kernel or container)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not accessible to this user"
    if shutil.which(FUSERMOUNT) is None:
        return f"{FUSERMOUNT} is not installed (apt-get install fuse3)"
    if ctypes.util.find_library("fuse3") is None:
        return "libfuse3 is not installed (apt-get install fuse3)"
    try:
        import mfusepy  # type: ignore[import-untyped]  # noqa: F401
    except (ImportError, OSError) as e:
        return f"mfusepy is not importable: {e}"
    return None


# -- the handle used by tests (parent process) ---------------------------------------------------
class LazyFSError(RuntimeError):
    pass


class LazyFS:
    """``LazyFS(backing_dir, mount_dir)``: `start` mounts ``backing_dir`` at ``mount_dir``;
    `drop_unsynced` forgets what was not fsynced (after killing the process that uses it);
    `stop` unmounts. The backing directory keeps the (volatile) current state at all times."""

    def __init__(self, backing_dir: str | os.PathLike[str], mount_dir: str | os.PathLike[str]):
        self.backing = Path(backing_dir)
        self.mount = Path(mount_dir)
        self.proc: subprocess.Popen[str] | None = None
        self.log_path = self.backing.parent / (self.backing.name + ".lazyfs.log")
        self._lock = threading.Lock()

    def __enter__(self) -> LazyFS:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout: float = 10.0) -> None:
        reason = unavailable_reason()
        if reason is not None:
            raise LazyFSError(reason)
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mount.mkdir(parents=True, exist_ok=True)
        if os.path.ismount(self.mount):
            _unmount(self.mount)
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child process
        try:
            root = str(Path(__file__).resolve().parents[2])  # the repository (for -m)
            path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.lazyops", str(self.backing), str(self.mount)],
                env={**os.environ, "PYTHONPATH": path},
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while not os.path.ismount(self.mount):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise LazyFSError(f"mount at {self.mount} failed; see {self.log_path}")
            time.sleep(0.02)

    def _command(self, cmd: str) -> dict[str, Any]:
        proc = self.proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            raise LazyFSError("not started")
        with self._lock:
            proc.stdin.write(cmd + "\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
        if not line:
            raise LazyFSError(f"the file system process died; see {self.log_path}")
        reply: dict[str, Any] = json.loads(line)
        if not reply.pop("ok"):
            raise LazyFSError(f"{cmd}: {reply.get('error')}")
        return reply

    def drop_unsynced(self, torn_seed: int | None = None) -> dict[str, Any]:
        """Forget every write, creation, rename and removal not made durable by an fsync.

        Call it only once every process using the mount is dead (as after a power loss).
        Returns what was taken back (entries removed/restored, files reverted, bytes dropped).
        With ``torn_seed`` every file keeps a random prefix of its unsynced appends (a torn
        tail: some pages reached the disk, in order, before the power went).
        """
        return self._command("drop" if torn_seed is None else f"drop-torn {int(torn_seed)}")

    def stats(self) -> dict[str, Any]:
        """Unsynced files and directories right now, and operation counters."""
        return self._command("stats")

    def inject(self, fault: Fault) -> dict[str, Any]:
        """Plant ``fault`` (`tests.chaos.iofaults`); returns the faults planted and counters."""
        return self._command("fault " + json.dumps(fault.to_dict()))

    def clear_faults(self) -> dict[str, Any]:
        """Remove every planted fault and release hung fsyncs."""
        return self._command("clear-faults")

    def faults(self) -> dict[str, Any]:
        """The faults planted and how often each kind fired."""
        return self._command("faults")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        _unmount(self.mount)
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            _unmount(self.mount)
        if proc.stdout is not None:
            proc.stdout.close()


def _unmount(mount: Path) -> None:
    subprocess.run([FUSERMOUNT, "-u", "-z", str(mount)], check=False, capture_output=True)
