"""The archive's side of the queue service on one node: list a queue's segments, stream a
released one's records from this node's replica, claim segments for a batch and mark them
archived (`cmq.fsm.lifecycle` holds the rules; `cmq archive`, PySpark, is the client).

Listing and reading answer from this node's own replica (no Raft round trip; any replica's
files are identical), so they need a node that holds one; claims and marks are commands
through the group's leader.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator, Mapping

from cmq.catalog.meta import CatalogMachine
from cmq.errors import InvalidParameter, QueueNotFound, Unavailable
from cmq.fsm.machine import QueueMachine
from cmq.model import check_queue_name
from cmq.routing.router import Router
from cmq.routing.rpc import ClaimSegmentsCall, MarkArchivedCall
from cmq.segment_values import (
    MAX_CLAIM_TTL_MS,
    ArchiveResult,
    ClaimResult,
    SegmentData,
    SegmentListing,
    SegmentRecord,
    SegmentStream,
    check_batch_id,
    check_segments,
)
from raftlog.runtime import MultiRaft


class ArchiveSide:
    """The archive calls of `cmq.service.QueueService` for node ``node_id`` (see the module
    docstring); ``machines`` is the node's data-group state machines by group."""

    def __init__(
        self,
        node_id: int,
        raft: MultiRaft,
        catalog: CatalogMachine,
        router: Router,
        machines: Mapping[int, QueueMachine],
    ) -> None:
        self._id = node_id
        self._raft = raft
        self._catalog = catalog
        self._router = router
        self._machines = machines

    def _local_machine(self, name: str) -> tuple[int, QueueMachine]:
        check_queue_name(name)
        group = self._router.group_of(name)
        machine = self._machines.get(group)
        if machine is None:
            placed = self._catalog.placement(group)
            hosts = ", ".join(str(n) for n in placed.replicas) if placed else "unknown"
            raise Unavailable(
                f"node {self._id} holds no replica of queue {name!r} (data group {group}); "
                f"ask a node that does: {hosts}"
            )
        if machine.attributes(name) is None:
            raise QueueNotFound(f"queue {name!r} does not exist")
        return group, machine

    async def list_segments(self, name: str, state: str = "all") -> SegmentListing:
        group, machine = self._local_machine(name)
        segments = machine.segments(name, state)
        if segments is None:
            raise QueueNotFound(f"queue {name!r} does not exist")
        leader = self._raft.leader_of(group)
        return SegmentListing(name, group, leader or None, tuple(segments))

    async def read_segment(self, name: str, first_seq: int) -> SegmentStream:
        _, machine = self._local_machine(name)
        checksum, records = machine.records(name, first_seq)
        first = next(records, None)  # damage in the first chunk fails before any answer
        return SegmentStream(checksum, _batches(first, records))

    async def read_segment_data(self, name: str, first_seq: int) -> SegmentData:
        """The binary read (`cmq.fsm.segdata`) of a released segment from this replica; the
        caller checks the ``segment_read_binary`` flag."""
        _, machine = self._local_machine(name)
        checksum, pieces = machine.segment_data(name, first_seq)
        head = next(pieces)  # the tables: an unknown segment fails before any answer
        return SegmentData(checksum, _chunks(head, pieces))

    async def claim_segments(
        self, name: str, batch_id: str, segments: list[int], ttl_ms: int
    ) -> ClaimResult:
        check_queue_name(name)
        check_batch_id(batch_id)
        firsts = check_segments(segments)
        if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int):
            raise InvalidParameter("ttl_ms must be an integer")
        if not 1 <= ttl_ms <= MAX_CLAIM_TTL_MS:
            raise InvalidParameter(f"ttl_ms must be in [1, {MAX_CLAIM_TTL_MS}]; got {ttl_ms}")
        call = ClaimSegmentsCall(self._router.group_of(name), name, batch_id, firsts, ttl_ms)
        return await self._router.run(call)

    async def mark_archived(self, name: str, batch_id: str, segments: list[int]) -> ArchiveResult:
        check_queue_name(name)
        check_batch_id(batch_id)
        firsts = check_segments(segments)
        call = MarkArchivedCall(self._router.group_of(name), name, batch_id, firsts)
        return await self._router.run(call)


async def _batches(
    first: list[SegmentRecord] | None, rest: Iterator[list[SegmentRecord]]
) -> AsyncIterator[list[SegmentRecord]]:
    """``first`` then ``rest``, yielding to the event loop between chunks (each read is one
    bounded ``pread`` of the local file)."""
    if first is None:
        return
    yield first
    for batch in rest:
        await asyncio.sleep(0)
        yield batch


async def _chunks(head: bytes, rest: Iterator[bytes]) -> AsyncIterator[bytes]:
    """``head`` then ``rest``, yielding to the event loop between chunks (each one bounded
    ``pread`` of the local file)."""
    yield head
    for piece in rest:
        await asyncio.sleep(0)
        yield piece
