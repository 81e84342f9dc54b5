"""The typed bodies of the archive read side of the native JSON API (segments listing, records
stream lines, claim, mark-archived): msgspec `Struct`s like those of `api.models`, whose rules
they follow. Pure: no aiohttp, no I/O.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta

import cmq.model
import cmq.segment_values
from api.models import NonNegative, _Request, _Response
from cmq.model import OUTCOMES
from cmq.segment_values import BATCH_ID, MAX_CLAIM_TTL_MS, MAX_SEGMENTS_PER_CALL, SEGMENT_STATES

BatchId = Annotated[str, Meta(pattern=BATCH_ID.pattern, description="An archive batch id.")]
FirstSeq = Annotated[int, Meta(ge=1, le=2**63 - 1, description="A segment's first seq (its name).")]
"""Seqs are stored as signed 64-bit integers: a larger one is refused as a bad parameter."""
SegmentList = Annotated[list[FirstSeq], Meta(min_length=1, max_length=MAX_SEGMENTS_PER_CALL)]
SegmentState = Literal["active", "sealed", "released", "archived_pending"]
Outcome = Literal["acked", "expired", "dead_lettered", "purged"]
assert set(SegmentState.__args__) == set(SEGMENT_STATES)  # type: ignore[attr-defined]
assert set(Outcome.__args__) == set(OUTCOMES)  # type: ignore[attr-defined]


class SegmentClaim(_Response):
    batch_id: str
    expires_at_ms: NonNegative


class Segment(_Response, kw_only=True):
    """One segment. ``count``: the records its records stream carries once released (messages
    copied forward to a newer segment are archived from there, not counted here);
    ``checksum``: CRC-32 (zlib) of its stored bytes, 8 hex digits, equal on every replica."""

    first_seq: FirstSeq
    last_seq: NonNegative
    count: NonNegative
    bytes: NonNegative
    state: SegmentState
    checksum: Annotated[str, Meta(pattern="^[0-9a-f]{8}$")]
    claim: SegmentClaim | None

    @classmethod
    def of(cls, info: cmq.segment_values.SegmentInfo) -> Segment:
        return msgspec.convert(info, cls, from_attributes=True)


class SegmentListing(_Response, kw_only=True):
    """The queue's segments as the answering node's replica holds them; ``leader``: the node id
    of its group's leader (null: none known)."""

    queue: str
    group: int
    leader: int | None
    segments: list[Segment]

    @classmethod
    def of(cls, listing: cmq.segment_values.SegmentListing) -> SegmentListing:
        return msgspec.convert(listing, cls, from_attributes=True)


class SegmentRecordLine(_Response, kw_only=True):
    """One line of a records stream (``application/x-ndjson``), in seq order. The stream ends
    with a `SegmentStreamTrailer` line; a stream without one was cut (read another replica)."""

    seq: FirstSeq
    id: str
    sent_at_ms: NonNegative
    receive_count: NonNegative
    attributes: dict[str, str]
    body_b64: str
    outcome: Outcome
    priority: Annotated[
        int,
        Meta(
            ge=0,
            le=255,
            description="The message's priority level as sent (0, the lowest, when it had "
            "none). Always present; an older node's lines lack it: read it as 0.",
        ),
    ] = 0


class SegmentStreamTrailer(_Response, kw_only=True):
    """The last line: ``count`` record lines; ``stream_crc``: zlib CRC-32 chained over the exact
    bytes of every record line (each with its newline); ``checksum``: the CRC-32 of the segment's
    stored bytes as read (equal to the listing's)."""

    end: Literal[True]
    count: NonNegative
    stream_crc: Annotated[str, Meta(pattern="^[0-9a-f]{8}$")]
    checksum: Annotated[str, Meta(pattern="^[0-9a-f]{8}$")]


class ClaimRequest(_Request):
    """Claim released segments for ``ttl_ms`` (default 10 minutes); a claim by the same batch
    is renewed."""

    batch_id: BatchId
    segments: SegmentList
    ttl_ms: Annotated[int, Meta(ge=1, le=MAX_CLAIM_TTL_MS)] | None = None


class ArchivedRequest(_Request):
    """Mark segments archived by batch ``batch_id`` (idempotent)."""

    batch_id: BatchId
    segments: SegmentList


class RefusedSegment(_Response):
    """A segment left alone, why (``claimed``: another batch's unexpired claim, named by
    ``batch_id``; ``not_released``; ``not_found``)."""

    first_seq: int
    batch_id: str | None
    reason: Literal["claimed", "not_released", "not_found"]


class ClaimResponse(_Response):
    claimed: list[int]
    refused: list[RefusedSegment]

    @classmethod
    def of(cls, result: cmq.segment_values.ClaimResult) -> ClaimResponse:
        return msgspec.convert(result, cls, from_attributes=True)


class ArchivedResponse(_Response):
    """``already``: archived before (or never existed)."""

    archived: list[int]
    already: list[int]
    refused: list[RefusedSegment]

    @classmethod
    def of(cls, result: cmq.segment_values.ArchiveResult) -> ArchivedResponse:
        return msgspec.convert(result, cls, from_attributes=True)
