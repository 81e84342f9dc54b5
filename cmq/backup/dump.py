"""``cmq backup --out DIR``: write a backup (`cmq.backup.format`) of a running cluster through
its HTTP API, without stopping it or disturbing its consumers (exports lease nothing).

What a queue file holds: the export of the queue (`cmq.fsm.export`) read page by page at its
leader, bounded by the queue's next seq when its first page was read. So it holds every message
sent before the export of that queue began and still live when its page was read: messages
sent during the backup are not in it, messages deleted during it may or may not be. A queue
nobody writes to or consumes from during the backup is copied exactly. Queues are exported one
after the other by up to `PARALLEL` tasks; the catalog is read once, before them.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from cmq.backup.errors import BackupTargetNotEmpty, InvalidBackup
from cmq.backup.format import (
    CATALOG_DIR,
    FORMAT_VERSION,
    MANIFEST,
    QUEUES_DIR,
    BackupMessage,
    Manifest,
    QueueEntry,
    encode_manifest,
    encode_message,
    queue_file,
    section_file,
)
from cmq.client import Client
from cmq.client.backup import export_catalog, export_page
from cmq.errors import QueueNotFound

PARALLEL = 4
"""Queues exported at once."""
PAGE = 1000
"""Messages asked per export page."""


@dataclass(frozen=True, slots=True)
class BackupReport:
    """What a backup wrote."""

    directory: str
    queues: int
    messages: int
    sections: tuple[str, ...]
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "queues": self.queues,
            "messages": self.messages,
            "catalog_sections": list(self.sections),
            "seconds": round(self.seconds, 3),
        }


def release() -> str:
    """The release of this cmq (the installed distribution's version)."""
    import importlib.metadata

    try:
        return importlib.metadata.version("cmq")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def backup_message(raw: dict[str, Any], read_at: int) -> BackupMessage:
    """A queue file line from an exported message (``LiveMessage`` JSON)."""
    if "body_base64" in raw:
        body, binary = base64.b64decode(raw["body_base64"]), True
    else:
        body, binary = str(raw.get("body", "")).encode(), False
    state = str(raw["state"])
    delay = max(0, int(raw.get("visible_at", 0)) - read_at) if state == "delayed" else 0
    return BackupMessage(
        id=str(raw["id"]),
        body=body,
        sent_at=int(raw["sent_at"]),
        state=state,
        binary=binary,
        attributes=dict(raw.get("attributes") or {}),
        delay_ms=delay,
        receive_count=int(raw.get("receive_count", 0)),
        group_id=raw.get("group_id"),
        dedup_id=raw.get("dedup_id"),
        visible_at=int(raw.get("visible_at", 0)) if state == "delayed" else 0,
        ttl_deadline=int(raw.get("ttl_deadline", 0)),
        priority=int(raw.get("priority", 0)),
    )


async def _export_queue(client: Client, directory: Path, index: int, name: str) -> QueueEntry:
    info = await client.get_queue(name)
    file = queue_file(index)
    path = directory / file
    digest = hashlib.sha256()
    seen: set[str] = set()
    after = upto = 0
    started = finished = 0
    with path.open("wb") as out:
        while True:
            page = await export_page(client, name, after, upto, PAGE)
            upto, finished = int(page["upto"]), int(page["read_at"])
            started = started or finished
            lines = []
            for raw in page["messages"]:
                if raw["id"] in seen:  # copied forward during the export: kept once
                    continue
                seen.add(raw["id"])
                lines.append(encode_message(backup_message(raw, finished)))
            chunk = b"".join(lines)
            digest.update(chunk)
            out.write(chunk)
            if page["next_after"] is None:
                break
            after = int(page["next_after"])
        out.flush()
        os.fsync(out.fileno())
    return QueueEntry(
        name=name,
        attributes=info.attributes.to_dict(),
        file=file,
        messages=len(seen),
        sha256=digest.hexdigest(),
        upto=upto,
        started_ms=started,
        finished_ms=finished,
    )


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


async def backup(client: Client, out: str | Path) -> BackupReport:
    """Write a backup of the cluster ``client`` reaches into ``out`` (created; refused with
    `BackupTargetNotEmpty` if it exists and is not empty). The manifest is written last."""
    began = time.monotonic()
    directory = Path(out)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise BackupTargetNotEmpty(f"{directory} exists and is not empty; nothing was written")
    (directory / CATALOG_DIR).mkdir(parents=True, exist_ok=True)
    (directory / QUEUES_DIR).mkdir(exist_ok=True)
    catalog = await export_catalog(client)
    sections: dict[str, str] = {}
    for section, value in sorted(dict(catalog["sections"]).items()):
        if not section.replace("_", "").isalnum():
            raise InvalidBackup(f"the cluster reported a catalog section named {section!r}")
        sections[section] = section_file(section)
        _write(directory / sections[section], msgspec.json.encode(value))
    names = await client.list_queues()
    gate = asyncio.Semaphore(PARALLEL)

    async def one(index: int, name: str) -> QueueEntry | None:
        async with gate:
            try:
                return await _export_queue(client, directory, index, name)
            except QueueNotFound:  # deleted since it was listed: not part of the backup
                (directory / queue_file(index)).unlink(missing_ok=True)
                return None

    exported = await asyncio.gather(*(one(i, n) for i, n in enumerate(names, 1)))
    entries = [e for e in exported if e is not None]
    manifest = Manifest(
        format_version=FORMAT_VERSION,
        release=str(catalog["release"]),
        written_by=release(),
        created_ms=time.time_ns() // 1_000_000,
        catalog=sections,
        queues=list(entries),
    )
    _write(directory / MANIFEST, encode_manifest(manifest))
    return BackupReport(
        str(directory),
        len(entries),
        sum(e.messages for e in entries),
        tuple(sections),
        time.monotonic() - began,
    )
