"""Prometheus metrics of a node beyond HTTP: the Raft runtime (WAL, groups, peers) and the process.

`register_node_metrics` adds them to the registry ``/metrics`` renders. Values are read when
scraped (a custom collector over one frozen `MultiRaft.stats` snapshot per scrape), so the hot
paths keep their plain integer counters and pay nothing for exporting them. Labels are bounded:
``dir`` is a data-directory index, ``group`` a group id, ``peer`` a node id.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TypeVar

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
from cmq.node.diskwatch import DiskHealth, DiskWatch
from cmq.node.queue_metrics import (
    OTHER,
    QueueMetricsCollector,
    QueueMetricsSettings,
    led_groups,
)
from cmq.node.scrubber import Scrubber
from cmq.segment_values import SEGMENT_STATES
from cmq.upgrade.release import PEER_PROTOCOL_MAX, PEER_PROTOCOL_MIN, RELEASE
from raftlog.runtime import GroupStats, MultiRaft, PeerLinkStats, RuntimeStats
from raftlog.storage import FSYNC_BUCKETS, WalStats

_Row = TypeVar("_Row")

_Series = tuple[
    type[CounterMetricFamily] | type[GaugeMetricFamily], str, str, Callable[[_Row], float | None]
]
"""A family of a table of labelled families: its kind, name, help text and the value a row gives
it (None: no sample for that row)."""


def _labelled(
    label: str, series: Sequence[_Series[_Row]], rows: Iterable[tuple[str, _Row]]
) -> list[CounterMetricFamily | GaugeMetricFamily]:
    """The families of ``series``, in order, each labelled ``label``: every row (its label
    value, the row) adds a sample to each family it gives a value."""
    families = [kind(name, text, labels=[label]) for kind, name, text, _ in series]
    for key, row in rows:
        for family, (*_, value) in zip(families, series, strict=True):
            if (v := value(row)) is not None:
                family.add_metric([key], v)
    return families


_WAL: tuple[_Series[WalStats], ...] = (
    (CounterMetricFamily, "cmq_wal_records", "Records written to the WAL.", lambda s: s.records),
    (CounterMetricFamily, "cmq_wal_bytes", "Bytes written to the WAL.", lambda s: s.bytes),
    (
        CounterMetricFamily,
        "cmq_wal_fsyncs",
        "fdatasync calls for WAL batches (group commit: records / fsyncs is the gain).",
        lambda s: s.fsyncs,
    ),
    (GaugeMetricFamily, "cmq_wal_segments", "WAL segment files.", lambda s: s.segments),
)
"""Per data directory (``dir``), before its fsync latency histogram."""


def _groups(node: int) -> tuple[_Series[GroupStats], ...]:
    """Per group (``group``) on node ``node``."""
    return (
        (
            CounterMetricFamily,
            "cmq_raft_proposals",
            "Commands proposed on this node.",
            lambda g: g.proposals,
        ),
        (
            CounterMetricFamily,
            "cmq_raft_proposal_batches",
            "Raft entries the proposals were packed into.",
            lambda g: g.batches,
        ),
        (
            CounterMetricFamily,
            "cmq_raft_applied_entries",
            "Entries applied to the state machine.",
            lambda g: g.applied_entries,
        ),
        (CounterMetricFamily, "cmq_raft_snapshots", "Snapshots taken.", lambda g: g.snapshots),
        (
            GaugeMetricFamily,
            "cmq_raft_is_leader",
            "1 when this node leads the group.",
            lambda g: 1 if g.leader == node else 0,
        ),
        (GaugeMetricFamily, "cmq_raft_term", "The group's current term.", lambda g: g.term),
        (
            GaugeMetricFamily,
            "cmq_raft_has_leader",
            "1 when this node knows a leader of the group.",
            lambda g: 1 if g.leader else 0,
        ),
    )


_PEERS: tuple[_Series[PeerLinkStats], ...] = (
    (
        CounterMetricFamily,
        "cmq_peer_frames_sent",
        "Frames sent to a peer.",
        lambda st: st.frames_sent,
    ),
    (
        CounterMetricFamily,
        "cmq_peer_frames_received",
        "Frames received from a peer.",
        lambda st: st.frames_received,
    ),
    (
        CounterMetricFamily,
        "cmq_peer_frames_dropped",
        "Frames dropped because the peer's send buffer was full.",
        lambda st: st.dropped_full,
    ),
    (
        CounterMetricFamily,
        "cmq_peer_connects",
        "Connections established with a peer.",
        lambda st: st.connects,
    ),
    (
        CounterMetricFamily,
        "cmq_peer_handshake_failures",
        "Connections to a peer that failed their TLS or cluster-secret handshake.",
        lambda st: st.handshake_failures,
    ),
)
"""Per peer (``peer``), the link's counters."""

_PEER_PROTOCOL: tuple[_Series[PeerLinkStats], ...] = (
    (
        GaugeMetricFamily,
        "cmq_peer_protocol",
        "The peer protocol the connection to a peer runs at (0: never connected).",
        lambda st: st.protocol,
    ),
)
"""Per peer, rendered after ``cmq_peer_connections_refused`` (the order ``/metrics`` shows)."""

_DISKS: tuple[_Series[DiskHealth], ...] = (
    (
        GaugeMetricFamily,
        "cmq_disk_failed",
        "1 when the data directory's WAL stopped after an I/O error (its groups stopped; "
        "restart the node once the disk is fixed).",
        lambda h: 1 if h.failed else 0,
    ),
    (
        GaugeMetricFamily,
        "cmq_disk_full",
        "1 when the data directory's free space is below the reserve (sends refused).",
        lambda h: 1 if h.full else 0,
    ),
    (
        GaugeMetricFamily,
        "cmq_disk_slow",
        "1 when the data directory's fsyncs are slow (its groups' leadership is handed off).",
        lambda h: 1 if h.slow else 0,
    ),
    (
        GaugeMetricFamily,
        "cmq_disk_free_bytes",
        "Free space of the data directory.",
        lambda h: h.free_bytes,
    ),
    (
        GaugeMetricFamily,
        "cmq_disk_fsync_seconds",
        "How long the WAL fsync in progress has run or the last one took (the longer).",
        lambda h: h.fsync_seconds,
    ),
)
"""Per data directory (``dir``), its health (no free space sample while it is not known)."""


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
        wals = [(str(i), s) for i, s in enumerate(stats.wals)]
        yield from _labelled("dir", _WAL, wals)
        latency = HistogramMetricFamily(
            "cmq_wal_fsync_seconds", "Latency of WAL fdatasync calls.", labels=["dir"]
        )
        for d, s in wals:
            cumulative = 0
            buckets: list[tuple[str, float]] = []
            for bound, count in zip(FSYNC_BUCKETS, s.fsync_latency, strict=True):
                cumulative += count
                if bound != float("inf"):
                    buckets.append((repr(bound), cumulative))
            buckets.append(("+Inf", s.fsyncs))
            latency.add_metric([d], buckets, s.fsync_seconds)
        yield latency

    def _groups(self, stats: RuntimeStats) -> Iterator[Metric]:
        yield from _labelled(
            "group", _groups(stats.node), [(str(g.group), g) for g in stats.groups]
        )
        yield CounterMetricFamily(
            "cmq_raft_appends_sent",
            "Append messages sent to followers (all groups).",
            value=stats.sent.appends,
        )
        yield CounterMetricFamily(
            "cmq_raft_append_entries_sent",
            "Entries carried by the appends sent.",
            value=stats.sent.append_entries,
        )
        yield GaugeMetricFamily(
            "cmq_raft_quiesced_groups",
            "Groups open here that are quiesced (idle: not ticked, no heartbeats).",
            value=sum(1 for g in stats.groups if g.quiesced),
        )

    def _peers(self, stats: RuntimeStats) -> Iterator[Metric]:
        peers = [(str(st.peer), st) for st in stats.peers]
        yield from _labelled("peer", _PEERS, peers)
        yield CounterMetricFamily(
            "cmq_peer_connections_refused",
            "Accepted peer connections refused at the cluster-secret handshake (failed TLS "
            "handshakes are counted by the dialing node, in cmq_peer_handshake_failures).",
            value=stats.refused_connections,
        )
        yield from _labelled("peer", _PEER_PROTOCOL, peers)

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
        yield from _labelled("dir", _DISKS, [(str(i), h) for i, h in enumerate(self.watch.health)])
        yield CounterMetricFamily(
            "cmq_disk_refused_sends",
            "Sends refused with DiskFull on this node.",
            value=self.watch.refused_sends,
        )
        yield CounterMetricFamily(
            "cmq_disk_slow_handoffs",
            "Leadership hand-offs asked for because a disk was slow.",
            value=self.watch.handoffs,
        )


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
