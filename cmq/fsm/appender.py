"""`Appender`: appends bytes to files on a background thread, in submission order (and
`make_dirs`, which creates directories and says which parents must be fsynced).

`cmq.fsm.segments.FileSegmentStore` hands it each batch's segment appends so that the event
loop never waits in ``write``: under a WAL that fsyncs continuously, the kernel throttles writers
of dirty pages, and a 1 MiB append could stall the loop for milliseconds (p99 ~12 ms measured
on this machine's disk while another thread fsynced 1 MiB records).

Contract: bytes submitted for a path reach it in submission order; after `drain` returns, every
byte submitted before the call is in the file (page cache; nothing is fsynced here). The owner
calls `drain` before it reads, sizes, truncates, removes or fsyncs a file it submitted to, and
`release` (after a drain) before it truncates or removes one, so the thread holds no descriptor
of a file being changed. At most ``max_bytes`` wait at once: `submit` blocks beyond that
(backpressure). A failed write is kept and raised, as `OSError`, by every later `submit` and
`drain`: the store stops loudly rather than lose an append. The thread starts on the first
submission and ends after ``idle`` seconds without work (so a store nobody closes leaves no
thread behind); `close` drains and ends it at once.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict, deque

DEFAULT_MAX_BYTES = 64 << 20


class Appender:
    """See the module docstring. Thread-safe."""

    def __init__(
        self, *, max_bytes: int = DEFAULT_MAX_BYTES, max_open: int = 64, idle: float = 2.0
    ) -> None:
        self._max_bytes = max(1, max_bytes)
        self._max_open = max(1, max_open)
        self._idle = idle
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[tuple[str, bytes]] = deque()
        self._queued_bytes = 0
        self._busy = False
        self._error: OSError | None = None
        self._thread: threading.Thread | None = None
        self._closing = False
        self._fds: OrderedDict[str, int] = OrderedDict()
        """The thread's own append descriptors (touched by the thread, or by others only while
        it is idle and the lock is held)."""

    def submit(self, path: str, data: bytes) -> None:
        """Queue ``data`` to be appended to ``path`` (created if missing)."""
        with self._cond:
            self._raise_error()
            while self._queued_bytes and self._queued_bytes + len(data) > self._max_bytes:
                self._cond.wait()
                self._raise_error()
            self._queue.append((path, data))
            self._queued_bytes += len(data)
            if self._thread is None:
                self._closing = False
                self._thread = threading.Thread(target=self._run, name="segment-appender")
                self._thread.daemon = True
                self._thread.start()
            self._cond.notify_all()

    def drain(self) -> None:
        """Wait until every submitted append is written."""
        with self._cond:
            while self._queue or self._busy:
                self._cond.wait()
            self._raise_error()

    def release(self, path: str) -> None:
        """Drain, then close the thread's descriptors of ``path`` and of every file under it
        (before they are truncated or removed)."""
        inside = path.rstrip(os.sep) + os.sep
        with self._cond:
            while self._queue or self._busy:
                self._cond.wait()
            for p in [p for p in self._fds if p == path or p.startswith(inside)]:
                os.close(self._fds.pop(p))
            self._raise_error()

    def close(self) -> None:
        """Drain, end the thread and close its descriptors; raises a kept write error."""
        with self._cond:
            while self._queue or self._busy:
                self._cond.wait()
            self._closing = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._cond:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            self._raise_error()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise OSError(self._error.errno, f"segment append failed: {self._error}")

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    if not self._cond.wait(self._idle) and not self._queue:
                        self._closing = True  # idle: end; the next submit starts a thread
                if not self._queue:
                    self._thread = None
                    self._cond.notify_all()
                    return
                path, data = self._queue.popleft()
                self._busy = True
            try:
                if self._error is None:
                    self._append(path, data)
            except OSError as e:
                self._error = e
            finally:
                with self._cond:
                    self._busy = False
                    self._queued_bytes -= len(data)
                    self._cond.notify_all()

    def _append(self, path: str, data: bytes) -> None:
        fd = self._fds.get(path)
        if fd is None:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._fds[path] = fd
            while len(self._fds) > self._max_open:
                _, old = self._fds.popitem(last=False)
                os.close(old)
        else:
            self._fds.move_to_end(path)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]


def make_dirs(path: str) -> list[str]:
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
