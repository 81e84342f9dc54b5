"""`QueueNode`: one cmq node, composed of its parts, implementing `cmq.service.QueueService`.

It hosts the meta group (the catalog, `cmq.catalog.meta`: a voter or a learner) and the data groups
(`cmq.fsm`) the catalog places on it (`cmq.catalog.placement`; `cmq.node.membership` opens and
drops them and carries out replica moves) on a `MultiRaft`. Any node serves any queue:
`cmq.routing.router` sends each call to its group's leader (here through `cmq.routing.ops`, or
forwarded to a peer as a typed `cmq.routing.rpc` call), retrying leader changes within the request
deadline. `cmq.node.housekeeping` proposes the timed work of the groups led here, and
`cmq.node.status` renders this node's view. The service's calls themselves (argument checks,
then a typed call through the router; sends take one of a bounded number of send slots) are
`cmq.node.queue_service.QueueCalls`, which `QueueNode` inherits: this module composes the parts
those calls use, starts and stops them, and answers the node's own questions (ready, status).

Commands carry the clock (ms) of the node that built them, and sends their message ids (unique
per node); the state machines never read a clock. Their apply effects (which queues changed) are
handed to the long-poll wake-ups after each batch of applies (`WakingMachine`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import Awaitable
from functools import partial
from typing import Any

from cmq.admin.backup_admin import BackupAdmin
from cmq.admin.feature_admin import FeatureAdmin
from cmq.admin.nodes_admin import NodesAdmin
from cmq.admin.peer_releases import PeerReleases
from cmq.catalog import META_GROUP
from cmq.catalog.meta import CatalogMachine
from cmq.errors import InvariantBroken
from cmq.fsm.machine import QueueMachine
from cmq.model import GroupDigest
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
from cmq.node.queue_service import CATALOG_CATCH_UP, FORWARDED_POLL_SECONDS, QueueCalls
from cmq.node.scrubber import Scrubber
from cmq.node.status import describe_repairs, group_digest, render_status
from cmq.routing.clock import node_clock
from cmq.routing.ops import LeaderOps
from cmq.routing.produce import ProduceBuilder
from cmq.routing.receipts import ReceiptSigner
from cmq.routing.router import Router
from cmq.routing.wakeups import Wakeups, WakingMachine
from cmq.upgrade import features
from cmq.upgrade.release import PEER_PROTOCOL_MAX, PEER_PROTOCOL_MIN, RELEASE
from raftlog.runtime import MultiRaft, RuntimeConfig
from raftlog.storage import WalOptions
from raftlog.transport import ProtocolRange, TransportConfig

__all__ = ["CATALOG_CATCH_UP", "FORWARDED_POLL_SECONDS", "QueueNode"]


class QueueNode(QueueCalls):
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
        self.disk_watch = DiskWatch(
            cfg.node_id,
            self.raft,
            cfg.data_dirs,
            DiskPolicy(cfg.disk_reserve_bytes, cfg.slow_fsync_seconds),
            offload=host.offload,
            probe=host.files.free_bytes,
        )
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
            coalesce_sends=cfg.coalesce_sends,
            clock_stamp=self.clock.stamp,
            refuse_send=self.disk_watch.refuse_send,
            move_dead_letters=self._move_dead_letters,
        )
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
            send=self.send_each,
            interval=cfg.housekeeping_interval,
            clock_bound_ms=cfg.clock_bound_ms,
            clock_confirmed=self.clock.confirmed_now,
        )
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
        self._produce = ProduceBuilder(self.id, clock, self.clock.stamp)
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
        await self.ops.close()
        await self.raft.close()

    async def _move_dead_letters(self, group: int, name: str) -> None:
        """The housekeeper's move (it is built on the router, which is built on the ops that
        call this: bound at call time)."""
        await self.housekeeper.move_dead_letters(group, name)

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
