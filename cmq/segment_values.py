"""Values of the segment calls of `cmq.service.QueueService`, the archive's side of a queue:
a queue's segments as listed (`SegmentListing`, `SegmentInfo`), the claims and marks of an
archive batch (`ClaimResult`, `ArchiveResult`), and a released segment's records, as JSON lines
(`SegmentStream`) or as its stored bytes (`SegmentData`). Pure: no I/O, no clocks.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass

import msgspec

from cmq.errors import InvalidParameter

BATCH_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
"""An archive batch id (the claims and `MarkArchived` of one archive run)."""
MAX_SEGMENTS_PER_CALL = 1000
"""At most this many segments per claim / mark-archived call."""
MAX_CLAIM_TTL_MS = 24 * 3600 * 1000
SEGMENT_STATES = ("active", "sealed", "released", "archived_pending")
"""What a queue's segment can be: ``active`` (takes appends), ``sealed`` (full or old, some
message still live), ``released`` (every message deleted, kept for the archive: the queue has
``archive=true``), ``archived_pending`` (archived, or released without archive: its files go
at this replica's next snapshot but one, or once the queue's ``retain_acked_seconds`` has passed
since its newest message's send, while a rewind may still want its records)."""


@dataclass(frozen=True, slots=True)
class SegmentClaim:
    """An archive job's claim on a released segment, until ``expires_at_ms``."""

    batch_id: str
    expires_at_ms: int


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One segment of a queue as listed for the archive. ``count``: the records the records
    stream of a released segment carries (messages copied forward are not counted)."""

    first_seq: int
    last_seq: int
    count: int
    bytes: int
    state: str
    checksum: str
    """CRC-32 of the segment's stored bytes, 8 hex digits (equal on every replica)."""
    claim: SegmentClaim | None = None


@dataclass(frozen=True, slots=True)
class SegmentListing:
    """A queue's segments on the replica that answered; ``leader``: its group's leader."""

    queue: str
    group: int
    leader: int | None
    segments: tuple[SegmentInfo, ...]


class SegmentRecord(msgspec.Struct, frozen=True, omit_defaults=True):
    """One message of a released segment, with how it left the queue (`OUTCOMES`), and its
    priority level as stored in its record (0: none). A Struct omitting defaults: a record at
    level 0 crosses the front-end socket in the bytes it had before levels were recorded."""

    seq: int
    id: str
    sent_at_ms: int
    receive_count: int
    attributes: tuple[tuple[str, str], ...]
    body: bytes
    outcome: str
    priority: int = 0


@dataclass(frozen=True, slots=True)
class Refused:
    """A segment a claim or mark-archived call left alone, and why (``claimed``,
    ``not_released``, ``not_found``); ``batch_id``: the claim holding it, if any."""

    first_seq: int
    reason: str
    batch_id: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimResult:
    claimed: tuple[int, ...]
    refused: tuple[Refused, ...]


@dataclass(frozen=True, slots=True)
class ArchiveResult:
    archived: tuple[int, ...]
    already: tuple[int, ...]
    refused: tuple[Refused, ...]


@dataclass(frozen=True, slots=True)
class SegmentStream:
    """The records of one released segment as this replica reads them: ``batches`` yields
    them in seq order (a list per chunk read); it raises `CorruptSegment` on damage, after
    which the reader must not trust the stream. ``checksum``: the listing's CRC-32 (8 hex
    digits), which the bytes read matched once ``batches`` ends without an error."""

    checksum: str
    batches: AsyncIterator[list[SegmentRecord]]


SEGMENT_DATA_MEDIA_TYPE = "application/x-cmq-segment"
"""The media type of a released segment's binary read (`SegmentData`), asked for with
``Accept``."""


@dataclass(frozen=True, slots=True)
class SegmentData:
    """The binary read of one released segment from this replica (`cmq.fsm.segdata`, media
    type ``application/x-cmq-segment``): ``chunks`` are the stream's bytes in order; it raises
    `CorruptSegment` on damage, before the stream's end (the caller then ends the answer
    there, so the reader sees it cut). ``checksum``: the listing's CRC-32 (8 hex digits)."""

    checksum: str
    chunks: AsyncIterator[bytes]


def check_batch_id(batch_id: object) -> str:
    """``batch_id`` if it matches `BATCH_ID`, else `InvalidParameter`."""
    if not isinstance(batch_id, str) or not BATCH_ID.match(batch_id):
        raise InvalidParameter(f"batch_id must match {BATCH_ID.pattern}; got {batch_id!r}")
    return batch_id


def check_segments(segments: object) -> tuple[int, ...]:
    """A non-empty list of at most `MAX_SEGMENTS_PER_CALL` segment first seqs (>= 1)."""
    if not isinstance(segments, list | tuple) or not segments:
        raise InvalidParameter("segments must be a non-empty list of first seqs")
    if len(segments) > MAX_SEGMENTS_PER_CALL:
        raise InvalidParameter(f"at most {MAX_SEGMENTS_PER_CALL} segments per call")
    for s in segments:
        if isinstance(s, bool) or not isinstance(s, int) or s < 1:
            raise InvalidParameter(f"segments are first seqs (integers >= 1); got {s!r}")
    return tuple(segments)
