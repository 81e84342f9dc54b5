"""LazyFS: what survives `drop_unsynced` (a simulated power loss) and what does not."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog.storage.files import atomic_write
from tests.chaos.lazyfs import LazyFS, unavailable_reason
from tests.chaos.mountio import fsync_path, write

_REASON = unavailable_reason()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(_REASON is not None, reason=f"LazyFS unavailable: {_REASON}"),
]


@pytest.fixture
def fs(tmp_path: Path) -> Iterator[LazyFS]:
    with LazyFS(tmp_path / "disk", tmp_path / "mnt") as lazy:
        yield lazy


def durable_file(fs: LazyFS, name: str, data: bytes) -> Path:
    """A file whose data and name are both durable."""
    p = fs.mount / name
    write(p, data, sync=True)
    fsync_path(p.parent)
    return p


def test_unsynced_write_is_lost(fs: LazyFS) -> None:
    p = durable_file(fs, "f", b"durable")
    write(p, b"+volatile", append=True)
    assert p.read_bytes() == b"durable+volatile"
    report = fs.drop_unsynced()
    assert p.read_bytes() == b"durable"
    assert report["files_reverted"] == 1 and report["bytes_dropped"] == len(b"+volatile")


def test_torn_drop_keeps_a_prefix_of_the_appends(fs: LazyFS) -> None:
    p = durable_file(fs, "wal", b"durable|")
    write(p, b"0123456789" * 10, append=True)
    report = fs.drop_unsynced(torn_seed=5)
    kept = p.read_bytes()
    assert kept.startswith(b"durable|") and len(kept) < len(b"durable|") + 100
    assert (b"durable|" + b"0123456789" * 10).startswith(kept)
    assert report["bytes_dropped"] == len(b"durable|") + 100 - len(kept)


def test_fsynced_write_survives(fs: LazyFS) -> None:
    p = durable_file(fs, "f", b"one")
    write(p, b"two", append=True, sync=True)
    fs.drop_unsynced()
    assert p.read_bytes() == b"onetwo"


def test_overwrites_and_truncation_are_undone(fs: LazyFS) -> None:
    p = durable_file(fs, "f", b"0123456789")
    fd = os.open(p, os.O_RDWR)
    try:
        os.pwrite(fd, b"xx", 2)
        os.ftruncate(fd, 4)
        os.pwrite(fd, b"yyyyyyyyyyyy", 4)
        os.pwrite(fd, b"z", 1)
    finally:
        os.close(fd)
    assert p.read_bytes() == b"0zxxyyyyyyyyyyyy"
    fs.drop_unsynced()
    assert p.read_bytes() == b"0123456789"


def test_new_file_needs_a_directory_fsync(fs: LazyFS) -> None:
    synced_data_only = fs.mount / "a"
    write(synced_data_only, b"data fsynced, name not", sync=True)
    named_only = fs.mount / "b"
    write(named_only, b"name fsynced, data not")
    fsync_path(fs.mount)
    late = fs.mount / "c"
    write(late, b"created after the directory fsync", sync=True)
    report = fs.drop_unsynced()
    assert sorted(os.listdir(fs.mount)) == ["a", "b"]
    assert synced_data_only.read_bytes() == b"data fsynced, name not"
    assert named_only.read_bytes() == b""  # the name survived, the data did not
    assert report["entries_removed"] == ["/c"]


def test_rename_without_directory_fsync_is_undone(fs: LazyFS) -> None:
    final = durable_file(fs, "snap", b"old")
    tmp = fs.mount / "snap.tmp"
    write(tmp, b"new", sync=True)
    os.replace(tmp, final)
    assert final.read_bytes() == b"new"
    fs.drop_unsynced()
    # Neither the creation of the temporary file nor the rename reached the disk.
    assert os.listdir(fs.mount) == ["snap"]
    assert final.read_bytes() == b"old"


def test_rename_with_directory_fsync_survives(fs: LazyFS) -> None:
    final = durable_file(fs, "snap", b"old")
    atomic_write(str(final), b"new")  # write tmp, fsync, rename, fsync the directory
    fs.drop_unsynced()
    assert os.listdir(fs.mount) == ["snap"]
    assert final.read_bytes() == b"new"


def test_rename_without_file_fsync_leaves_an_empty_file(fs: LazyFS) -> None:
    """The classic bug: rename + directory fsync but no fsync of the new file's data."""
    final = durable_file(fs, "snap", b"old")
    tmp = fs.mount / "snap.tmp"
    write(tmp, b"new")
    os.replace(tmp, final)
    fsync_path(fs.mount)
    fs.drop_unsynced()
    assert final.read_bytes() == b""


def test_unlink_without_directory_fsync_is_undone(fs: LazyFS) -> None:
    p = durable_file(fs, "wal-1.log", b"records")
    write(p, b"+unsynced", append=True)
    p.unlink()
    fs.drop_unsynced()
    assert p.read_bytes() == b"records"
    p.unlink()
    fsync_path(fs.mount)
    fs.drop_unsynced()
    assert not p.exists()


def test_new_directory_needs_its_parent_fsynced(fs: LazyFS) -> None:
    d = fs.mount / "segments" / "q"
    d.mkdir(parents=True)
    write(d / "1.seg", b"x", sync=True)
    fsync_path(d)
    fsync_path(d.parent)  # "segments" knows "q", but the root never learnt "segments"
    fs.drop_unsynced()
    assert os.listdir(fs.mount) == []
    d.mkdir(parents=True)
    write(d / "1.seg", b"x", sync=True)
    for p in (d, d.parent, fs.mount):
        fsync_path(p)
    fs.drop_unsynced()
    assert (d / "1.seg").read_bytes() == b"x"


def test_nothing_pending_after_a_drop_and_state_is_in_the_backing_dir(fs: LazyFS) -> None:
    p = durable_file(fs, "f", b"abc")
    write(p, b"d", append=True)
    assert fs.stats()["unsynced_files"] == 1
    fs.drop_unsynced()
    st = fs.stats()
    assert st["unsynced_files"] == 0 and st["unsynced_dirs"] == [] and st["drops"] == 1
    assert (fs.backing / "f").read_bytes() == b"abc"
    # The trash that kept replaced files alive is emptied once nothing needs it.
    assert os.listdir(str(fs.backing) + ".lazyfs-trash") == []
    fs.stop()
    assert not os.path.ismount(fs.mount)
    assert (fs.backing / "f").read_bytes() == b"abc"
