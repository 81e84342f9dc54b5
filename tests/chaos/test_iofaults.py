"""The I/O fault layer of LazyFS (`tests.chaos.iofaults`): each planted fault is observed by a
plain Python writer on the mount, and goes away when cleared."""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.chaos.iofaults import Fault, FaultState
from tests.chaos.lazyfs import LazyFS, unavailable_reason
from tests.chaos.mountio import append, fsync_path

_REASON = unavailable_reason()
_needs = pytest.mark.skipif(_REASON is not None, reason=f"LazyFS unavailable: {_REASON}")


def needs_fuse(f: Callable[..., None]) -> Callable[..., None]:
    """A test on a real mount (slow, like the other LazyFS tests)."""
    marked: Callable[..., None] = pytest.mark.slow(_needs(f))
    return marked


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[LazyFS]:
    with LazyFS(tmp_path / "disk", tmp_path / "mnt") as lazy:
        yield lazy


# -- the state, without a mount ------------------------------------------------------------------
def test_fault_validation() -> None:
    with pytest.raises(ValueError):
        Fault("fsync", "enospc")
    with pytest.raises(ValueError):
        Fault("write", "eio", limit=10)
    with pytest.raises(ValueError):
        Fault("fsync", "eio", seconds=1)
    assert Fault.of(Fault("write", "enospc", "/wal-*", limit=5).to_dict()).limit == 5


def test_state_once_glob_and_limit() -> None:
    st = FaultState()
    st.plant(Fault("fsync", "eio", glob="/g1/*", once=True))
    assert not st.on_fsync("/g2/wal")
    assert st.on_fsync("/g1/wal")
    assert not st.on_fsync("/g1/wal")  # once: gone
    st.plant(Fault("write", "enospc", limit=100))
    st.on_write("/f", 50, lambda: 50)  # exactly full: fits
    with pytest.raises(OSError) as e:
        st.on_write("/f", 1, lambda: 100)
    assert e.value.errno == errno.ENOSPC and st.limit() == 100
    st.clear()
    st.on_write("/f", 1, lambda: 100)
    assert st.counters["fsync_eio"] == 1 and st.counters["write_enospc"] == 1


# -- through the mount -----------------------------------------------------------------------------
@needs_fuse
def test_fsync_eio_is_seen_and_loses_the_unsynced_data(fs: LazyFS) -> None:
    p = fs.mount / "wal"
    append(p, b"durable|", sync=True)
    fsync_path(fs.mount)
    fs.inject(Fault("fsync", "eio", glob="/wal", once=True))
    append(p, b"lost")
    with pytest.raises(OSError) as e:
        fsync_path(p)
    assert e.value.errno == errno.EIO
    fsync_path(p)  # a retry "succeeds" (once), as on Linux after the pages were dropped...
    assert p.read_bytes() == b"durable|lost"  # ...and the page cache still shows the data
    fs.drop_unsynced()
    assert p.read_bytes() == b"durable|"  # but it never reached the disk
    assert fs.faults()["fsync_eio"] == 1


@needs_fuse
def test_write_eio_until_cleared_and_glob(fs: LazyFS) -> None:
    fs.inject(Fault("write", "eio", glob="/wal-*"))
    append(fs.mount / "other", b"fine")
    for _ in range(2):
        with pytest.raises(OSError) as e:
            append(fs.mount / "wal-1.log", b"x")
        assert e.value.errno == errno.EIO
    fs.clear_faults()
    append(fs.mount / "wal-1.log", b"x")
    assert (fs.mount / "wal-1.log").read_bytes() == b"x"
    assert (fs.mount / "other").read_bytes() == b"fine"


@needs_fuse
def test_a_disk_that_fills(fs: LazyFS) -> None:
    append(fs.mount / "a", b"x" * 1000)
    fs.inject(Fault("write", "enospc", limit=1500))
    sv = os.statvfs(fs.mount)
    assert sv.f_bavail * sv.f_frsize <= 500  # statvfs sees the space left under the limit
    append(fs.mount / "b", b"y" * 400)
    with pytest.raises(OSError) as e:
        append(fs.mount / "b", b"z" * 200)
    assert e.value.errno == errno.ENOSPC
    assert (fs.mount / "b").read_bytes() == b"y" * 400  # nothing of the refused write
    (fs.mount / "a").unlink()  # space frees up
    append(fs.mount / "b", b"z" * 200)
    fs.clear_faults()
    assert os.statvfs(fs.mount).f_bavail * os.statvfs(fs.mount).f_frsize > 10_000


@needs_fuse
def test_enospc_at_once(fs: LazyFS) -> None:
    fs.inject(Fault("write", "enospc", once=True))
    with pytest.raises(OSError) as e:
        append(fs.mount / "f", b"x")
    assert e.value.errno == errno.ENOSPC
    append(fs.mount / "f", b"x")


@needs_fuse
def test_slow_fsync_and_reads_go_on(fs: LazyFS) -> None:
    p = fs.mount / "f"
    append(p, b"data")
    fs.inject(Fault("fsync", "delay", seconds=0.5))
    start = time.monotonic()
    fsync_path(p)
    assert time.monotonic() - start >= 0.45
    assert fs.faults()["fsync_delayed"] == 1


@needs_fuse
def test_hung_fsync_until_cleared(fs: LazyFS) -> None:
    p = fs.mount / "f"
    append(p, b"data")
    fsync_path(fs.mount)  # the name is durable; the data waits for the hung fsync
    fs.inject(Fault("fsync", "hang", glob="/f"))
    done = threading.Event()

    def sync() -> None:
        fsync_path(p)
        done.set()

    t = threading.Thread(target=sync)
    t.start()
    assert not done.wait(0.5)
    assert p.read_bytes() == b"data"  # the mount still serves others meanwhile
    fs.clear_faults()
    assert done.wait(5)
    t.join()
    fs.drop_unsynced()
    assert p.read_bytes() == b"data"  # the released fsync made it durable
