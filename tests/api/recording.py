"""`RecordingService`: a `QueueService` test double for the HTTP layer.

It records every call (method name and arguments) and answers with canned but valid results;
``fail[method] = error`` makes that method raise instead. It has no queue logic: the real
service is tested end to end elsewhere.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from cmq.errors import CorruptSegment, GroupNotFound
from cmq.model import (
    ArchiveResult,
    ClaimResult,
    EntryResult,
    ExportPage,
    GroupDigest,
    ImportedMessage,
    LiveMessage,
    OutgoingMessage,
    PeekedMessage,
    QueueAttributes,
    QueueStats,
    ReceivedMessage,
    SegmentClaim,
    SegmentCounts,
    SegmentInfo,
    SegmentListing,
    SegmentRecord,
    SegmentStream,
    SentMessage,
)

CANNED_STATS = QueueStats(
    visible=3,
    in_flight=2,
    delayed=1,
    sent_total=10,
    acked_total=4,
    dead_lettered_total=0,
    expired_total=0,
    oldest_age_ms=1500,
    segments=SegmentCounts(active=1, sealed=2, released=3, archived_pending=4),
    disk_bytes=12345,
    oldest_unarchived_ms=60_000,
)


@dataclass
class Call:
    method: str
    args: tuple[Any, ...]


@dataclass
class RecordingService:
    calls: list[Call] = field(default_factory=list)
    fail: dict[str, BaseException] = field(default_factory=dict)
    created: bool = True
    queues: list[str] = field(default_factory=lambda: ["alpha", "beta"])
    attributes: QueueAttributes = field(default_factory=QueueAttributes)
    stats: QueueStats = CANNED_STATS
    purged: int = 7
    to_receive: list[ReceivedMessage] = field(default_factory=list)
    bad_receipts: frozenset[str] = frozenset()
    """Receipts answered with ``ok: false, error: "LeaseStale"``."""
    ready: bool = True
    corrupt_mid_stream: bool = False
    """`read_segment`'s records fail their checksum after the first batch."""

    def _record(self, method: str, *args: Any) -> None:
        self.calls.append(Call(method, args))
        if method in self.fail:
            raise self.fail[method]

    def _results(self, receipts: list[str]) -> list[EntryResult]:
        return [
            EntryResult(r, False, "LeaseStale") if r in self.bad_receipts else EntryResult(r, True)
            for r in receipts
        ]

    async def create_queue(self, name: str, attributes: QueueAttributes) -> bool:
        self._record("create_queue", name, attributes)
        return self.created

    async def list_queues(self) -> list[str]:
        self._record("list_queues")
        return list(self.queues)

    async def get_queue(self, name: str) -> tuple[QueueAttributes, QueueStats]:
        self._record("get_queue", name)
        return self.attributes, self.stats

    async def peek(self, name: str, limit: int) -> list[PeekedMessage]:
        self._record("peek", name, limit)
        return []

    async def set_attributes(self, name: str, changes: dict[str, Any]) -> QueueAttributes:
        self._record("set_attributes", name, changes)
        return self.attributes.merged(changes)

    async def delete_queue(self, name: str) -> None:
        self._record("delete_queue", name)

    async def purge(self, name: str) -> int:
        self._record("purge", name)
        return self.purged

    async def send(self, name: str, messages: list[OutgoingMessage]) -> list[SentMessage]:
        self._record("send", name, messages)
        return [SentMessage(id=f"m{i}", seq=100 + i) for i in range(len(messages))]

    async def receive(
        self,
        name: str,
        max_messages: int,
        visibility_timeout: int | None,
        wait_seconds: int | None,
        *,
        attempt_id: str | None = None,
    ) -> list[ReceivedMessage]:
        self._record("receive", name, max_messages, visibility_timeout, wait_seconds)
        return self.to_receive[:max_messages]

    async def ack(self, name: str, receipts: list[str]) -> list[EntryResult]:
        self._record("ack", name, receipts)
        return self._results(receipts)

    async def change_visibility(
        self, name: str, entries: list[tuple[str, int]]
    ) -> list[EntryResult]:
        self._record("change_visibility", name, entries)
        return self._results([r for r, _ in entries])

    async def nack(self, name: str, receipts: list[str], delay_seconds: int) -> list[EntryResult]:
        self._record("nack", name, receipts, delay_seconds)
        return self._results(receipts)

    # -- nodes ------------------------------------------------------------------------------------
    async def list_nodes(self) -> list[dict[str, Any]]:
        self._record("list_nodes")
        row = {"id": 1, "address": "10.0.0.1:9080", "http": "10.0.0.1:8080", "zone": "a"}
        more = {"replicas": [1, 2], "incoming": [], "leaders": [0, 1], "meta": "voter", "lag": 0}
        return [row | {"state": "active"} | more]

    async def join_node(
        self, node: int, address: str, http: str, data_dirs: tuple[str, ...], zone: str
    ) -> dict[int, str]:
        self._record("join_node", node, address, http, data_dirs, zone)
        return {1: "10.0.0.1:9080", node: address}

    async def drain_node(self, node: int) -> None:
        self._record("drain_node", node)

    async def activate_node(self, node: int) -> None:
        self._record("activate_node", node)

    async def remove_node(self, node: int) -> None:
        self._record("remove_node", node)

    async def set_groups(self, groups: int) -> tuple[int, ...]:
        self._record("set_groups", groups)
        return tuple(range(7, groups + 1))

    async def list_segments(self, name: str, state: str = "all") -> SegmentListing:
        self._record("list_segments", name, state)
        seg = SegmentInfo(1, 10, 9, 900, "released", "0a1b2c3d", SegmentClaim("b-1", 5))
        return SegmentListing(name, 1, 2, (seg,))

    async def read_segment(self, name: str, first_seq: int) -> SegmentStream:
        self._record("read_segment", name, first_seq)
        records = [
            SegmentRecord(first_seq + i, f"m{i}", 1000 + i, 1, (("k", "v"),), b"x" * i, "acked")
            for i in range(3)
        ]

        async def batches() -> AsyncIterator[list[SegmentRecord]]:
            yield records[:2]
            if self.corrupt_mid_stream:
                raise CorruptSegment("record 3 fails its checksum")
            yield records[2:]

        return SegmentStream("0a1b2c3d", batches())

    async def claim_segments(
        self, name: str, batch_id: str, segments: list[int], ttl_ms: int
    ) -> ClaimResult:
        self._record("claim_segments", name, batch_id, segments, ttl_ms)
        return ClaimResult(tuple(segments), ())

    async def mark_archived(self, name: str, batch_id: str, segments: list[int]) -> ArchiveResult:
        self._record("mark_archived", name, batch_id, segments)
        return ArchiveResult(tuple(segments), (), ())

    async def export_catalog(self) -> dict[str, Any]:
        self._record("export_catalog")
        return {"release": "0.1.0", "sections": {"keys": [], "metadata": {}}}

    async def import_catalog(
        self, keys: list[Any], metadata: dict[str, dict[str, str]]
    ) -> dict[str, Any]:
        self._record("import_catalog", keys, metadata)
        return {
            "keys_created": [k["access_key_id"] for k in keys],
            "keys_present": [],
            "metadata": [],
        }

    async def export_messages(self, name: str, after: int, upto: int, limit: int) -> ExportPage:
        self._record("export_messages", name, after, upto, limit)
        m = LiveMessage("m1", 1, b"x", False, 1000, (), "visible", 0, 0)
        return ExportPage((m,), 2, None, 1000)

    async def import_messages(
        self, name: str, messages: list[ImportedMessage], expect_sent: int
    ) -> list[SentMessage]:
        self._record("import_messages", name, messages, expect_sent)
        return [SentMessage(m.id, expect_sent + i + 1) for i, m in enumerate(messages)]

    async def group_digest(self, group: int) -> GroupDigest:
        self._record("group_digest", group)
        if group != 1:
            raise GroupNotFound(f"node 1 hosts no replica of data group {group}")
        return GroupDigest(1, 1, 10, "0" * 64, 12, "1" * 64, 0)

    def is_ready(self) -> bool:
        self._record("is_ready")
        return self.ready

    def status(self) -> dict[str, Any]:
        self._record("status")
        group = {
            "role": "leader",
            "term": 2,
            "leader": 1,
            "commit": 10,
            "applied": 10,
            "last_index": 10,
            "voters": [1, 2, 3],
            "lag": {"2": 0, "3": 1},
        }
        return {"node": 1, "queues": 0, "groups": {"0": group}}

    def methods(self) -> list[str]:
        return [c.method for c in self.calls]
