"""What crosses the front-end socket (`cmq.frontend.wire` frames it): one frozen msgspec
`Struct` per `QueueService` method, with the type of its result and the code that runs it on a
service, plus the node's state and metrics, and the access key calls (`cmq.frontend.key_calls`).
The base, `Call` and `Failure`, and the wire version are in `cmq.frontend.base`. Pure: no I/O.

A call encodes as a MessagePack array whose first item is its tag (checked field by field on
decoding); its fields are the method's parameters, in order (a test checks them against
`cmq.service.QueueService`). `cmq.model` values are maps of their fields; message bodies are
MessagePack binaries. A `CmqError` crosses as a `Failure` (code, message, ``retry_after``),
rebuilt from its code with `cmq.errors.error_for`.
"""

from __future__ import annotations

import typing
from collections.abc import AsyncIterator
from typing import Any, Final, TypeVar, cast

import msgspec

from cmq import model
from cmq.errors import CmqError
from cmq.export_values import ExportPage, ImportedMessage
from cmq.frontend.base import Call, Failure, encoder
from cmq.frontend.key_calls import KEY_CALLS, CopyKeys, CreateKey, DeleteKey, GrantKey, RevokeKey
from cmq.model import (
    EntryResult,
    OutgoingMessage,
    PeekedMessage,
    QueueAttributes,
    QueueStats,
    ReceivedMessage,
    SendRefused,
    SentMessage,
)
from cmq.segment_values import (
    ArchiveResult,
    ClaimResult,
    SegmentData,
    SegmentListing,
    SegmentRecord,
    SegmentStream,
)
from cmq.service import QueueService

R = TypeVar("R")


# -- queues ----------------------------------------------------------------------------------------
class CreateQueue(Call[bool], frozen=True, tag=1):
    result_type = bool
    name: str
    attributes: QueueAttributes

    async def run(self, service: QueueService) -> bool:
        return await service.create_queue(self.name, self.attributes)


class ListQueues(Call[list[str]], frozen=True, tag=2):
    result_type = list[str]

    async def run(self, service: QueueService) -> list[str]:
        return await service.list_queues()


class GetQueue(Call[tuple[QueueAttributes, QueueStats]], frozen=True, tag=3):
    result_type = tuple[QueueAttributes, QueueStats]
    name: str

    async def run(self, service: QueueService) -> tuple[QueueAttributes, QueueStats]:
        return await service.get_queue(self.name)


class Peek(Call[list[PeekedMessage]], frozen=True, tag=4):
    result_type = list[PeekedMessage]
    name: str
    limit: int

    async def run(self, service: QueueService) -> list[PeekedMessage]:
        return await service.peek(self.name, self.limit)


class SetAttributes(Call[QueueAttributes], frozen=True, tag=5):
    result_type = QueueAttributes
    name: str
    changes: dict[str, Any]

    async def run(self, service: QueueService) -> QueueAttributes:
        return await service.set_attributes(self.name, self.changes)


class DeleteQueue(Call[None], frozen=True, tag=6):
    result_type = None
    name: str

    async def run(self, service: QueueService) -> None:
        await service.delete_queue(self.name)


class QueueMetadata(Call[dict[str, str]], frozen=True, tag=7):
    result_type = dict[str, str]
    name: str

    async def run(self, service: QueueService) -> dict[str, str]:
        return await service.queue_metadata(self.name)


class UpdateMetadata(Call[dict[str, str]], frozen=True, tag=8):
    result_type = dict[str, str]
    name: str
    changes: dict[str, str]
    unset: list[str]

    async def run(self, service: QueueService) -> dict[str, str]:
        return await service.update_metadata(self.name, self.changes, self.unset)


class Purge(Call[int], frozen=True, tag=9):
    result_type = int
    name: str

    async def run(self, service: QueueService) -> int:
        return await service.purge(self.name)


class Rewind(Call[int], frozen=True, tag=34):
    result_type = int
    name: str
    since_ms: int

    async def run(self, service: QueueService) -> int:
        return await service.rewind(self.name, self.since_ms)


# -- messages --------------------------------------------------------------------------------------
class _Sent(msgspec.Struct, frozen=True, array_like=True, tag=0):
    id: str
    seq: int


class _Refused(msgspec.Struct, frozen=True, array_like=True, tag=1):
    code: str
    message: str


class Send(Call[list[SentMessage | SendRefused]], frozen=True, tag=10):
    """``per_entry`` False: the result holds `SentMessage`s only (any refusal is raised)."""

    result_type = list[_Sent | _Refused]
    name: str
    messages: list[OutgoingMessage]
    per_entry: bool = False

    async def run(self, service: QueueService) -> list[SentMessage | SendRefused]:
        if self.per_entry:
            return await service.send(self.name, self.messages, per_entry=True)
        return list(await service.send(self.name, self.messages))

    def encode_result(self, result: list[SentMessage | SendRefused]) -> bytes:
        return encoder.encode(
            [
                _Refused(r.code, r.message) if isinstance(r, SendRefused) else _Sent(r.id, r.seq)
                for r in result
            ]
        )

    def decode_result(self, payload: bytes) -> list[SentMessage | SendRefused]:
        got = cast(list[_Sent | _Refused], super().decode_result(payload))
        return [
            SendRefused(r.code, r.message) if isinstance(r, _Refused) else SentMessage(r.id, r.seq)
            for r in got
        ]


class Receive(Call[list[ReceivedMessage]], frozen=True, tag=11):
    result_type = list[ReceivedMessage]
    name: str
    max_messages: int
    visibility_timeout: int | None
    wait_seconds: int | None
    attempt_id: str | None = None

    async def run(self, service: QueueService) -> list[ReceivedMessage]:
        return await service.receive(
            self.name,
            self.max_messages,
            self.visibility_timeout,
            self.wait_seconds,
            attempt_id=self.attempt_id,
        )


class Ack(Call[list[EntryResult]], frozen=True, tag=12):
    result_type = list[EntryResult]
    name: str
    receipts: list[str]

    async def run(self, service: QueueService) -> list[EntryResult]:
        return await service.ack(self.name, self.receipts)


class ChangeVisibility(Call[list[EntryResult]], frozen=True, tag=13):
    result_type = list[EntryResult]
    name: str
    entries: list[tuple[str, int]]

    async def run(self, service: QueueService) -> list[EntryResult]:
        return await service.change_visibility(self.name, self.entries)


class Nack(Call[list[EntryResult]], frozen=True, tag=14):
    result_type = list[EntryResult]
    name: str
    receipts: list[str]
    delay_seconds: int

    async def run(self, service: QueueService) -> list[EntryResult]:
        return await service.nack(self.name, self.receipts, self.delay_seconds)


# -- segments (the archive) ------------------------------------------------------------------------
class ListSegments(Call[SegmentListing], frozen=True, tag=15):
    result_type = SegmentListing
    name: str
    state: str = "all"

    async def run(self, service: QueueService) -> SegmentListing:
        return await service.list_segments(self.name, self.state)


class SegmentRead(msgspec.Struct, frozen=True, array_like=True):
    """A released segment read whole in the node process: its records up to the end or to
    its damage (``damage``: the error its stream raised after those)."""

    checksum: str
    batches: list[list[SegmentRecord]]
    damage: Failure | None = None

    def stream(self) -> SegmentStream:
        """The records again as the node's stream gave them (the damage raised last)."""

        async def replay() -> AsyncIterator[list[SegmentRecord]]:
            for batch in self.batches:
                yield batch
            if self.damage is not None:
                raise self.damage.error()

        return SegmentStream(self.checksum, replay())


class ReadSegment(Call[SegmentRead], frozen=True, tag=16):
    result_type = SegmentRead
    name: str
    first_seq: int

    async def run(self, service: QueueService) -> SegmentRead:
        stream = await service.read_segment(self.name, self.first_seq)
        batches: list[list[SegmentRecord]] = []
        damage = None
        try:
            async for batch in stream.batches:
                batches.append(batch)
        except CmqError as e:
            damage = Failure.of(e)
        return SegmentRead(stream.checksum, batches, damage)


class SegmentDataRead(msgspec.Struct, frozen=True, array_like=True):
    """A released segment's binary read (`cmq.fsm.segdata`) whole, read in the node process up
    to its end or to its damage (``damage``: the error raised after ``data``)."""

    checksum: str
    data: bytes
    damage: Failure | None = None

    def stream(self) -> SegmentData:
        """The bytes again as one chunk (the damage raised after it)."""

        async def replay() -> AsyncIterator[bytes]:
            if self.data:
                yield self.data
            if self.damage is not None:
                raise self.damage.error()

        return SegmentData(self.checksum, replay())


class ReadSegmentData(Call[SegmentDataRead], frozen=True, tag=35):
    result_type = SegmentDataRead
    name: str
    first_seq: int

    async def run(self, service: QueueService) -> SegmentDataRead:
        got = await service.read_segment_data(self.name, self.first_seq)
        pieces: list[bytes] = []
        damage = None
        try:
            async for piece in got.chunks:
                pieces.append(piece)
        except CmqError as e:
            damage = Failure.of(e)
        return SegmentDataRead(got.checksum, b"".join(pieces), damage)


class ClaimSegments(Call[ClaimResult], frozen=True, tag=17):
    result_type = ClaimResult
    name: str
    batch_id: str
    segments: list[int]
    ttl_ms: int

    async def run(self, service: QueueService) -> ClaimResult:
        return await service.claim_segments(self.name, self.batch_id, self.segments, self.ttl_ms)


class MarkArchived(Call[ArchiveResult], frozen=True, tag=18):
    result_type = ArchiveResult
    name: str
    batch_id: str
    segments: list[int]

    async def run(self, service: QueueService) -> ArchiveResult:
        return await service.mark_archived(self.name, self.batch_id, self.segments)


class GroupDigest(Call[model.GroupDigest], frozen=True, tag=19):
    result_type = model.GroupDigest
    group: int

    async def run(self, service: QueueService) -> model.GroupDigest:
        return await service.group_digest(self.group)


# -- backup and restore ----------------------------------------------------------------------------
class ExportCatalog(Call[dict[str, Any]], frozen=True, tag=20):
    result_type = dict[str, Any]

    async def run(self, service: QueueService) -> dict[str, Any]:
        return await service.export_catalog()


class ImportCatalog(Call[dict[str, Any]], frozen=True, tag=21):
    result_type = dict[str, Any]
    keys: list[Any]
    metadata: dict[str, dict[str, str]]

    async def run(self, service: QueueService) -> dict[str, Any]:
        return await service.import_catalog(self.keys, self.metadata)


class ExportMessages(Call[ExportPage], frozen=True, tag=22):
    result_type = ExportPage
    name: str
    after: int
    upto: int
    limit: int

    async def run(self, service: QueueService) -> ExportPage:
        return await service.export_messages(self.name, self.after, self.upto, self.limit)


class ImportMessages(Call[list[SentMessage]], frozen=True, tag=23):
    result_type = list[SentMessage]
    name: str
    messages: list[ImportedMessage]
    expect_sent: int

    async def run(self, service: QueueService) -> list[SentMessage]:
        return await service.import_messages(self.name, self.messages, self.expect_sent)


# -- nodes and feature flags -----------------------------------------------------------------------
class ListNodes(Call[list[dict[str, Any]]], frozen=True, tag=24):
    result_type = list[dict[str, Any]]

    async def run(self, service: QueueService) -> list[dict[str, Any]]:
        return await service.list_nodes()


class JoinNode(Call[dict[int, str]], frozen=True, tag=25):
    result_type = dict[int, str]
    node: int
    address: str
    http: str
    data_dirs: tuple[str, ...]
    zone: str

    async def run(self, service: QueueService) -> dict[int, str]:
        return await service.join_node(
            self.node, self.address, self.http, self.data_dirs, self.zone
        )


class DrainNode(Call[None], frozen=True, tag=26):
    result_type = None
    node: int

    async def run(self, service: QueueService) -> None:
        await service.drain_node(self.node)


class ActivateNode(Call[None], frozen=True, tag=27):
    result_type = None
    node: int

    async def run(self, service: QueueService) -> None:
        await service.activate_node(self.node)


class RemoveNode(Call[None], frozen=True, tag=28):
    result_type = None
    node: int

    async def run(self, service: QueueService) -> None:
        await service.remove_node(self.node)


class SetGroups(Call[tuple[int, ...]], frozen=True, tag=29):
    result_type = tuple[int, ...]
    groups: int

    async def run(self, service: QueueService) -> tuple[int, ...]:
        return await service.set_groups(self.groups)


class ListFeatures(Call[list[dict[str, Any]]], frozen=True, tag=30):
    result_type = list[dict[str, Any]]

    async def run(self, service: QueueService) -> list[dict[str, Any]]:
        return await service.list_features()


class EnableFeatures(Call[list[str]], frozen=True, tag=31):
    result_type = list[str]
    names: list[str] | None

    async def run(self, service: QueueService) -> list[str]:
        return await service.enable_features(self.names)


# -- the node's state, for the synchronous methods and /metrics ------------------------------------
class NodeState(msgspec.Struct, frozen=True, array_like=True):
    """`QueueService.is_ready` and `QueueService.status`, read together."""

    ready: bool
    status: dict[str, Any]


class State(Call[NodeState], frozen=True, tag=32):
    result_type = NodeState

    async def run(self, service: QueueService) -> NodeState:
        return NodeState(service.is_ready(), service.status())


class Metrics(Call[bytes], frozen=True, tag=33):
    """The node's Prometheus text (empty when it exports none); run by the server itself."""

    result_type = bytes


AnyCall = (
    CreateQueue
    | ListQueues
    | GetQueue
    | Peek
    | SetAttributes
    | DeleteQueue
    | QueueMetadata
    | UpdateMetadata
    | Purge
    | Rewind
    | Send
    | Receive
    | Ack
    | ChangeVisibility
    | Nack
    | ListSegments
    | ReadSegment
    | ClaimSegments
    | MarkArchived
    | GroupDigest
    | ExportCatalog
    | ImportCatalog
    | ExportMessages
    | ImportMessages
    | ListNodes
    | JoinNode
    | DrainNode
    | ActivateNode
    | RemoveNode
    | SetGroups
    | ListFeatures
    | EnableFeatures
    | State
    | Metrics
    | ReadSegmentData
    | CopyKeys
    | CreateKey
    | GrantKey
    | RevokeKey
    | DeleteKey
)
CALLS: Final[dict[str, type[Call[Any]]]] = {
    c.METHOD: c for c in typing.get_args(AnyCall) if c not in (State, Metrics, *KEY_CALLS)
}
"""The `QueueService` coroutine methods by name, each with its call (``is_ready`` and
``status`` are `State`; the key calls, `cmq.frontend.key_calls`, are the key ring's; a test
checks this against the protocol)."""
CALL_TAGS: Final = frozenset(range(1, 41))
"""The call tags this release reads (a test checks them against the structs)."""
