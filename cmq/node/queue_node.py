"""`QueueNode`: one cmq node, composed of its parts, implementing `cmq.service.QueueService`.

It hosts the meta group (the catalog, `cmq.catalog.meta`: a voter or a learner) and the data groups
(`cmq.fsm`) the catalog places on it (`cmq.catalog.placement`; `cmq.node.membership` opens and
drops them and carries out replica moves) on a `MultiRaft`. Any node serves any queue:
`cmq.routing.router` sends each call to its group's leader (here through `cmq.routing.ops`, or
forwarded to a peer as a typed `cmq.routing.rpc` call), retrying leader changes within the request
deadline. `cmq.node.housekeeping` proposes the timed work of the groups led here, and
`cmq.node.status` renders this node's view. Sends take one of a bounded number of send slots.

Commands carry the clock (ms) of the node that built them, and sends their message ids (unique
per node); the state machines never read a clock. Their apply effects (which queues changed) are
handed to the long-poll wake-ups after each batch of applies (`WakingMachine`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import os
import random
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, Literal, overload

from cmq.admin.backup_admin import BackupAdmin
from cmq.admin.feature_admin import FeatureAdmin
from cmq.admin.nodes_admin import NodesAdmin
from cmq.admin.peer_releases import PeerReleases
from cmq.catalog.meta import CatalogMachine
from cmq.errors import (
    InvalidParameter,
    InvariantBroken,
    Overloaded,
    QueueNotFound,
    Unavailable,
)
from cmq.export_values import ExportPage, ImportedMessage
from cmq.fsm.machine import QueueMachine
from cmq.logs import log_scope
from cmq.model import (
    DEFAULT_MAX_DELAY_SECONDS,
    MAX_PEEK,
    EntryResult,
    GroupDigest,
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
from cmq.node import feature_marker
from cmq.node.archive_side import ArchiveSide
from cmq.node.clockguard import ClockGuard
from cmq.node.config import NodeConfig
from cmq.node.diskwatch import (
    DiskPolicy,
    DiskWatch,
)
from cmq.node.feature_marker import MarkedCatalog
from cmq.node.host import PRODUCTION, NodeHost
from cmq.node.housekeeping import Housekeeper
from cmq.node.membership import Identity, Membership
from cmq.node.scrubber import Scrubber
from cmq.node.status import describe_repairs, group_digest, render_status
from cmq.routing.clock import node_clock
from cmq.routing.ops import META_GROUP, LeaderOps, ProduceBuilder
from cmq.routing.receipts import ReceiptSigner
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
from cmq.routing.wakeups import Wakeups, WakingMachine
from cmq.segment_values import (
    ArchiveResult,
    ClaimResult,
    SegmentData,
    SegmentListing,
    SegmentStream,
)
from cmq.upgrade import features
from cmq.upgrade.release import PEER_PROTOCOL_MAX, PEER_PROTOCOL_MIN, RELEASE
from raftlog.runtime import MultiRaft, RuntimeConfig
from raftlog.storage import WalOptions
from raftlog.transport.peer import TransportConfig
from raftlog.transport.protocol import ProtocolRange

__all__ = ["META_GROUP", "QueueNode"]

CATALOG_CATCH_UP = 2.0
"""Seconds a create or delete waits for this node's catalog to show it (`_catalog_shows`)."""


FORWARDED_POLL_SECONDS = 1
"""A long poll through a node that does not lead the queue's group waits at the leader in
chunks of at most this many seconds. A peer call cannot be cancelled, so a poll whose caller
has gone (a request cancelled, a stream subscription ended) goes on at the leader: in chunks it
ends there within a second, instead of leasing messages for nobody for up to 20 s (the chaos
runner's stream consumers, subscribing for a second or two at a time through followers, saw
their queue's messages leased again and again by such abandoned polls and never drained)."""


class QueueNode:
    """A cmq node; implements `cmq.service.QueueService`. ``host`` is its I/O
    (`cmq.node.host.NodeHost`); None: the real one (sockets, files, the system clock)."""

    def __init__(self, cfg: NodeConfig, host: NodeHost | None = None) -> None:
        if len(cfg.secret) < 16:
            raise ValueError("the cluster secret must be at least 16 bytes")
        self.cfg = cfg
        self.id = cfg.node_id
        self.host = host = host if host is not None else PRODUCTION
        # Every part of the node reads time from this one clock.
        self.clock_source = clock = host.clock if host.clock is not None else node_clock()
        speaks = ProtocolRange(PEER_PROTOCOL_MIN, PEER_PROTOCOL_MAX)
        transport = TransportConfig(protocols=speaks)
        if cfg.peer_tls is not None and host.transport is None:
            server_ssl, client_ssl = cfg.peer_tls.contexts()
            transport = TransportConfig(
                server_ssl=server_ssl, client_ssl=client_ssl, protocols=speaks
            )
        # Repairs of damaged replicas are on once the cluster enabled them, as this node's data
        # directories record (read before the catalog opens: a damaged catalog is repaired too).
        recorded = feature_marker.recorded(cfg.data_dirs, host.files.read)
        repair = features.SELF_REPAIR in recorded
        self.raft = MultiRaft(
            RuntimeConfig(
                node_id=cfg.node_id,
                listen=cfg.peer,
                peers=cfg.peers,
                secret=cfg.secret,
                data_dirs=cfg.data_dirs,
                tick_interval=cfg.tick_interval,
                group_options=cfg.group_options,
                rejoin=cfg.rejoin,
                transport=transport,
                seed=host.seed,
                wal_options=WalOptions(salvage=repair),
            ),
            transport=host.transport,
            disks=host.disks,
            clock=clock,
            offload=host.offload,
        )
        self.raft.repairs.enabled = repair
        self.raft.watch.wall_clock = clock.wall_ms  # clock probes report the clock commands carry
        self.clock = ClockGuard(cfg.node_id, self.raft, cfg.clock_bound_ms, clock=clock)
        self.catalog = CatalogMachine()
        self._marked_catalog = MarkedCatalog(
            self.catalog,
            cfg.data_dirs,
            self._flags_changed,
            write=host.files.write_durably,
        )
        self.machines: dict[int, QueueMachine] = {}
        self.wakeups = Wakeups()
        self.ops = LeaderOps(
            raft=self.raft,
            catalog=self.catalog,
            machines=self.machines,
            signer=ReceiptSigner(cfg.secret),
            wakeups=self.wakeups,
            clock=clock,
            request_timeout=cfg.request_timeout,
            segment_bytes=cfg.segment_max_bytes,
            segment_age_ms=round(cfg.segment_max_age * 1000),
        )
        self.ops.clock_stamp = self.clock.stamp
        self.disk_watch = DiskWatch(
            cfg.node_id,
            self.raft,
            cfg.data_dirs,
            DiskPolicy(cfg.disk_reserve_bytes, cfg.slow_fsync_seconds),
            offload=host.offload,
            probe=host.files.free_bytes,
        )
        self.ops.refuse_send = self.disk_watch.refuse_send
        self.router = Router(
            self.id,
            self.raft,
            self.catalog,
            self.ops,
            cfg.request_timeout,
            clock=clock,
            election_timeout=cfg.tick_interval * self.raft.cfg.election_tick,
            clock_ok=self.clock.trusted,
            rng=None if host.seed is None else random.Random(f"router-{host.seed}"),
        )
        self.housekeeper = Housekeeper(
            node_id=self.id,
            peer=cfg.peer,
            data_dirs=cfg.data_dirs,
            raft=self.raft,
            catalog=self.catalog,
            machines=self.machines,
            router=self.router,
            ops=self.ops,
            send=self.send,
            interval=cfg.housekeeping_interval,
            clock_bound_ms=cfg.clock_bound_ms,
            clock_confirmed=self.clock.confirmed_now,
        )
        self.ops.move_dead_letters = self.housekeeper.move_dead_letters
        self.scrubber = Scrubber(
            self.raft, self.machines, rate=cfg.scrub_rate, offload=host.offload
        )
        founders = () if cfg.joined else tuple(sorted(cfg.peers))
        self.membership = Membership(
            me=Identity(
                node_id=self.id,
                address=f"{cfg.peer.host}:{cfg.peer.port}",
                http=cfg.http,
                data_dirs=tuple(os.path.abspath(d) for d in cfg.data_dirs),
                zone=cfg.zone,
            ),
            raft=self.raft,
            catalog=self.catalog,
            router=self.router,
            open_group=self._open_data_group,
            drop_group=self._drop_data_group,
            founders=founders,
            groups=cfg.groups,
            replication=cfg.replication,
            meta_voters=max(cfg.meta_voters, min(len(founders), 5)),
            interval=cfg.membership_interval,
            clock=clock,
            balance_leaders=cfg.balance_leaders,
            avoid_leader=self.clock.off_peers,
        )
        self.admin = NodesAdmin(self.id, self.raft, self.catalog, self.router)
        self.releases = PeerReleases(self.id, self.raft, self.catalog, clock=clock)
        self.backups = BackupAdmin(self.catalog, self.router, cfg.secret, clock)
        self.feature_admin = FeatureAdmin(self.catalog, self.router, self.releases)
        self.archive = ArchiveSide(self.id, self.raft, self.catalog, self.router, self.machines)
        self._produce = ProduceBuilder(self.id, clock)
        self._send_slots = asyncio.Semaphore(cfg.max_inflight_sends)
        self._tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        """Recover and open every group, then serve forwarded calls and housekeeping. A data
        directory written under a feature flag this release lacks is refused first, before
        anything is opened for writing (`cmq.node.feature_marker`)."""
        feature_marker.check(self.cfg.data_dirs, RELEASE, self.host.files.read)
        await self.raft.start()
        try:
            voters = () if self.cfg.joined else sorted(self.cfg.peers)
            await self.raft.open_group(META_GROUP, self._marked_catalog, voters=voters)
            # The groups this node holds state of; the catalog names the rest (membership).
            for g in self.raft.stored_groups():
                if g != META_GROUP:
                    await self._open_data_group(g, (), False)
            await self.membership.tick_local()
            self._check_features()
        except BaseException:
            # E.g. damaged files: stop what started (bounded: the error must reach the
            # operator even if a shutdown step hangs), then report.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    await self.close()
            raise
        self.raft.set_call_handler(self.router.serve)
        self._spawn(self.housekeeper.run())
        self._spawn(self.membership.run())
        self._spawn(self.clock.run())
        self._spawn(self.disk_watch.run())
        self._spawn(self.releases.run())
        self._spawn(self.scrubber.run())

    def _flags_changed(self, enabled: frozenset[str]) -> None:
        """The cluster's enabled flags changed (or were first read): require the peer protocol
        they need, and repair damaged replicas once `features.SELF_REPAIR` is on."""
        self.raft.transport.require_protocol(features.required_protocol(enabled))
        if features.SELF_REPAIR in enabled:
            self.raft.repairs.enabled = True

    def _check_features(self) -> None:
        """Refuse to run on a cluster that enabled a feature flag this release does not know:
        it would misread what the flag lets other nodes write (`cmq.upgrade.features`)."""
        unknown = features.unknown(self.catalog.features)
        if unknown:
            raise InvariantBroken(
                f"this cluster has enabled the feature flags {', '.join(unknown)}, which release "
                f"{RELEASE} does not support: run a release that does (a downgrade past a "
                f"feature flag is not possible)"
            )

    async def _open_data_group(
        self, g: int, voters: tuple[int, ...], rejoin: bool, data_dir_index: int | None = None
    ) -> None:
        """Open data group ``g`` here (founding ``voters``, or empty to be caught up), in the
        data directory the placement chose (a recovered group stays where it is)."""
        data_dir = self.cfg.data_dirs[self.raft.dir_for(g, data_dir_index)]
        seg_dir = os.path.join(data_dir, "segments", f"g{g}")
        store = self.host.segments(seg_dir, durable_root=data_dir)
        store.index_when(partial(self.catalog.feature_enabled, features.SEGMENT_INDEX))
        machine = QueueMachine(store)
        await self.raft.open_group(
            g,
            WakingMachine(machine, self.wakeups),
            voters=voters,
            rejoin=rejoin,
            data_dir=data_dir_index,
        )
        self.machines[g] = machine

    async def _drop_data_group(self, g: int) -> None:
        """Stop data group ``g`` here and delete its log, snapshots and segment files."""
        self.machines.pop(g, None)
        data_dir = self.cfg.data_dirs[self.raft.dir_for(g)]
        await self.raft.drop_group(g)
        seg_dir = os.path.join(data_dir, "segments", f"g{g}")
        await self.host.offload(self.host.files.remove_tree, seg_dir)

    async def close(self) -> None:
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.raft.close()

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def data_groups(self) -> tuple[int, ...]:
        """Every data group of the cluster (from the catalog; empty until it is founded)."""
        return self.catalog.data_groups

    def is_ready(self) -> bool:
        """The catalog is founded, its leader known, and every data group placed here is open
        with a known leader; and no replica here is still recovering (`raftlog.core.recovery`:
        after a restart a replica votes only once enough peers answered), so a node reports
        ready only when it counts towards a quorum again: a rolling restart that waits for it
        never takes down the peer a restarted node still needs. Never ready while a data
        directory failed (`cmq.node.diskwatch`: its groups stopped; a restart is the way back)."""
        if not self.catalog.initialized or not self.raft.leader_of(META_GROUP):
            return False
        if self.raft.recovering(META_GROUP) or not self.disk_watch.ok():
            return False
        groups = self.raft.groups
        return all(
            g in groups and self.raft.leader_of(g) != 0 and not self.raft.recovering(g)
            for g in self.catalog.hosted_by(self.id)
        )

    def status(self) -> dict[str, Any]:
        out = render_status(
            self.id,
            self.raft,
            self.catalog,
            tuple(sorted(self.raft.groups)),
            self.releases.releases(),
        )
        out["clock"] = self.clock.describe()
        out["repair"] = describe_repairs(self.raft)
        out["scrub"] = self.scrubber.describe()
        out["peer_tls"] = self.raft.transport.tls
        out["disks"] = self.disk_watch.describe()
        return out

    def leader_http(self, name: str) -> str:
        """The HTTP address (``host:port`` as the catalog records it) of the node leading queue
        ``name``'s group, when it is known and is not this node; "" otherwise (this node leads,
        no leader is known, the queue does not exist, or the leader recorded no address). Read
        by the HTTP API after each queue call to tell the client where to send next (the
        ``Cmq-Leader`` header, docs/api.md); two dict lookups, no I/O."""
        group = self.catalog.group_of(name)
        if group is None:
            return ""
        lead = self.router.known_leader(group)
        if lead in (0, self.id):
            return ""
        info = self.catalog.node_info(lead)
        return info.http if info is not None else ""

    async def group_digest(self, group: int) -> GroupDigest:
        return await group_digest(self.id, self.raft, self.machines, group, self.host.offload)

    # -- QueueService ----------------------------------------------------------------------------
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

    @overload
    async def send(self, name: str, messages: list[OutgoingMessage]) -> list[SentMessage]: ...

    @overload
    async def send(
        self, name: str, messages: list[OutgoingMessage], *, per_entry: Literal[True]
    ) -> list[SentMessage | SendRefused]: ...

    async def send(
        self, name: str, messages: list[OutgoingMessage], *, per_entry: bool = False
    ) -> list[SentMessage] | list[SentMessage | SendRefused]:
        check_queue_name(name)
        if any(m.ttl_seconds is not None or m.ttl_deadline_ms is not None for m in messages):
            self._require(features.MESSAGE_TTL, "messages with a ttl_seconds")
        if any(m.priority for m in messages):
            self._require(features.MESSAGE_PRIORITIES, "messages with a priority")
        if any(m.group_id is not None for m in messages) and not is_fifo_name(name):
            self._require(features.FAIR_QUEUES, "a standard queue's messages with a group_id")
        group = self.router.group_of(name)
        machine = self.machines.get(group)  # None: the group has no replica here
        attrs = machine.attributes(name) if machine is not None else None
        if per_entry:
            if attrs is None:  # no replica here (or not applied yet): the leader's
                attrs, _ = await self.get_queue(name)
            now = self.clock_source.wall_ms()
            messages = [within_retention(m, attrs, now) for m in messages]
            refusals = [
                send_refusal(name, m, attrs) or delay_refusal(m, attrs, now) for m in messages
            ]
            fits = [m for m, refusal in zip(messages, refusals, strict=True) if refusal is None]
            sent = iter(await self._send(group, name, fits) if fits else [])
            return [next(sent) if r is None else SendRefused.of(r) for r in refusals]
        check_send_rules(name, messages)
        if attrs is not None:  # fail early; apply decides with the committed attributes
            now = self.clock_source.wall_ms()
            for m in messages:
                if (refused := size_refusal(m, attrs) or delay_refusal(m, attrs, now)) is not None:
                    raise refused
        return await self._send(group, name, messages)

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
            # Forwarded: a long poll waits at the leader in chunks (`FORWARDED_POLL_SECONDS`).
            wait = wait_seconds if wait_seconds is not None else await self._default_wait(name)
            if wait > FORWARDED_POLL_SECONDS:
                return await self._chunked_receive(
                    group, name, max_messages, visibility_timeout, wait, attempt_id
                )
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

    async def _chunked_receive(  # noqa: PLR0917 - the receive's own arguments
        self,
        group: int,
        name: str,
        max_messages: int,
        visibility_timeout: int | None,
        wait: int,
        attempt_id: str | None,
    ) -> list[ReceivedMessage]:
        """A long poll of ``wait`` seconds as successive polls of at most
        `FORWARDED_POLL_SECONDS` at the leader, until one leases something or the wait ends."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while True:
            chunk = min(FORWARDED_POLL_SECONDS, max(0, math.ceil(deadline - loop.time())))
            call = ReceiveCall(group, name, max_messages, visibility_timeout, chunk, attempt_id)
            got = await self.router.run(call)
            if got or chunk == 0 or loop.time() >= deadline:
                return got

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
