"""``cmq restore DIR``: recreate a backup (`cmq.backup.format`) in a cluster, normally a fresh
one, through its HTTP API.

Order: the manifest and every queue file are checked first (nothing changes on a bad backup);
then the queues are created (dead-letter queues before the queues naming them) with their
attributes; then the catalog sections this release knows (access keys, sealed, and queue
metadata; placement and groups are informative); then each queue's messages, imported in
their backup order with their ids, bodies, attributes, priority levels, FIFO group and
deduplication ids, and a standard queue's tenants (group ids): each level and each tenant gets
its messages back in their order, so the restored queue delivers in the same priority order and
each tenant's messages in the same order (the round-robin over tenants starts again from the
first tenant by name). A version 1 or 2 backup's messages come back at priority 0, without a
tenant.

What a restored message keeps of its times: a delayed message becomes visible when it would
have (its ``visible_at``; at once if that has passed), and a message with a time to live
expires at its deadline (at once, unseen, if that has passed); the restoring node turns both
into a delay and a time to live from its own clock. From a version 1 backup (no absolute
times) a delayed message stays invisible for the delay it had left when it was backed up.
What it does not keep: its receive count (0 again), its lease (an in-flight message is visible
at once), its send time (the import's time: retention starts again), and the queue's
deduplication window.

A restore can be run again: each import states how many messages the queue has had sent
(``expect_sent``), so after a cut a rerun resumes after the messages already stored, a queue
already restored is left as is, and a queue someone else wrote to is refused
(`RestoreConflict`) instead of getting messages twice.
"""

from __future__ import annotations

import asyncio
import base64
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cmq.backup.errors import RestoreConflict
from cmq.backup.format import (
    KNOWN_SECTIONS,
    BackupMessage,
    Manifest,
    QueueEntry,
    read_manifest,
    read_queue_file,
    read_section,
)
from cmq.client import Client
from cmq.client.backup import export_page, import_catalog, import_messages
from cmq.client.types import Json
from cmq.errors import ImportConflict, OutcomeUnknown
from cmq.export_values import MAX_IMPORT_BATCH
from cmq.model import MAX_DELAY_SECONDS, QueueAttributes

PARALLEL = 4
"""Queues imported at once."""
BATCH_BYTES = 2 << 20
"""An import request stops after the message that takes its bodies past this many bytes."""


@dataclass(slots=True)
class RestoreReport:
    """What a restore did."""

    queues_created: list[str] = field(default_factory=list)
    queues_present: list[str] = field(default_factory=list)
    messages: dict[str, int] = field(default_factory=dict)
    """Queue -> messages imported by this run."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Queue -> messages found already imported (a rerun)."""
    catalog: dict[str, Any] = field(default_factory=dict)
    sections_skipped: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "queues_created": self.queues_created,
            "queues_present": self.queues_present,
            "messages_imported": sum(self.messages.values()),
            "messages_already_present": sum(self.skipped.values()),
            "per_queue": self.messages,
            "catalog": self.catalog,
            "catalog_sections_skipped": self.sections_skipped,
            "seconds": round(self.seconds, 3),
        }


def creation_order(entries: list[QueueEntry]) -> list[QueueEntry]:
    """``entries`` with every dead-letter queue before the queues that name it (a cycle or a
    dead-letter queue outside the backup: in name order at the end)."""
    by_name = {e.name: e for e in entries}
    done: list[QueueEntry] = []
    placed: set[str] = set()
    pending = sorted(entries, key=lambda e: e.name)
    while pending:
        ready = [
            e
            for e in pending
            if e.attributes.get("dead_letter_queue") in (None, *placed)
            or e.attributes.get("dead_letter_queue") not in by_name
        ]
        if not ready:
            ready = pending[:1]
        for e in ready:
            done.append(e)
            placed.add(e.name)
        pending = [e for e in pending if e.name not in placed]
    return done


def import_json(m: BackupMessage) -> Json:
    """The import object of a backed-up message."""
    out: dict[str, Any] = {"id": m.id}
    if m.binary:
        out["body_base64"] = base64.b64encode(m.body).decode()
    else:
        out["body"] = m.body.decode()
    if m.attributes:
        out["attributes"] = m.attributes
    if m.state == "delayed" and m.visible_at > 0:
        out["deliver_at"] = m.visible_at
    elif m.state == "delayed" and m.delay_ms > 0:
        out["delay_ms"] = min(m.delay_ms, MAX_DELAY_SECONDS * 1000)
    if m.ttl_deadline > 0:
        out["ttl_deadline"] = m.ttl_deadline
    if m.group_id is not None:
        out["group_id"] = m.group_id
    if m.dedup_id is not None:
        out["dedup_id"] = m.dedup_id
    if m.priority:
        out["priority"] = m.priority
    return out


def batches(messages: list[BackupMessage], start: int) -> list[tuple[int, int]]:
    """[start, end) ranges of ``messages[start:]`` of at most `MAX_IMPORT_BATCH` messages and
    about `BATCH_BYTES` of bodies."""
    out = []
    i = start
    while i < len(messages):
        j, size = i, 0
        while j < len(messages) and j - i < MAX_IMPORT_BATCH and size < BATCH_BYTES:
            size += len(messages[j].body)
            j += 1
        out.append((i, j))
        i = j
    return out


async def _sent_total(client: Client, name: str) -> int:
    return (await client.get_queue(name)).stats.sent_total


async def _check_prefix(
    client: Client, entry: QueueEntry, messages: list[BackupMessage], sent: int
) -> None:
    """The queue has had ``sent`` messages sent: they must be the backup's first ``sent``
    (checked on the live ones of its first export page), else `RestoreConflict`."""
    if sent > len(messages):
        raise RestoreConflict(
            f"queue {entry.name!r} has had {sent} messages sent, more than the backup's "
            f"{len(messages)}: it was not filled by this restore; nothing was imported into it"
        )
    if sent == 0:
        return
    ours = {m.id for m in messages[:sent]}
    page = await export_page(client, entry.name, 0, 0)
    strangers = [m["id"] for m in page["messages"] if m["id"] not in ours]
    if strangers:
        raise RestoreConflict(
            f"queue {entry.name!r} holds message {strangers[0]} that is not among the backup's "
            f"first {sent}: it was not filled by this restore; nothing was imported into it"
        )


async def _import_queue(
    client: Client, entry: QueueEntry, messages: list[BackupMessage], report: RestoreReport
) -> None:
    sent = await _sent_total(client, entry.name)
    await _check_prefix(client, entry, messages, sent)
    report.skipped[entry.name] = sent
    imported = 0
    for start, end in batches(messages, sent):
        body = [import_json(m) for m in messages[start:end]]
        try:
            sent = await import_messages(client, entry.name, start, body)
        except (ImportConflict, OutcomeUnknown):
            # Maybe an attempt whose answer was lost did store it: the queue's count says.
            now = await _sent_total(client, entry.name)
            if now == end:
                sent = end
            elif now == start:
                sent = await import_messages(client, entry.name, start, body)
            else:
                raise RestoreConflict(
                    f"queue {entry.name!r} has had {now} messages sent while importing "
                    f"messages {start}..{end} of the backup: someone else writes to it"
                ) from None
        imported += end - start
    report.messages[entry.name] = imported


async def restore(client: Client, source: str | Path) -> RestoreReport:
    """Restore the backup in ``source`` into the cluster ``client`` reaches (see the module
    docstring). `InvalidBackup` / `NewerBackupFormat` before anything changes; a queue that
    exists with other attributes: `QueueAlreadyExists`."""
    began = time.monotonic()
    directory = Path(source)
    manifest: Manifest = read_manifest(directory)
    contents = {e.name: read_queue_file(directory, e) for e in manifest.queues}
    sections = {name: read_section(directory, f) for name, f in manifest.catalog.items()}
    report = RestoreReport()
    for entry in creation_order(manifest.queues):
        attributes = QueueAttributes.from_dict(entry.attributes)
        created = await client.create_queue(entry.name, attributes)
        (report.queues_created if created.created else report.queues_present).append(entry.name)
    keys = list(sections.get("keys") or [])
    metadata = dict(sections.get("metadata") or {})
    if keys or metadata:
        report.catalog = await import_catalog(client, keys, metadata)
    report.sections_skipped = sorted(s for s in sections if s not in KNOWN_SECTIONS)
    gate = asyncio.Semaphore(PARALLEL)

    async def one(entry: QueueEntry) -> None:
        async with gate:
            await _import_queue(client, entry, contents[entry.name], report)

    await asyncio.gather(*(one(e) for e in manifest.queues))
    report.seconds = time.monotonic() - began
    return report
