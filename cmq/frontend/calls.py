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
from cmq.failure import Failure
from cmq.frontend.base import Call, encoder
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
    name: str
    attributes: QueueAttributes


class ListQueues(Call[list[str]], frozen=True, tag=2):
    """`QueueService.list_queues` (no parameters)."""


class GetQueue(Call[tuple[QueueAttributes, QueueStats]], frozen=True, tag=3):
    name: str


class Peek(Call[list[PeekedMessage]], frozen=True, tag=4):
    name: str
    limit: int


class SetAttributes(Call[QueueAttributes], frozen=True, tag=5):
    name: str
    changes: dict[str, Any]


class DeleteQueue(Call[None], frozen=True, tag=6):
    name: str


class QueueMetadata(Call[dict[str, str]], frozen=True, tag=7):
    name: str


class UpdateMetadata(Call[dict[str, str]], frozen=True, tag=8):
    name: str
    changes: dict[str, str]
    unset: list[str]


class Purge(Call[int], frozen=True, tag=9):
    name: str


class Rewind(Call[int], frozen=True, tag=34):
    name: str
    since_ms: int


# -- messages --------------------------------------------------------------------------------------
class _Sent(msgspec.Struct, frozen=True, array_like=True, tag=0):
    id: str
    seq: int


class _Refused(msgspec.Struct, frozen=True, array_like=True, tag=1):
    code: str
    message: str


class Send(Call[list[SentMessage]], frozen=True, tag=10):
    result_type = list[_Sent]
    name: str
    messages: list[OutgoingMessage]

    def encode_result(self, result: list[SentMessage]) -> bytes:
        return encoder.encode([_Sent(r.id, r.seq) for r in result])

    def decode_result(self, payload: bytes) -> list[SentMessage]:
        got = cast(list[_Sent], super().decode_result(payload))
        return [SentMessage(r.id, r.seq) for r in got]


class SendEach(Call[list[SentMessage | SendRefused]], frozen=True, tag=41):
    result_type = list[_Sent | _Refused]
    name: str
    messages: list[OutgoingMessage]

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
    name: str
    max_messages: int
    visibility_timeout: int | None
    wait_seconds: int | None
    attempt_id: str | None = None


class Ack(Call[list[EntryResult]], frozen=True, tag=12):
    name: str
    receipts: list[str]


class ChangeVisibility(Call[list[EntryResult]], frozen=True, tag=13):
    name: str
    entries: list[tuple[str, int]]


class Nack(Call[list[EntryResult]], frozen=True, tag=14):
    name: str
    receipts: list[str]
    delay_seconds: int


# -- segments (the archive) ------------------------------------------------------------------------
class ListSegments(Call[SegmentListing], frozen=True, tag=15):
    name: str
    state: str = "all"


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
    name: str
    batch_id: str
    segments: list[int]
    ttl_ms: int


class MarkArchived(Call[ArchiveResult], frozen=True, tag=18):
    name: str
    batch_id: str
    segments: list[int]


class GroupDigest(Call[model.GroupDigest], frozen=True, tag=19):
    group: int


# -- backup and restore ----------------------------------------------------------------------------
class ExportCatalog(Call[dict[str, Any]], frozen=True, tag=20):
    """`QueueService.export_catalog` (no parameters)."""


class ImportCatalog(Call[dict[str, Any]], frozen=True, tag=21):
    keys: list[Any]
    metadata: dict[str, dict[str, str]]


class ExportMessages(Call[ExportPage], frozen=True, tag=22):
    name: str
    after: int
    upto: int
    limit: int


class ImportMessages(Call[list[SentMessage]], frozen=True, tag=23):
    name: str
    messages: list[ImportedMessage]
    expect_sent: int


# -- nodes and feature flags -----------------------------------------------------------------------
class ListNodes(Call[list[dict[str, Any]]], frozen=True, tag=24):
    """`QueueService.list_nodes` (no parameters)."""


class JoinNode(Call[dict[int, str]], frozen=True, tag=25):
    node: int
    address: str
    http: str
    data_dirs: tuple[str, ...]
    zone: str


class DrainNode(Call[None], frozen=True, tag=26):
    node: int


class ActivateNode(Call[None], frozen=True, tag=27):
    node: int


class RemoveNode(Call[None], frozen=True, tag=28):
    node: int


class SetGroups(Call[tuple[int, ...]], frozen=True, tag=29):
    groups: int


class ListFeatures(Call[list[dict[str, Any]]], frozen=True, tag=30):
    """`QueueService.list_features` (no parameters)."""


class EnableFeatures(Call[list[str]], frozen=True, tag=31):
    names: list[str] | None


# -- the node's state, for the synchronous methods and /metrics ------------------------------------
class NodeState(msgspec.Struct, frozen=True, array_like=True):
    """`QueueService.is_ready` and `QueueService.status`, read together."""

    ready: bool
    status: dict[str, Any]


class State(Call[NodeState], frozen=True, tag=32):
    async def run(self, service: QueueService) -> NodeState:
        return NodeState(service.is_ready(), service.status())


class Metrics(Call[bytes], frozen=True, tag=33):
    """The node's Prometheus text (empty when it exports none); run by the server itself."""


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
    | SendEach
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
CALL_TAGS: Final = frozenset(range(1, 42))
"""The call tags this release reads (a test checks them against the structs)."""
