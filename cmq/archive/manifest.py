"""The batch manifest: ``_manifests/<batch_id>.json`` under the output root, written whole under
a temporary name and renamed, so it exists only complete. A manifest is the job's commit record:
its segments' records are in its files, and only segments named in a manifest are ever marked
archived (by the job that wrote it, or by the recovery of a later run).

Two kinds (``kind``): ``archive`` (a batch of the archive job: the segments it stored and its
files) and ``compaction`` (`cmq.archive.compact`: the files it added and the files it
``retires``, whose rows are all in the added ones; it names no segments). A file is *live* when
a manifest names it in ``files`` and no compaction manifest retires it (`live_files`).

Versions: ``version`` is read before the rest (`decode`); one newer than `VERSION` is refused
with `NewerManifest` naming the file and both versions, before fields it may add or change are
looked at. Version 1: archive manifests only (``kind`` and ``retires`` absent). Version 2 adds
``kind`` and ``retires`` and the compaction kind. Archive manifests are still written as version
1 (`ARCHIVE_VERSION`, the same bytes: an older release's job keeps reading them); compaction
manifests are version 2, which an older release refuses as newer (it would not know that a
retired file is missing on purpose). A manifest that does not decode otherwise is
`msgspec.ValidationError`/`DecodeError` as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import msgspec

from cmq.archive.errors import NewerManifest

MANIFESTS = "_manifests"
VERSION = 2
"""The newest manifest version this release reads (and writes, for compaction manifests)."""
ARCHIVE_VERSION = 1
"""The version archive batches' manifests are written in (their layout is version 1's)."""
Kind = Literal["archive", "compaction"]
ARCHIVE: Kind = "archive"
COMPACTION: Kind = "compaction"
COMPACTION_PREFIX = "c-"
"""A compaction's id (its ``batch_id``) starts with this; an archive batch's with ``b-``."""


class ManifestFile(msgspec.Struct, frozen=True):
    """One Parquet file of the batch (path relative to the output root)."""

    path: str
    queue: str
    date: str
    rows: int
    bytes: int
    min_seq: int
    max_seq: int


class ManifestSegment(msgspec.Struct, frozen=True):
    """One archived segment: the listing's identity (seq range, count, checksum of its stored
    bytes), the rows found in the output and the files holding them (a file may also hold rows
    of other segments of its batch: the ones one Spark task read, of one queue and day)."""

    queue: str
    first_seq: int
    last_seq: int
    count: int
    checksum: str
    rows: int
    min_seq: int | None
    max_seq: int | None
    files: list[str]


class Manifest(msgspec.Struct, frozen=True, omit_defaults=True):
    """``batch_id``: the archive batch or the compaction (``c-...``) that wrote it; ``rows`` and
    ``bytes``: of ``files``. ``kind`` and ``retires`` (version 2) are omitted from the JSON at
    their defaults, so an archive manifest keeps version 1's bytes."""

    version: int
    batch_id: str
    created_at_ms: int
    root: str
    rows: int
    bytes: int
    segments: list[ManifestSegment]
    files: list[ManifestFile]
    kind: Kind = ARCHIVE
    retires: list[ManifestFile] = msgspec.field(default_factory=list)
    """Compaction only: the files whose rows ``files`` now hold (removed after the commit)."""


def manifest_path(batch_id: str) -> str:
    return f"{MANIFESTS}/{batch_id}.json"


def temp_path(batch_id: str) -> str:
    """Where a manifest is written before its rename (``_`` prefix: readers skip it)."""
    return f"{MANIFESTS}/_tmp-{batch_id}.json"


def encode(m: Manifest) -> bytes:
    return msgspec.json.format(msgspec.json.encode(m), indent=2) + b"\n"


class _Version(msgspec.Struct, frozen=True):
    version: int


def decode(data: bytes, path: str = "manifest") -> Manifest:
    """The manifest in ``data`` (read from ``path``, named in errors); `NewerManifest` when a
    newer release wrote it."""
    head = msgspec.json.decode(data, type=_Version)
    if head.version > VERSION:
        raise NewerManifest(
            f"{path}: archive manifest version {head.version} is from a newer release than this "
            f"one, which reads versions up to {VERSION}: run the archive job of a newer release"
        )
    m = msgspec.json.decode(data, type=Manifest)
    if m.version < 2 and (m.kind != ARCHIVE or m.retires):
        raise msgspec.ValidationError(f"{path}: version {m.version} has no kind or retires")
    return m


def retired(manifests: Iterable[Manifest]) -> set[str]:
    """The paths that a compaction manifest among ``manifests`` retires."""
    return {f.path for m in manifests for f in m.retires}


def live_files(manifests: Iterable[Manifest]) -> list[ManifestFile]:
    """The files of ``manifests`` no compaction among them retires, by path (see the module
    docstring). A retired file stays retired: paths are never reused (each holds its batch)."""
    ms = list(manifests)
    gone = retired(ms)
    named = {f.path: f for m in ms for f in m.files}
    return [f for path, f in sorted(named.items()) if path not in gone]
