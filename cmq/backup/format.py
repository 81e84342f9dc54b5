"""The backup directory's format (pure: encoding and checks; the files are written by
`cmq.backup.dump` and read by `cmq.backup.load`).

A backup is a directory::

    manifest.json              written last: a directory without it is an incomplete backup
    catalog/<section>.json     one file per catalog section (placement, groups, metadata, keys,
                               feature_flags, ...), each a JSON value
    queues/<n>.ndjson          one file per queue: its live messages, one JSON object a line,
                               in seq order

The manifest (`Manifest`) holds the format version (`FORMAT_VERSION`), the source cluster's
release, the catalog sections (name -> file) and per queue its name, attributes, file, message
count, SHA-256 of the file and the export's bound and read times. A reader refuses a manifest
whose ``format_version`` is newer than its own (`NewerBackupFormat`, naming the file and both
versions); within a version, sections a reader does not know are reported and skipped, so
a newer catalog can add sections without a new format version. Queue files are named by their
position (``q00001.ndjson``), not by the queue's name.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import msgspec

from cmq.backup.errors import InvalidBackup, NewerBackupFormat

FORMAT_VERSION = 3
"""The format this release writes and the newest it reads. Version 3: a queue file line also
holds ``priority`` (its level; absent: 0) and, on a standard queue, ``group_id`` names the
message's tenant (fair queues), so a restored queue delivers in the same priority and tenant
order. Version 2: a line also holds ``visible_at`` and ``ttl_deadline`` (absolute times, so a
restore keeps when a delayed message becomes visible and when a message's time to live runs
out). Versions 1 and 2 are still read (their messages: priority 0, no tenant; version 1: a
delay left, no time to live). A release that reads only version 2 refuses a version 3 backup
rather than restore its messages at the lowest level and without their tenants."""
MANIFEST = "manifest.json"
CATALOG_DIR = "catalog"
QUEUES_DIR = "queues"
KNOWN_SECTIONS = ("placement", "groups", "metadata", "keys")
"""The catalog sections this release restores (placement and groups are informative: the
target cluster places queues by its own rules). Others (``feature_flags``) are reported."""


class BackupMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    """One line of a queue file: a live message as the export read it. ``state`` is
    ``visible``, ``in_flight`` or ``delayed``; ``delay_ms`` is how long a delayed message had
    left when read (0 otherwise); ``receive_count`` is informative (a restore resets it).
    Version 2: ``visible_at`` is when a delayed message becomes visible and ``ttl_deadline``
    when a message's time to live runs out (ms since the Unix epoch, the source queue's clock;
    0: none). Version 3: ``priority`` is its level (0, the lowest, is left out), and
    ``group_id`` on a standard queue's message is its tenant (FIFO queues: its group)."""

    id: str
    body: bytes
    sent_at: int
    state: str
    binary: bool = False
    attributes: dict[str, str] = msgspec.field(default_factory=dict)
    delay_ms: int = 0
    receive_count: int = 0
    group_id: str | None = None
    dedup_id: str | None = None
    visible_at: int = 0
    ttl_deadline: int = 0
    priority: int = 0


class QueueEntry(msgspec.Struct, frozen=True):
    """A queue of the backup."""

    name: str
    attributes: dict[str, Any]
    file: str
    """Relative to the backup directory."""
    messages: int
    sha256: str
    upto: int
    """The export's bound: the queue's next seq when its export began."""
    started_ms: int
    """The leader's clock at the export's first page."""
    finished_ms: int
    """The leader's clock at its last page."""


class Manifest(msgspec.Struct, frozen=True):
    format_version: int
    release: str
    """The source cluster's release (as the node that answered reported it)."""
    written_by: str
    """The release of the cmq that wrote the backup."""
    created_ms: int
    catalog: dict[str, str]
    """Catalog section -> file, relative to the backup directory."""
    queues: list[QueueEntry]


_encoder = msgspec.json.Encoder()
_line_decoder = msgspec.json.Decoder(BackupMessage)


def encode_message(m: BackupMessage) -> bytes:
    """A queue file line (with its newline)."""
    return _encoder.encode(m) + b"\n"


def encode_manifest(manifest: Manifest) -> bytes:
    return msgspec.json.format(_encoder.encode(manifest), indent=2) + b"\n"


def queue_file(index: int) -> str:
    return f"{QUEUES_DIR}/q{index:05d}.ndjson"


def section_file(name: str) -> str:
    return f"{CATALOG_DIR}/{name}.json"


def read_manifest(directory: Path) -> Manifest:
    """The manifest of the backup in ``directory``: `InvalidBackup` when absent or malformed,
    `NewerBackupFormat` when written in a newer format version than `FORMAT_VERSION`."""
    path = directory / MANIFEST
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InvalidBackup(f"{path}: no manifest (not a backup, or an incomplete one)") from None
    try:
        head = msgspec.json.decode(raw)
    except msgspec.DecodeError as e:
        raise InvalidBackup(f"{path}: not JSON: {e}") from None
    version = head.get("format_version") if isinstance(head, dict) else None
    if not isinstance(version, int) or version < 1:
        raise InvalidBackup(f"{path}: no valid format_version")
    if version > FORMAT_VERSION:
        raise NewerBackupFormat(
            f"{path}: backup format version {version} is newer than this release of cmq reads "
            f"(format version {FORMAT_VERSION}); restore it with a newer cmq"
        )
    try:
        manifest = msgspec.json.decode(raw, type=Manifest)
    except msgspec.ValidationError as e:
        raise InvalidBackup(f"{path}: {e}") from None
    for entry in manifest.queues:
        _check_relative(path, entry.file)
    for file in manifest.catalog.values():
        _check_relative(path, file)
    return manifest


def _check_relative(manifest: Path, file: str) -> None:
    parts = Path(file).parts
    if Path(file).is_absolute() or ".." in parts or not parts:
        raise InvalidBackup(f"{manifest}: file {file!r} is outside the backup")


def read_queue_file(directory: Path, entry: QueueEntry) -> list[BackupMessage]:
    """The messages of ``entry``'s file, checked against the manifest (checksum, count, one
    message per id): `InvalidBackup` naming the file otherwise."""
    path = directory / entry.file
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InvalidBackup(f"{path}: missing (queue {entry.name!r})") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != entry.sha256:
        raise InvalidBackup(f"{path}: SHA-256 {digest} is not the manifest's {entry.sha256}")
    out: list[BackupMessage] = []
    for n, line in enumerate(data.splitlines(), 1):
        try:
            out.append(_line_decoder.decode(line))
        except msgspec.DecodeError as e:
            raise InvalidBackup(f"{path}:{n}: {e}") from None
    if len(out) != entry.messages:
        raise InvalidBackup(f"{path}: {len(out)} messages; the manifest says {entry.messages}")
    if len({m.id for m in out}) != len(out):
        raise InvalidBackup(f"{path}: a message id appears twice")
    return out


def read_section(directory: Path, file: str) -> Any:
    path = directory / file
    try:
        return msgspec.json.decode(path.read_bytes())
    except FileNotFoundError:
        raise InvalidBackup(f"{path}: missing catalog section") from None
    except msgspec.DecodeError as e:
        raise InvalidBackup(f"{path}: not JSON: {e}") from None
