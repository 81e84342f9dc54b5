"""Values of a backup's calls of `cmq.service.QueueService`: a queue's live messages as an
export reads them (`ExportPage` of `LiveMessage`), and the messages an import stores with their
ids kept (`ImportedMessage`), with their limits. Pure: no I/O, no clocks.
"""

from __future__ import annotations

from dataclasses import dataclass

LIVE_STATES = ("visible", "in_flight", "delayed")
"""What an exported live message was doing when read (`LiveMessage.state`)."""
MAX_EXPORT_PAGE = 1000
"""Most messages one page of an export holds (`MAX_EXPORT_BYTES` may stop it sooner)."""
MAX_EXPORT_BYTES = 4 << 20
"""A page of an export stops after the message that takes its bodies past this many bytes."""
MAX_IMPORT_BATCH = 1000
"""Most messages one import call stores."""


@dataclass(frozen=True, slots=True)
class LiveMessage:
    """A live message as an export reads it at its queue's leader (nothing changes):
    ``state`` is one of `LIVE_STATES`; ``visible_at_ms`` is when an in-flight or delayed
    message becomes visible (0 for a visible one); ``receive_count`` counts its leases so far
    (0: never received). FIFO queues: ``group_id`` and ``dedup_id``; a standard queue's
    message with a tenant (fair queues): ``group_id`` names it."""

    id: str
    seq: int
    body: bytes
    binary: bool
    sent_at_ms: int
    attributes: tuple[tuple[str, str], ...]
    state: str
    visible_at_ms: int
    receive_count: int
    group_id: str | None = None
    dedup_id: str | None = None
    ttl_deadline_ms: int | None = None
    """When its time to live runs out (the queue's time, Unix ms); None: it has none."""
    priority: int = 0
    """Its priority level (0: the lowest, and every message of a queue without priorities)."""


@dataclass(frozen=True, slots=True)
class ExportPage:
    """One page of a queue's export: the live messages with ``after`` < seq, in seq order,
    among those sent before ``upto`` (the queue's next seq when the export began: messages
    sent since are not part of it). ``next_after`` is the cursor of the next page (None: this
    was the last); ``read_at_ms`` the leader's clock when it read the page."""

    messages: tuple[LiveMessage, ...]
    upto: int
    next_after: int | None
    read_at_ms: int


@dataclass(frozen=True, slots=True)
class ImportedMessage:
    """A message to store with its id kept (a restore): ``delay_ms`` is how long it stays
    invisible after the import (0: at once), or ``deliver_at_ms`` when it becomes visible (Unix
    ms; past: at once); ``ttl_deadline_ms`` when its time to live runs out (Unix ms; None: it
    has none; past: it expires at once). The node turns the absolute times into a delay and a
    time to live from its clock, so a restore keeps them whatever the restoring client's.
    ``priority``: its level (below the queue's ``priorities``); ``group_id`` on a standard
    queue: its tenant (fair queues; only at priority 0)."""

    id: str
    body: bytes
    binary: bool
    attributes: tuple[tuple[str, str], ...]
    delay_ms: int = 0
    group_id: str | None = None
    dedup_id: str | None = None
    deliver_at_ms: int | None = None
    ttl_deadline_ms: int | None = None
    priority: int = 0


def imported_delay_ms(m: ImportedMessage, now_ms: int) -> int:
    """How long an imported message stays invisible from ``now_ms`` (the importing node's
    clock): until its ``deliver_at_ms`` (past: 0), else its ``delay_ms``."""
    if m.deliver_at_ms is not None:
        return max(0, m.deliver_at_ms - now_ms)
    return m.delay_ms
