"""`RecordingService`: a `QueueService` test double for the HTTP layer.

It records every call (method name and arguments) and answers with canned but valid results;
``fail[method] = error`` makes that method raise instead. It has no queue logic: the real
service is tested end to end elsewhere. The recording is derived from the protocol
(`cmq.service.SERVICE_METHODS`): a class of it lacking a service method fails at import, and
each method only says what it answers.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from cmq.errors import CorruptSegment, GroupNotFound
from cmq.export_values import ExportPage, ImportedMessage, LiveMessage
from cmq.model import (
    EntryResult,
    GroupDigest,
    OutgoingMessage,
    PeekedMessage,
    QueueAttributes,
    QueueStats,
    ReceivedMessage,
    SegmentCounts,
    SendRefused,
    SentMessage,
)
from cmq.segment_values import (
    ArchiveResult,
    ClaimResult,
    SegmentClaim,
    SegmentData,
    SegmentInfo,
    SegmentListing,
    SegmentRecord,
    SegmentStream,
)
from cmq.service import SERVICE_METHODS

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
    kwargs: dict[str, Any] = field(default_factory=dict, compare=False)
    """Keyword arguments (not compared: a call is identified by its positional ones)."""


def _recorded(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` recording its call (and raising ``fail[name]``) first."""
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def call(self: RecordingService, *args: Any, **kwargs: Any) -> Any:
            self._record(name, *args, **kwargs)
            return await method(self, *args, **kwargs)

        return call

    @functools.wraps(method)
    def sync_call(self: RecordingService, *args: Any, **kwargs: Any) -> Any:
        self._record(name, *args, **kwargs)
        return method(self, *args, **kwargs)

    return sync_call


class Recorder:
    """Records the `QueueService` calls of its subclasses (see the module docstring)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        missing = [n for n in SERVICE_METHODS if not callable(getattr(cls, n, None))]
        if missing:
            raise TypeError(f"{cls.__name__} lacks the QueueService methods {missing}")
        for name in SERVICE_METHODS:
            if name in cls.__dict__:
                setattr(cls, name, _recorded(name, cls.__dict__[name]))


@dataclass
class RecordingService(Recorder):
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

    def _record(self, method: str, *args: Any, **kwargs: Any) -> None:
        self.calls.append(Call(method, args, kwargs))
        if method in self.fail:
            raise self.fail[method]

    def _results(self, receipts: list[str]) -> list[EntryResult]:
        return [
            EntryResult(r, False, "LeaseStale") if r in self.bad_receipts else EntryResult(r, True)
            for r in receipts
        ]

    async def create_queue(self, name: str, attributes: QueueAttributes) -> bool:
        return self.created

    async def list_queues(self) -> list[str]:
        return list(self.queues)

    async def get_queue(self, name: str) -> tuple[QueueAttributes, QueueStats]:
        return self.attributes, self.stats

    async def peek(self, name: str, limit: int) -> list[PeekedMessage]:
        return []

    async def set_attributes(self, name: str, changes: dict[str, Any]) -> QueueAttributes:
        return self.attributes.merged(changes)

    async def delete_queue(self, name: str) -> None:
        return None

    async def queue_metadata(self, name: str) -> dict[str, str]:
        return {}

    async def update_metadata(
        self, name: str, changes: dict[str, str], unset: list[str]
    ) -> dict[str, str]:
        return dict(changes)

    async def purge(self, name: str) -> int:
        return self.purged

    async def rewind(self, name: str, since_ms: int) -> int:
        return 0 if since_ms < 0 else 2

    async def send(self, name: str, messages: list[OutgoingMessage]) -> list[SentMessage]:
        return [SentMessage(id=f"m{i}", seq=100 + i) for i in range(len(messages))]

    async def send_each(
        self, name: str, messages: list[OutgoingMessage]
    ) -> list[SentMessage | SendRefused]:
        return [SentMessage(id=f"m{i}", seq=100 + i) for i in range(len(messages))]

    async def receive(
        self, name: str, max_messages: int, *_: Any, **__: Any
    ) -> list[ReceivedMessage]:
        return self.to_receive[:max_messages]

    async def ack(self, name: str, receipts: list[str]) -> list[EntryResult]:
        return self._results(receipts)

    async def change_visibility(
        self, name: str, entries: list[tuple[str, int]]
    ) -> list[EntryResult]:
        return self._results([r for r, _ in entries])

    async def nack(self, name: str, receipts: list[str], delay_seconds: int) -> list[EntryResult]:
        return self._results(receipts)

    # -- nodes ------------------------------------------------------------------------------------
    async def list_nodes(self) -> list[dict[str, Any]]:
        row = {"id": 1, "address": "10.0.0.1:9080", "http": "10.0.0.1:8080", "zone": "a"}
        more = {"replicas": [1, 2], "incoming": [], "leaders": [0, 1], "meta": "voter", "lag": 0}
        return [row | {"state": "active"} | more]

    async def join_node(
        self, node: int, address: str, http: str, data_dirs: tuple[str, ...], zone: str
    ) -> dict[int, str]:
        return {1: "10.0.0.1:9080", node: address}

    async def drain_node(self, node: int) -> None:
        return None

    async def activate_node(self, node: int) -> None:
        return None

    async def remove_node(self, node: int) -> None:
        return None

    async def set_groups(self, groups: int) -> tuple[int, ...]:
        return tuple(range(7, groups + 1))

    async def list_features(self) -> list[dict[str, Any]]:
        flag = {"name": "queue_retime", "since": "0.2.0", "description": "Retime commands"}
        return [flag | {"enabled": False, "supported_by": [1], "missing": []}]

    async def enable_features(self, names: list[str] | None) -> list[str]:
        return list(names or ["queue_retime"])

    async def list_segments(self, name: str, state: str = "all") -> SegmentListing:
        seg = SegmentInfo(1, 10, 9, 900, "released", "0a1b2c3d", SegmentClaim("b-1", 5))
        return SegmentListing(name, 1, 2, (seg,))

    async def read_segment(self, name: str, first_seq: int) -> SegmentStream:
        records = [
            SegmentRecord(
                first_seq + i, f"m{i}", 1000 + i, 1, (("k", "v"),), b"x" * i, "acked", 2 * i
            )
            for i in range(3)
        ]

        async def batches() -> AsyncIterator[list[SegmentRecord]]:
            yield records[:2]
            if self.corrupt_mid_stream:
                raise CorruptSegment("record 3 fails its checksum")
            yield records[2:]

        return SegmentStream("0a1b2c3d", batches())

    async def read_segment_data(self, name: str, first_seq: int) -> SegmentData:
        async def chunks() -> AsyncIterator[bytes]:
            yield b"head"
            yield b"frame"
            if self.corrupt_mid_stream:
                raise CorruptSegment("crc differs from the recorded one")
            yield b"end"

        return SegmentData("0a1b2c3d", chunks())

    async def claim_segments(
        self, name: str, batch_id: str, segments: list[int], ttl_ms: int
    ) -> ClaimResult:
        return ClaimResult(tuple(segments), ())

    async def mark_archived(self, name: str, batch_id: str, segments: list[int]) -> ArchiveResult:
        return ArchiveResult(tuple(segments), (), ())

    async def export_catalog(self) -> dict[str, Any]:
        return {"release": "0.1.0", "sections": {"keys": [], "metadata": {}}}

    async def import_catalog(
        self, keys: list[Any], metadata: dict[str, dict[str, str]]
    ) -> dict[str, Any]:
        return {
            "keys_created": [k["access_key_id"] for k in keys],
            "keys_present": [],
            "metadata": [],
        }

    async def export_messages(self, name: str, after: int, upto: int, limit: int) -> ExportPage:
        m = LiveMessage("m1", 1, b"x", False, 1000, (), "visible", 0, 0)
        return ExportPage((m,), 2, None, 1000)

    async def import_messages(
        self, name: str, messages: list[ImportedMessage], expect_sent: int
    ) -> list[SentMessage]:
        return [SentMessage(m.id, expect_sent + i + 1) for i, m in enumerate(messages)]

    async def group_digest(self, group: int) -> GroupDigest:
        if group != 1:
            raise GroupNotFound(f"node 1 hosts no replica of data group {group}")
        return GroupDigest(1, 1, 10, "0" * 64, 12, "1" * 64, 0)

    def is_ready(self) -> bool:
        return self.ready

    def status(self) -> dict[str, Any]:
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
