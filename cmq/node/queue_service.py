"""`QueueCalls`: the `cmq.service.QueueService` calls of a node, each a check of its arguments
and a typed call through the node's `cmq.routing.router.Router` (to the queue's group leader,
here or forwarded), or through the operator parts (`cmq.admin`, `cmq.node.archive_side`).

`cmq.node.queue_node.QueueNode` composes the parts these calls use and inherits them; this
module holds no composition, lifecycle or background work. The calls' contracts are
`cmq.service.QueueService`'s: a call returns after its change is committed on a majority of the
queue's replicas, or raises a `cmq.errors.CmqError`; bad input (a queue name, a range, a
feature the cluster has not enabled) is refused here, before anything is sent anywhere.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from cmq.admin.backup_admin import BackupAdmin
from cmq.admin.feature_admin import FeatureAdmin
from cmq.admin.nodes_admin import NodesAdmin
from cmq.catalog import META_GROUP
from cmq.catalog.meta import CatalogMachine
from cmq.errors import InvalidParameter, Overloaded, QueueNotFound, Unavailable
from cmq.export_values import ExportPage, ImportedMessage
from cmq.fsm.machine import QueueMachine
from cmq.logs import log_scope
from cmq.longpoll import sliced
from cmq.model import (
    DEFAULT_MAX_DELAY_SECONDS,
    MAX_PEEK,
    EntryResult,
    OutgoingMessage,
    PeekedMessage,
    QueueAttributes,
    QueueStats,
    ReceivedMessage,
    SendRefused,
    SentMessage,
    check_fifo_id,
    check_queue_name,
    check_send_rules,
    delay_refusal,
    is_fifo_name,
    send_refusal,
    size_refusal,
    within_retention,
)
from cmq.node.archive_side import ArchiveSide
from cmq.node.config import NodeConfig
from cmq.routing.produce import ProduceBuilder
from cmq.routing.router import Router
from cmq.routing.rpc import (
    AckCall,
    AssignQueueCall,
    ChangeVisibilityCall,
    CreateQueueCall,
    DeleteQueueCall,
    GetQueueCall,
    NackCall,
    PeekCall,
    PurgeCall,
    QueueMetaCall,
    ReceiveCall,
    RemoveQueueCall,
    RewindCall,
    SetAttributesCall,
)
from cmq.segment_values import (
    ArchiveResult,
    ClaimResult,
    SegmentData,
    SegmentListing,
    SegmentStream,
)
from cmq.upgrade import features
from raftlog.runtime import Clock, MultiRaft

__all__ = ["CATALOG_CATCH_UP", "FORWARDED_POLL_SECONDS", "QueueCalls"]

CATALOG_CATCH_UP = 2.0
"""Seconds a create or delete waits for this node's catalog to show it (`_catalog_shows`)."""


FORWARDED_POLL_SECONDS = 1
"""A long poll through a node that does not lead the queue's group waits at the leader in
chunks of at most this many seconds. A peer call cannot be cancelled, so a poll whose caller
has gone (a request cancelled, a stream subscription ended) goes on at the leader: in chunks it
ends there within a second, instead of leasing messages for nobody for up to 20 s (the chaos
runner's stream consumers, subscribing for a second or two at a time through followers, saw
their queue's messages leased again and again by such abandoned polls and never drained)."""


class QueueCalls:
    """The `cmq.service.QueueService` calls over a node's parts. Not built on its own: the
    class that inherits it (`cmq.node.queue_node.QueueNode`) sets every attribute annotated
    below in its ``__init__``, before any call is made; these calls only read them (and take
    and release `_send_slots`). They keep no state of their own."""

    id: int
    """This node's id."""
    cfg: NodeConfig
    raft: MultiRaft
    catalog: CatalogMachine
    """The meta group's state machine as applied here (queue names, groups, features)."""
    machines: dict[int, QueueMachine]
    """The data groups with a replica here, by group."""
    router: Router
    clock_source: Clock
    """The node's one clock (wall ms for retention and delay checks)."""
    admin: NodesAdmin
    feature_admin: FeatureAdmin
    backups: BackupAdmin
    archive: ArchiveSide
    _produce: ProduceBuilder
    _send_slots: asyncio.Semaphore
    """`NodeConfig.max_inflight_sends` slots, one held by each send in flight."""

    # -- queues ----------------------------------------------------------------------------------
    async def create_queue(self, name: str, attributes: QueueAttributes) -> bool:
        check_queue_name(name)
        if is_fifo_name(name) != attributes.fifo:
            raise InvalidParameter(
                "a FIFO queue's name ends in .fifo (and only a FIFO queue's): "
                f"{name!r} with fifo={attributes.fifo}"
            )
        if attributes.dead_letter_queue == name:
            raise InvalidParameter("a queue cannot be its own dead-letter queue")
        attributes = QueueAttributes.from_dict(attributes.to_dict())  # ranges, cross-field rules
        if attributes.retry is not None:
            self._require(features.RETRY_BACKOFF, "retry policies")
        if attributes.max_delay_seconds != DEFAULT_MAX_DELAY_SECONDS:
            self._require(features.LONG_DELAYS, "a max_delay_seconds other than 900")
        if attributes.priorities != 1:
            self._require(features.MESSAGE_PRIORITIES, "priorities other than 1")
        if attributes.retain_acked_seconds:
            self._require(features.REWIND, "a retain_acked_seconds above 0")
        if not self.catalog.initialized:
            raise Unavailable("the cluster is not initialized yet; retry")
        group = await self.router.run(AssignQueueCall(META_GROUP, name))
        created = await self.router.run(CreateQueueCall(group, name, attributes))
        await self._catalog_shows(lambda: self.catalog.group_of(name) == group)
        return created

    def _require(self, flag: str, what: str) -> None:
        """`FeatureNotEnabled` unless feature ``flag`` is enabled (``what`` needs it)."""
        if not self.catalog.feature_enabled(flag):
            raise features.not_enabled(flag, what)

    async def list_queues(self) -> list[str]:
        return self.catalog.names()

    async def get_queue(self, name: str) -> tuple[QueueAttributes, QueueStats]:
        check_queue_name(name)
        return await self.router.run(GetQueueCall(self.router.group_of(name), name))

    async def peek(self, name: str, limit: int) -> list[PeekedMessage]:
        check_queue_name(name)
        if not 1 <= limit <= MAX_PEEK:
            raise InvalidParameter(f"peek must be in [1, {MAX_PEEK}]; got {limit}")
        return await self.router.run(PeekCall(self.router.group_of(name), name, limit))

    async def set_attributes(self, name: str, changes: dict[str, Any]) -> QueueAttributes:
        check_queue_name(name)
        checked = QueueAttributes.check_changes(changes)  # before anything is sent anywhere
        if checked.get("retry") is not None:
            self._require(features.RETRY_BACKOFF, "retry policies")
        if checked.get("max_delay_seconds", DEFAULT_MAX_DELAY_SECONDS) != DEFAULT_MAX_DELAY_SECONDS:
            self._require(features.LONG_DELAYS, "a max_delay_seconds other than 900")
        if checked.get("priorities", 1) != 1:
            self._require(features.MESSAGE_PRIORITIES, "priorities other than 1")
        if checked.get("retain_acked_seconds"):
            self._require(features.REWIND, "a retain_acked_seconds above 0")
        if "fifo" in changes and changes["fifo"] != is_fifo_name(name):
            raise InvalidParameter("fifo is fixed at creation")
        call = SetAttributesCall(self.router.group_of(name), name, tuple(changes.items()))
        return await self.router.run(call)

    async def delete_queue(self, name: str) -> None:
        check_queue_name(name)
        await self.router.run(DeleteQueueCall(self.router.group_of(name), name))
        await self.router.run(RemoveQueueCall(META_GROUP, name))
        await self._catalog_shows(lambda: self.catalog.group_of(name) is None)

    async def _catalog_shows(self, change: Callable[[], bool]) -> None:
        """Read your writes: a catalog change committed at the catalog's leader (maybe
        another node) is applied here a little later; wait (at most `CATALOG_CATCH_UP`
        seconds) until this node's catalog shows ``change``, so that the caller's next request
        to this node (list, send, create again) sees it. On timeout (this node cut off from
        the leader) the change is committed all the same, and this returns."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CATALOG_CATCH_UP
        while not change() and loop.time() < deadline:
            await asyncio.sleep(0.002)

    async def queue_metadata(self, name: str) -> dict[str, str]:
        check_queue_name(name)
        meta = await self.router.run(QueueMetaCall(META_GROUP, name))
        if meta is None:
            raise QueueNotFound(f"queue {name!r} does not exist")
        return meta

    async def update_metadata(
        self, name: str, changes: dict[str, str], unset: list[str]
    ) -> dict[str, str]:
        check_queue_name(name)
        call = QueueMetaCall(META_GROUP, name, tuple(changes.items()), tuple(unset))
        meta = await self.router.run(call)
        if meta is None:
            raise QueueNotFound(f"queue {name!r} does not exist")
        return meta

    async def purge(self, name: str) -> int:
        check_queue_name(name)
        return await self.router.run(PurgeCall(self.router.group_of(name), name))

    async def rewind(self, name: str, since_ms: int) -> int:
        check_queue_name(name)
        self._require(features.REWIND, "rewinds")
        return await self.router.run(RewindCall(self.router.group_of(name), name, since_ms))

    async def send(self, name: str, messages: list[OutgoingMessage]) -> list[SentMessage]:
        group, attrs = self._send_checks(name, messages)
        check_send_rules(name, messages)
        if attrs is not None:  # fail early; apply decides with the committed attributes
            now = self.clock_source.wall_ms()
            for m in messages:
                if (refused := size_refusal(m, attrs) or delay_refusal(m, attrs, now)) is not None:
                    raise refused
        return await self._send(group, name, messages)

    async def send_each(
        self, name: str, messages: list[OutgoingMessage]
    ) -> list[SentMessage | SendRefused]:
        group, attrs = self._send_checks(name, messages)
        if attrs is None:  # no replica here (or not applied yet): the leader's
            attrs, _ = await self.get_queue(name)
        now = self.clock_source.wall_ms()
        messages = [within_retention(m, attrs, now) for m in messages]
        refusals = [send_refusal(name, m, attrs) or delay_refusal(m, attrs, now) for m in messages]
        fits = [m for m, refusal in zip(messages, refusals, strict=True) if refusal is None]
        sent = iter(await self._send(group, name, fits) if fits else [])
        return [next(sent) if r is None else SendRefused.of(r) for r in refusals]

    def _send_checks(
        self, name: str, messages: list[OutgoingMessage]
    ) -> tuple[int, QueueAttributes | None]:
        """What both sends check first (the name; the flags their messages need): the queue's
        group and its attributes as this node's replica has them (None: no replica here)."""
        check_queue_name(name)
        if any(m.ttl_seconds is not None or m.ttl_deadline_ms is not None for m in messages):
            self._require(features.MESSAGE_TTL, "messages with a ttl_seconds")
        if any(m.priority for m in messages):
            self._require(features.MESSAGE_PRIORITIES, "messages with a priority")
        if any(m.group_id is not None for m in messages) and not is_fifo_name(name):
            self._require(features.FAIR_QUEUES, "a standard queue's messages with a group_id")
        group = self.router.group_of(name)
        machine = self.machines.get(group)  # None: the group has no replica here
        return group, machine.attributes(name) if machine is not None else None

    async def _send(
        self, group: int, name: str, messages: list[OutgoingMessage]
    ) -> list[SentMessage]:
        await self._take_send_slot()
        try:
            with log_scope(group, name):  # what is logged meanwhile names the queue
                return await self.router.run_attempts(
                    group, lambda: self._produce.build(group, name, messages)
                )
        finally:
            self._send_slots.release()

    async def _take_send_slot(self) -> None:
        """One of the `NodeConfig.max_inflight_sends` slots; `Overloaded` if none frees up
        within the request deadline."""
        if self._send_slots.locked():
            try:
                async with asyncio.timeout(self.cfg.request_timeout):
                    await self._send_slots.acquire()
            except TimeoutError:
                raise Overloaded(
                    f"{self.cfg.max_inflight_sends} sends in flight on this node; retry"
                ) from None
        else:
            await self._send_slots.acquire()

    async def receive(
        self,
        name: str,
        max_messages: int,
        visibility_timeout: int | None,
        wait_seconds: int | None,
        *,
        attempt_id: str | None = None,
    ) -> list[ReceivedMessage]:
        check_queue_name(name)
        if attempt_id is not None:
            check_fifo_id(attempt_id, "the receive request attempt id")
        group = self.router.group_of(name)
        if self.raft.groups.get(group) is None or self.raft.leader_of(group) != self.id:
            # Forwarded: a long poll waits at the leader in chunks (`FORWARDED_POLL_SECONDS`):
            # successive polls until one leases something or the wait ends.
            wait = wait_seconds if wait_seconds is not None else await self._default_wait(name)
            if wait > FORWARDED_POLL_SECONDS:

                async def poll(seconds: int) -> list[ReceivedMessage]:
                    chunk = ReceiveCall(
                        group, name, max_messages, visibility_timeout, seconds, attempt_id
                    )
                    return await self.router.run(chunk)

                return await sliced(poll, wait, FORWARDED_POLL_SECONDS)
        call = ReceiveCall(group, name, max_messages, visibility_timeout, wait_seconds, attempt_id)
        return await self.router.run(call)

    async def _default_wait(self, name: str) -> int:
        """The queue's default long poll (``receive_wait_seconds``), from the local replica
        when this node holds one, else asked of the leader."""
        machine = self.machines.get(self.router.group_of(name))
        attrs = machine.attributes(name) if machine is not None else None
        if attrs is None:
            attrs, _ = await self.get_queue(name)
        return attrs.receive_wait_seconds

    async def ack(self, name: str, receipts: list[str]) -> list[EntryResult]:
        check_queue_name(name)
        codes = await self.router.run(AckCall(self.router.group_of(name), name, tuple(receipts)))
        return _entry_results(receipts, codes)

    async def change_visibility(
        self, name: str, entries: list[tuple[str, int]]
    ) -> list[EntryResult]:
        check_queue_name(name)
        call = ChangeVisibilityCall(
            self.router.group_of(name), name, tuple((r, int(s)) for r, s in entries)
        )
        return _entry_results([r for r, _ in entries], await self.router.run(call))

    async def nack(self, name: str, receipts: list[str], delay_seconds: int) -> list[EntryResult]:
        check_queue_name(name)
        call = NackCall(self.router.group_of(name), name, tuple(receipts), delay_seconds)
        return _entry_results(receipts, await self.router.run(call))

    # -- nodes -----------------------------------------------------------------------------------
    async def list_nodes(self) -> list[dict[str, Any]]:
        return [row.to_dict() for row in self.admin.list()]

    async def join_node(
        self, node: int, address: str, http: str, data_dirs: tuple[str, ...], zone: str
    ) -> dict[int, str]:
        return await self.admin.join(node, address, http, data_dirs, zone)

    async def drain_node(self, node: int) -> None:
        await self.admin.drain(node)

    async def activate_node(self, node: int) -> None:
        await self.admin.activate(node)

    async def remove_node(self, node: int) -> None:
        await self.admin.remove(node)
        # Read your writes: this node's catalog (what `list_nodes` answers from) shows it gone.
        await self._catalog_shows(lambda: node not in self.catalog.nodes)

    async def set_groups(self, groups: int) -> tuple[int, ...]:
        return await self.admin.set_groups(groups)

    async def list_features(self) -> list[dict[str, Any]]:
        return [
            dataclasses.asdict(f)
            | {"supported_by": list(f.supported_by), "missing": list(f.missing)}
            for f in await self.feature_admin.views()
        ]

    async def enable_features(self, names: list[str] | None) -> list[str]:
        return await self.feature_admin.enable(names)

    # -- backup and restore (`cmq.admin.backup_admin`) ---------------------------------------------
    async def export_catalog(self) -> dict[str, Any]:
        return self.backups.export_catalog()

    async def import_catalog(
        self, keys: list[Any], metadata: dict[str, dict[str, str]]
    ) -> dict[str, Any]:
        return await self.backups.import_catalog(keys, metadata)

    async def export_messages(self, name: str, after: int, upto: int, limit: int) -> ExportPage:
        return await self.backups.export_messages(name, after, upto, limit)

    async def import_messages(
        self, name: str, messages: list[ImportedMessage], expect_sent: int
    ) -> list[SentMessage]:
        return await self.backups.import_messages(name, messages, expect_sent)

    # -- the archive (`cmq.node.archive_side`) ---------------------------------------------------
    async def list_segments(self, name: str, state: str = "all") -> SegmentListing:
        return await self.archive.list_segments(name, state)

    async def read_segment(self, name: str, first_seq: int) -> SegmentStream:
        return await self.archive.read_segment(name, first_seq)

    async def read_segment_data(self, name: str, first_seq: int) -> SegmentData:
        self._require(features.SEGMENT_READ_BINARY, "binary segment reads")
        return await self.archive.read_segment_data(name, first_seq)

    async def claim_segments(
        self, name: str, batch_id: str, segments: list[int], ttl_ms: int
    ) -> ClaimResult:
        return await self.archive.claim_segments(name, batch_id, segments, ttl_ms)

    async def mark_archived(self, name: str, batch_id: str, segments: list[int]) -> ArchiveResult:
        return await self.archive.mark_archived(name, batch_id, segments)


def _entry_results(receipts: list[str], codes: tuple[str | None, ...]) -> list[EntryResult]:
    return [EntryResult(r, err is None, err) for r, err in zip(receipts, codes, strict=True)]
