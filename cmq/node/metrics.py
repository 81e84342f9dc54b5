"""Prometheus metrics of a node beyond HTTP: the Raft runtime (WAL, groups, peers) and the process.

`register_node_metrics` adds them to the registry ``/metrics`` renders. Values are read when
scraped (a custom collector over one frozen `MultiRaft.stats` snapshot per scrape), so the hot
paths keep their plain integer counters and pay nothing for exporting them. Labels are bounded:
``dir`` is a data-directory index, ``group`` a group id, ``peer`` a node id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from cmq.fsm.machine import QueueMachine
from cmq.model import SegmentCounts
from cmq.node.clockguard import ClockGuard
from cmq.node.diskwatch import DiskWatch
from cmq.node.queue_metrics import (
    OTHER,
    QueueMetricsCollector,
    QueueMetricsSettings,
    led_groups,
)
from cmq.node.scrubber import Scrubber
from cmq.segment_values import SEGMENT_STATES
from cmq.upgrade.release import PEER_PROTOCOL_MAX, PEER_PROTOCOL_MIN, RELEASE
from raftlog.runtime import MultiRaft, RuntimeStats
from raftlog.storage import FSYNC_BUCKETS


class RaftCollector(Collector):
    """Reads a `MultiRaft`'s counters at scrape time (one `MultiRaft.stats` snapshot each)."""

    def __init__(self, raft: MultiRaft) -> None:
        self.raft = raft

    def collect(self) -> Iterator[Metric]:
        stats = self.raft.stats()
        yield from self._wal(stats)
        yield from self._groups(stats)
        yield from self._peers(stats)
        yield self._lag(stats)
        yield from self._repairs()

    def _repairs(self) -> Iterator[Metric]:
        rs = self.raft.repairs.stats()
        under = GaugeMetricFamily(
            "cmq_group_needs_repair",
            "1 for each group whose replica here is damaged and being caught up from the others "
            "(it neither votes nor campaigns until then).",
            labels=["group"],
        )
        for g, _ in rs.under_repair:
            under.add_metric([str(g)], 1.0)
        yield under
        yield CounterMetricFamily(
            "cmq_repairs_started", "Replicas found damaged and reset here.", value=rs.started
        )
        yield CounterMetricFamily(
            "cmq_repairs_completed",
            "Replicas repaired from the others (caught up after a reset).",
            value=rs.completed,
        )

    def _wal(self, stats: RuntimeStats) -> Iterator[Metric]:
        records = CounterMetricFamily(
            "cmq_wal_records", "Records written to the WAL.", labels=["dir"]
        )
        written = CounterMetricFamily("cmq_wal_bytes", "Bytes written to the WAL.", labels=["dir"])
        fsyncs = CounterMetricFamily(
            "cmq_wal_fsyncs",
            "fdatasync calls for WAL batches (group commit: records / fsyncs is the gain).",
            labels=["dir"],
        )
        segments = GaugeMetricFamily("cmq_wal_segments", "WAL segment files.", labels=["dir"])
        latency = HistogramMetricFamily(
            "cmq_wal_fsync_seconds", "Latency of WAL fdatasync calls.", labels=["dir"]
        )
        for i, s in enumerate(stats.wals):
            d = str(i)
            records.add_metric([d], s.records)
            written.add_metric([d], s.bytes)
            fsyncs.add_metric([d], s.fsyncs)
            segments.add_metric([d], s.segments)
            cumulative = 0
            buckets: list[tuple[str, float]] = []
            for bound, count in zip(FSYNC_BUCKETS, s.fsync_latency, strict=True):
                cumulative += count
                if bound != float("inf"):
                    buckets.append((repr(bound), cumulative))
            buckets.append(("+Inf", s.fsyncs))
            latency.add_metric([d], buckets, s.fsync_seconds)
        yield from (records, written, fsyncs, segments, latency)

    def _groups(self, stats: RuntimeStats) -> Iterator[Metric]:
        proposals = CounterMetricFamily(
            "cmq_raft_proposals", "Commands proposed on this node.", labels=["group"]
        )
        batches = CounterMetricFamily(
            "cmq_raft_proposal_batches",
            "Raft entries the proposals were packed into.",
            labels=["group"],
        )
        applied = CounterMetricFamily(
            "cmq_raft_applied_entries", "Entries applied to the state machine.", labels=["group"]
        )
        snapshots = CounterMetricFamily("cmq_raft_snapshots", "Snapshots taken.", labels=["group"])
        leader = GaugeMetricFamily(
            "cmq_raft_is_leader", "1 when this node leads the group.", labels=["group"]
        )
        term = GaugeMetricFamily("cmq_raft_term", "The group's current term.", labels=["group"])
        has_leader = GaugeMetricFamily(
            "cmq_raft_has_leader", "1 when this node knows a leader of the group.", labels=["group"]
        )
        for g in stats.groups:
            has_leader.add_metric([str(g.group)], 1 if g.leader else 0)
            label = [str(g.group)]
            proposals.add_metric(label, g.proposals)
            batches.add_metric(label, g.batches)
            applied.add_metric(label, g.applied_entries)
            snapshots.add_metric(label, g.snapshots)
            leader.add_metric(label, 1 if g.leader == stats.node else 0)
            term.add_metric(label, g.term)
        quiet = GaugeMetricFamily(
            "cmq_raft_quiesced_groups",
            "Groups open here that are quiesced (idle: not ticked, no heartbeats).",
        )
        quiet.add_metric([], sum(1 for g in stats.groups if g.quiesced))
        sends = stats.sent
        appends = CounterMetricFamily(
            "cmq_raft_appends_sent", "Append messages sent to followers (all groups)."
        )
        appends.add_metric([], sends.appends)
        entries = CounterMetricFamily(
            "cmq_raft_append_entries_sent", "Entries carried by the appends sent."
        )
        entries.add_metric([], sends.append_entries)
        yield from (proposals, batches, applied, snapshots, leader, term, has_leader)
        yield from (appends, entries, quiet)

    def _peers(self, stats: RuntimeStats) -> Iterator[Metric]:
        sent = CounterMetricFamily(
            "cmq_peer_frames_sent", "Frames sent to a peer.", labels=["peer"]
        )
        received = CounterMetricFamily(
            "cmq_peer_frames_received", "Frames received from a peer.", labels=["peer"]
        )
        dropped = CounterMetricFamily(
            "cmq_peer_frames_dropped",
            "Frames dropped because the peer's send buffer was full.",
            labels=["peer"],
        )
        connects = CounterMetricFamily(
            "cmq_peer_connects", "Connections established with a peer.", labels=["peer"]
        )
        failed = CounterMetricFamily(
            "cmq_peer_handshake_failures",
            "Connections to a peer that failed their TLS or cluster-secret handshake.",
            labels=["peer"],
        )
        protocol = GaugeMetricFamily(
            "cmq_peer_protocol",
            "The peer protocol the connection to a peer runs at (0: never connected).",
            labels=["peer"],
        )
        for st in stats.peers:
            label = [str(st.peer)]
            protocol.add_metric(label, st.protocol)
            sent.add_metric(label, st.frames_sent)
            received.add_metric(label, st.frames_received)
            dropped.add_metric(label, st.dropped_full)
            connects.add_metric(label, st.connects)
            failed.add_metric(label, st.handshake_failures)
        refused = CounterMetricFamily(
            "cmq_peer_connections_refused",
            "Accepted peer connections refused at the cluster-secret handshake (failed TLS "
            "handshakes are counted by the dialing node, in cmq_peer_handshake_failures).",
        )
        refused.add_metric([], stats.refused_connections)
        yield from (sent, received, dropped, connects, failed, refused, protocol)

    def _lag(self, stats: RuntimeStats) -> Metric:
        """On a group's leader: how many entries each voter's durable log is behind."""
        lag = GaugeMetricFamily(
            "cmq_raft_follower_lag_entries",
            "Entries a follower is behind this leader's last index (leaders only).",
            labels=["group", "peer"],
        )
        for g in stats.groups:
            if g.leader != stats.node:
                continue
            st = self.raft.status(g.group)
            for peer, ps in sorted(st.peers.items()):
                if peer != stats.node:
                    lag.add_metric([str(g.group), str(peer)], st.last_index - ps.match)
        return lag


class SegmentCollector(Collector):
    """Per queue of this node's replicas, read at scrape time from the queue machines: segments
    by state, segment-file bytes, and the age of the oldest segment not yet archived (the
    archive's backlog). ``queue`` labels are bounded like the per-queue series'
    (`cmq.node.queue_metrics.QueueMetricsSettings`: names matching the globs, at most ``top``
    of them, here the largest on disk); the others are folded into ``queue="_other"`` (counts
    and bytes summed, the backlog the oldest)."""

    def __init__(
        self,
        machines: Mapping[int, QueueMachine],
        now_ms: Callable[[], int],
        settings: QueueMetricsSettings | None = None,
    ) -> None:
        self.machines = machines
        self.now_ms = now_ms
        self.settings = settings or QueueMetricsSettings()

    def rows(self) -> list[tuple[str, SegmentCounts, int, int]]:
        """(queue, segments by state, bytes, backlog ms): the labelled queues', then
        `OTHER`'s when any was folded."""
        now = self.now_ms()
        rows = [r for m in self.machines.values() for r in m.segment_figures(now)]
        matches = self.settings.matcher()
        labelled = [r for r in rows if r[0] != OTHER and matches(r[0])]
        if len(labelled) > self.settings.top:
            labelled.sort(key=lambda r: (-r[2], r[0]))
            del labelled[self.settings.top :]
        if len(labelled) == len(rows):
            return labelled
        keep = {r[0] for r in labelled}
        folded = [r for r in rows if r[0] not in keep]
        counts = SegmentCounts(*(sum(getattr(r[1], s) for r in folded) for s in SEGMENT_STATES))
        other = (OTHER, counts, sum(r[2] for r in folded), max(r[3] for r in folded))
        return [*labelled, other]

    def collect(self) -> Iterator[Metric]:
        segments = GaugeMetricFamily(
            "cmq_queue_segments",
            "A queue's segments on this replica by state (active, sealed, released: kept for "
            "the archive, archived_pending: files await removal).",
            labels=["queue", "state"],
        )
        disk = GaugeMetricFamily(
            "cmq_queue_disk_bytes",
            "Bytes of a queue's segment files on this replica.",
            labels=["queue"],
        )
        oldest = GaugeMetricFamily(
            "cmq_queue_oldest_unarchived_seconds",
            "The archive's backlog: age of the oldest message of a released segment not yet "
            "archived (0 without archive).",
            labels=["queue"],
        )
        for name, counts, size, backlog_ms in self.rows():
            for state in SEGMENT_STATES:
                segments.add_metric([name, state], getattr(counts, state))
            disk.add_metric([name], size)
            oldest.add_metric([name], backlog_ms / 1000)
        yield from (segments, disk, oldest)


class BuildInfoCollector(Collector):
    """``cmq_build_info{version, protocol_min, protocol_max} 1``: what release this node runs
    (`cmq.upgrade.release`), to join against other series or to spot a mixed cluster."""

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily(
            "cmq_build_info",
            "The release this node runs and its peer protocol range (always 1).",
            labels=["version", "protocol_min", "protocol_max"],
        )
        info.add_metric([RELEASE, str(PEER_PROTOCOL_MIN), str(PEER_PROTOCOL_MAX)], 1)
        yield info


class ClockCollector(Collector):
    """This node's clock against its peers' (`cmq.node.clockguard.ClockGuard`)."""

    def __init__(self, guard: ClockGuard) -> None:
        self.guard = guard

    def collect(self) -> Iterator[Metric]:
        v = self.guard.verdict
        yield GaugeMetricFamily(
            "cmq_clock_offset_seconds",
            "This node's wall clock minus the median of its peers' (probes, half-RTT corrected).",
            value=v.offset_ms / 1000.0,
        )
        yield GaugeMetricFamily(
            "cmq_clock_unsafe",
            "1 while this node's clock is beyond the bound from its peers' or just stepped "
            "(it does not lead and stamps nothing).",
            value=0.0 if self.guard.trusted() else 1.0,
        )
        yield CounterMetricFamily(
            "cmq_clock_handoffs",
            "Leadership transfers asked for because this node's clock was off.",
            value=self.guard.handoffs,
        )


class ScrubCollector(Collector):
    """The scrubber's progress and findings (`cmq.node.scrubber.Scrubber.stats`)."""

    def __init__(self, scrubber: Scrubber) -> None:
        self.scrubber = scrubber

    def collect(self) -> Iterator[Metric]:
        st = self.scrubber.stats()
        yield CounterMetricFamily(
            "cmq_scrub_bytes", "Bytes of sealed segments and snapshots re-read.", value=st.bytes
        )
        yield CounterMetricFamily(
            "cmq_scrub_segments", "Sealed segments verified whole.", value=st.segments
        )
        yield CounterMetricFamily(
            "cmq_scrub_snapshots", "Snapshot files verified.", value=st.snapshots
        )
        yield CounterMetricFamily("cmq_scrub_passes", "Scrub passes completed.", value=st.passes)
        yield CounterMetricFamily(
            "cmq_scrub_findings",
            "Damage the scrubber found (each handed to repair).",
            value=st.findings,
        )


class DiskCollector(Collector):
    """Each data directory's health as `cmq.node.diskwatch.DiskWatch` last judged it."""

    def __init__(self, watch: DiskWatch) -> None:
        self.watch = watch

    def collect(self) -> Iterator[Metric]:
        failed = GaugeMetricFamily(
            "cmq_disk_failed",
            "1 when the data directory's WAL stopped after an I/O error (its groups stopped; "
            "restart the node once the disk is fixed).",
            labels=["dir"],
        )
        full = GaugeMetricFamily(
            "cmq_disk_full",
            "1 when the data directory's free space is below the reserve (sends refused).",
            labels=["dir"],
        )
        slow = GaugeMetricFamily(
            "cmq_disk_slow",
            "1 when the data directory's fsyncs are slow (its groups' leadership is handed off).",
            labels=["dir"],
        )
        free = GaugeMetricFamily(
            "cmq_disk_free_bytes", "Free space of the data directory.", labels=["dir"]
        )
        fsync = GaugeMetricFamily(
            "cmq_disk_fsync_seconds",
            "How long the WAL fsync in progress has run or the last one took (the longer).",
            labels=["dir"],
        )
        for i, h in enumerate(self.watch.health):
            d = [str(i)]
            failed.add_metric(d, 1 if h.failed else 0)
            full.add_metric(d, 1 if h.full else 0)
            slow.add_metric(d, 1 if h.slow else 0)
            if h.free_bytes is not None:
                free.add_metric(d, h.free_bytes)
            fsync.add_metric(d, h.fsync_seconds)
        refused = CounterMetricFamily(
            "cmq_disk_refused_sends", "Sends refused with DiskFull on this node."
        )
        refused.add_metric([], self.watch.refused_sends)
        handoffs = CounterMetricFamily(
            "cmq_disk_slow_handoffs", "Leadership hand-offs asked for because a disk was slow."
        )
        handoffs.add_metric([], self.watch.handoffs)
        yield from (failed, full, slow, free, fsync, refused, handoffs)


def register_node_metrics(
    registry: CollectorRegistry,
    raft: MultiRaft,
    machines: Mapping[int, QueueMachine] | None = None,
    now_ms: Callable[[], int] | None = None,
    clock: ClockGuard | None = None,
    *,
    scrubber: Scrubber | None = None,
    disks: DiskWatch | None = None,
    queues: QueueMetricsSettings | None = None,
    waiting: Callable[[], Mapping[str, int]] = dict,
    subscriptions: Callable[[], Mapping[str, int]] = dict,
) -> None:
    """Add the build information (`BuildInfoCollector`), the Raft runtime's metrics and the
    process's (CPU seconds, resident memory, open
    files: ``process_*``) to ``registry``; with ``machines`` (data group -> its queue machine)
    and a clock ``now_ms``, the queues' segment metrics too (`SegmentCollector`), and with
    ``queues`` as well the per-queue metrics of the queues led here
    (`cmq.node.queue_metrics.QueueMetricsCollector`; ``waiting``: queue -> receives
    long-polling here, ``subscriptions``: queue -> stream subscriptions open here)."""
    registry.register(BuildInfoCollector())
    registry.register(RaftCollector(raft))
    if clock is not None:
        registry.register(ClockCollector(clock))
    if scrubber is not None:
        registry.register(ScrubCollector(scrubber))
    if disks is not None:
        registry.register(DiskCollector(disks))
    if machines is not None and now_ms is not None:
        registry.register(SegmentCollector(machines, now_ms, queues))
        if queues is not None:
            registry.register(
                QueueMetricsCollector(
                    machines,
                    led_groups(raft),
                    now_ms,
                    queues,
                    waiting=waiting,
                    subscriptions=subscriptions,
                )
            )
    ProcessCollector(registry=registry)
