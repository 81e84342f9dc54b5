"""The batch manifest: ``_manifests/<batch_id>.json`` under the output root, written whole under
a temporary name and renamed, so it exists only complete. A manifest is the job's commit record:
its segments' records are in its files, and only segments named in a manifest are ever marked
archived (by the job that wrote it, or by the recovery of a later run).

Versions: ``version`` (`VERSION`) is read before the rest (`decode`); a newer one is refused with
`NewerManifest` naming the file and both versions, before fields it may add or change are
looked at. A manifest that does not decode otherwise is `msgspec.ValidationError`/`DecodeError`
as before.
"""

from __future__ import annotations

import msgspec

from cmq.archive.errors import NewerManifest

MANIFESTS = "_manifests"
VERSION = 1


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


class Manifest(msgspec.Struct, frozen=True):
    version: int
    batch_id: str
    created_at_ms: int
    root: str
    rows: int
    bytes: int
    segments: list[ManifestSegment]
    files: list[ManifestFile]


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
            f"one, which reads version {VERSION}: run the archive job of a newer release"
        )
    return msgspec.json.decode(data, type=Manifest)
