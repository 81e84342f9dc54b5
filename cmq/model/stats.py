"""What a queue and a data group report of themselves: `QueueStats` (with `SegmentCounts`) and
`GroupDigest`. Pure values.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SegmentCounts:
    """A queue's segments by state (see `SEGMENT_STATES`), on the replica that answers."""

    active: int = 0
    sealed: int = 0
    released: int = 0
    archived_pending: int = 0


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts for `GET /v1/queues/{name}` (exact at the leader's applied index)."""

    visible: int = 0
    in_flight: int = 0
    delayed: int = 0
    sent_total: int = 0
    acked_total: int = 0
    dead_lettered_total: int = 0
    expired_total: int = 0
    oldest_age_ms: int = 0
    segments: SegmentCounts = SegmentCounts()
    disk_bytes: int = 0
    """Bytes of the queue's segment files on this replica (archived_pending ones included)."""
    oldest_unarchived_ms: int = 0
    """The archive's backlog: age of the oldest message of a released segment not yet
    archived (from its send time); 0 when none (always 0 on a queue without ``archive``)."""
    visible_by_priority: tuple[int, ...] = ()
    """Queues with ``priorities`` > 1: the visible messages at each level, 0 (lowest) first
    (they add up to ``visible``); empty otherwise."""
    tenants: int = 0
    """Standard queues whose messages have group ids (fair queues): the tenants with a message
    ready to be received (the messages without a group id count as one tenant); 0 otherwise."""


@dataclass(frozen=True, slots=True)
class GroupDigest:
    """A data group's replicated state on one node, hashed (``GET /v1/groups/{group}/digest``):
    replicas that applied the same index must show the same hashes. ``image_sha256`` covers
    the state machine's snapshot image (queues, messages' metadata, leases, dedup window);
    ``segments_sha256`` the bytes of the ``segments`` segment files that image lists, up to
    the sizes it records."""

    group: int
    node: int
    applied: int
    image_sha256: str
    image_bytes: int
    segments_sha256: str
    segments: int


__all__ = ["GroupDigest", "QueueStats", "SegmentCounts"]
