"""File faults on a stopped cmq node's data directory (Jepsen's file nemesis: bit flips,
truncation, rollback to an earlier copy).

A data directory (``cmq serve --data-dir D``) holds three kinds of files:

- ``wal``: ``D/wal-<16 digits>.log``, the raftlog WAL segments (`raftlog.storage.files`),
  records ``[len][crc32][type][group][payload]``; recovery cuts a torn tail of the last segment
  and raises `CorruptRecord` for damage before it.
- ``snapshot``: ``D/snap/<group:020>-<index:020>.snap``, one per Raft group (the meta group 0
  and the data groups), a checksummed header and the state machine image.
- ``segment``: ``D/segments/g<group>/<queue>.<incarnation>/<first seq:020>.seg``, a queue's
  message records ``[len][crc32][payload]`` (`cmq.fsm.store`); not fsynced on apply, truncated
  back to the snapshot's recorded size on restore and re-applied from the log.

Every fault takes a ``random.Random`` (seeded by the caller: a run replays exactly) and returns
a one-line description of what it did. ``kind`` restricts the choice of file; ``where`` picks the
region: ``"any"`` (uniform), ``"head"`` (the first 64 bytes: a segment's first record, covered by
any snapshot that lists the segment; a WAL's first record, followed by valid ones), ``"middle"``
(the middle half) or ``"tail"`` (the last 64 bytes, where a WAL's last record lives).
"""

from __future__ import annotations

import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

FileKind = Literal["wal", "segment", "snapshot"]
Where = Literal["any", "head", "middle", "tail"]
KINDS: tuple[FileKind, ...] = ("wal", "segment", "snapshot")

_WAL = re.compile(r"^wal-\d{16}\.log$")
_SNAP = re.compile(r"^(\d{20})-(\d{20})\.snap$")
_SEG = re.compile(r"^\d{20}\.seg$")


@dataclass(frozen=True, slots=True)
class DataFile:
    path: Path
    kind: FileKind
    rel: str
    """The path relative to the data directory."""

    @property
    def size(self) -> int:
        return self.path.stat().st_size


class NoSuchFile(LookupError):
    """No file of the requested kind (or none that the fault can change)."""


def data_files(data_dir: str | os.PathLike[str], kind: FileKind | None = None) -> list[DataFile]:
    """Every WAL, snapshot and segment file of a data directory, sorted by path."""
    root = Path(data_dir)
    out: list[DataFile] = []
    for dirpath, _dirs, names in os.walk(root):
        d = Path(dirpath)
        rel_dir = d.relative_to(root)
        for name in names:
            k: FileKind | None = None
            if rel_dir == Path(".") and _WAL.match(name):
                k = "wal"
            elif rel_dir == Path("snap") and _SNAP.match(name):
                k = "snapshot"
            elif rel_dir.parts[:1] == ("segments",) and _SEG.match(name):
                k = "segment"
            if k is not None and (kind is None or k == kind):
                out.append(DataFile(d / name, k, str(rel_dir / name)))
    return sorted(out, key=lambda f: f.rel)


def snapshot_group(f: DataFile) -> int:
    """The Raft group a snapshot file belongs to."""
    m = _SNAP.match(f.path.name)
    assert m is not None, f
    return int(m.group(1))


def pick(
    data_dir: str | os.PathLike[str],
    rng: random.Random,
    kind: FileKind | None = None,
    *,
    nonempty: bool = True,
) -> DataFile:
    files = [f for f in data_files(data_dir, kind) if f.size > 0 or not nonempty]
    if not files:
        raise NoSuchFile(f"no {kind or 'data'} file in {data_dir}")
    return rng.choice(files)


def _offset(size: int, rng: random.Random, where: Where) -> int:
    if where == "head":
        return rng.randrange(min(64, size))
    if where == "middle":
        return rng.randrange(size // 4, max(size // 4 + 1, 3 * size // 4))
    if where == "tail":
        return rng.randrange(max(0, size - 64), size)
    return rng.randrange(size)


def bitflip(
    data_dir: str | os.PathLike[str],
    rng: random.Random,
    *,
    kind: FileKind | None = None,
    where: Where = "any",
    target: DataFile | None = None,
) -> str:
    """Flip one bit of one file (in place, size unchanged)."""
    f = target or pick(data_dir, rng, kind)
    offset = _offset(f.size, rng, where)
    bit = rng.randrange(8)
    with open(f.path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([byte ^ (1 << bit)]))
    return f"bitflip {f.kind} {f.rel} ({f.size} B): bit {bit} of byte {offset}"


def truncate(
    data_dir: str | os.PathLike[str],
    rng: random.Random,
    *,
    kind: FileKind | None = None,
    where: Where = "any",
    target: DataFile | None = None,
) -> str:
    """Cut one file short at a random offset (``where`` picks the region of the new end)."""
    f = target or pick(data_dir, rng, kind)
    size = f.size
    new = _offset(size, rng, where)
    os.truncate(f.path, new)
    return f"truncate {f.kind} {f.rel}: {size} B -> {new} B"


def copy_data_dir(data_dir: str | os.PathLike[str], dest: str | os.PathLike[str]) -> Path:
    """A copy of a (stopped) node's data directory, for a later `rollback`."""
    shutil.copytree(data_dir, dest, symlinks=True)
    return Path(dest)


def rollback(
    data_dir: str | os.PathLike[str],
    snapshot_copy: str | os.PathLike[str],
    rng: random.Random,
    *,
    kind: FileKind | None = None,
    chunk: bool | None = None,
) -> str:
    """Restore one file, or one chunk of it, from an earlier copy of the data directory.

    The file is one present in both (a snapshot file, whose name carries its index, is matched
    by group: the current one is replaced by the group's earlier snapshot, under the current
    name). ``chunk`` (random when None) restores a random byte range of the earlier copy at the
    same offset instead of the whole file; a whole-file rollback also restores its size.
    """
    old_files = {f.rel: f for f in data_files(snapshot_copy, kind)}
    pairs: list[tuple[DataFile, DataFile]] = []
    for f in data_files(data_dir, kind):
        if f.rel in old_files:
            pairs.append((f, old_files[f.rel]))
        elif f.kind == "snapshot":
            earlier = [
                o
                for o in old_files.values()
                if o.kind == "snapshot" and snapshot_group(o) == snapshot_group(f)
            ]
            if earlier:
                pairs.append((f, earlier[-1]))
    changed = [(f, o) for f, o in pairs if f.path.read_bytes() != o.path.read_bytes()]
    if not changed:
        raise NoSuchFile(f"no {kind or 'data'} file differs from the copy in {snapshot_copy}")
    f, old = rng.choice(changed)
    data = old.path.read_bytes()
    if chunk is None:
        chunk = rng.random() < 0.5
    if chunk and data:
        cur = f.path.read_bytes()
        # A range where the two differ, so that the rollback changes something.
        diff = [i for i in range(min(len(cur), len(data))) if cur[i] != data[i]]
        if diff:
            start = rng.choice(diff)
            length = rng.randint(1, min(4096, len(data) - start))
            with open(f.path, "r+b") as fh:
                fh.seek(start)
                fh.write(data[start : start + length])
            return (
                f"rollback chunk of {f.kind} {f.rel}: bytes {start}..{start + length} "
                f"from the copy's {old.rel}"
            )
    size = f.size
    shutil.copyfile(old.path, f.path)
    return f"rollback {f.kind} {f.rel} ({size} B) to the copy's {old.rel} ({len(data)} B)"


def rollback_all(data_dir: str | os.PathLike[str], snapshot_copy: str | os.PathLike[str]) -> str:
    """Replace the whole data directory with the earlier copy (a node restored from backup)."""
    shutil.rmtree(data_dir)
    shutil.copytree(snapshot_copy, data_dir, symlinks=True)
    return f"rollback of the whole data directory to {snapshot_copy}"
