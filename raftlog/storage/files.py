"""File-level helpers: committing a file by rename, directory fsync, names of WAL and snapshot
files, and the snapshot data file format.

Every file that is committed by rename goes through `atomic_write`, so a crash leaves either the
old or the new content under the final name, never a mix and never an empty file.

Snapshot data file: ``[4s magic][u32 crc32][u64 group][u64 index][u64 term][u64 length][data]``
(big endian; the crc covers everything after it). The magic ``CMQS`` is layout version 1
(`SNAPSHOT_FILE_VERSION`, written unchanged since release 0.1.0). A later layout keeps the
prefix ``CMQ`` and puts its version number, 2 to 9, in the magic's fourth byte: a reader
refuses such a file with `NewerFormat` naming it and both versions. Any other magic is
corruption (the magic is outside the checksum, and no single flipped bit of ``S`` gives a byte
from 2 to 9, so a damaged magic is never taken for a newer release's file).
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import zlib

from raftlog.errors import CorruptRecord, NewerFormat

WAL_NAME = re.compile(r"^wal-(\d{16})\.log$")
SNAP_NAME = re.compile(r"^(\d{20})-(\d{20})\.snap$")
SNAP_DIR = "snap"
TMP_SUFFIX = ".tmp"

_SNAP_MAGIC = b"CMQS"
_SNAP_FAMILY = b"CMQ"
SNAPSHOT_FILE_VERSION = 1
"""The snapshot file layout this release writes and reads; carried implicitly by the magic."""
_NEWER_VERSIONS = (2, 9)
"""The fourth magic bytes a later layout may use (see the module docstring)."""
_SNAP_HEAD = struct.Struct(">4sIQQQQ")  # magic, crc32 of the rest, group, index, term, data length


def fsync_dir(path: str) -> None:
    """Make the directory entries of ``path`` durable (creations, renames, removals)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new content.

    Steps: write ``path + ".tmp"``, fsync it, rename over ``path``, fsync the directory. The
    caller owns ``path``: two concurrent writers of the same path are a bug. On failure the
    temporary file is removed and the exception propagates; ``path`` is untouched.
    """
    tmp = path + TMP_SUFFIX
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def wal_name(seq: int) -> str:
    """File name of WAL segment ``seq``; names sort in sequence order."""
    return f"wal-{seq:016d}.log"


def snapshot_name(group: int, index: int) -> str:
    """File name (inside `SNAP_DIR`) of ``group``'s snapshot data at ``index``."""
    return f"{group:020d}-{index:020d}.snap"


def encode_snapshot_file(group: int, index: int, term: int, data: bytes) -> bytes:
    """Snapshot data file contents: a checksummed header naming what the data belongs to."""
    rest = struct.pack(">QQQQ", group, index, term, len(data))
    crc = zlib.crc32(data, zlib.crc32(rest))
    return _SNAP_HEAD.pack(_SNAP_MAGIC, crc, group, index, term, len(data)) + data


def decode_snapshot_file(path: str, raw: bytes, group: int, index: int, term: int) -> bytes:
    """The data in a snapshot file; raises `NewerFormat` for a later layout (see the module
    docstring), `CorruptRecord` unless it is intact and belongs to ``group`` at
    ``index``/``term``."""
    if len(raw) < _SNAP_HEAD.size:
        raise CorruptRecord(path, 0, "snapshot file shorter than its header")
    magic, crc, g, i, t, n = _SNAP_HEAD.unpack_from(raw)
    data = raw[_SNAP_HEAD.size :]
    if magic != _SNAP_MAGIC:
        if magic[:3] == _SNAP_FAMILY and _NEWER_VERSIONS[0] <= magic[3] <= _NEWER_VERSIONS[1]:
            raise NewerFormat(
                path,
                f"snapshot file layout {magic[3]} (magic {magic!r})",
                f"snapshot file version {SNAPSHOT_FILE_VERSION} (magic {_SNAP_MAGIC!r})",
            )
        raise CorruptRecord(path, 0, "bad snapshot file magic")
    if n != len(data) or zlib.crc32(data, zlib.crc32(raw[8 : _SNAP_HEAD.size])) != crc:
        raise CorruptRecord(path, 0, "snapshot file checksum mismatch")
    if (g, i, t) != (group, index, term):
        raise CorruptRecord(
            path, 0, f"snapshot file is for {g}@{i}/{t}, not {group}@{index}/{term}"
        )
    return data
