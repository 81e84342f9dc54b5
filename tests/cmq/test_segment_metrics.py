"""The queues' segment metrics (`cmq.node.metrics.SegmentCollector`) read from real queue
machines."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cmq.fsm import CreateQueue, Lease, Leased, MemorySegmentStore, NewMessage, Produce
from cmq.fsm.commands import Ack
from cmq.fsm.machine import QueueMachine
from cmq.model import QueueAttributes
from cmq.node.metrics import SegmentCollector
from cmq.node.queue_metrics import QueueMetricsSettings
from tests.cmq.fsm.harness import Applier

T0 = 1_700_000_000_000


def test_segments_by_state_disk_bytes_and_archive_backlog_are_exported() -> None:
    m = QueueMachine(MemorySegmentStore())
    run = Applier(m)
    run(CreateQueue("kept", QueueAttributes(archive=True), T0, 200, 3_600_000))
    body = NewMessage("i", b"x" * 100, False, (), None, None)
    for _ in range(5):
        run(Produce("kept", T0, (body,)))
    leased = run(Lease("kept", T0, 2, None))
    assert isinstance(leased, Leased)
    run(Ack("kept", T0, tuple((x.seq, x.lease_id) for x in leased.messages)))
    registry = CollectorRegistry()
    registry.register(SegmentCollector({1: m}, lambda: T0 + 5000))
    text = generate_latest(registry).decode()
    stats = m.stats("kept", T0 + 5000)
    assert stats is not None
    assert (stats.segments.released, stats.segments.sealed, stats.segments.active) == (1, 1, 1)
    assert 'cmq_queue_segments{queue="kept",state="released"} 1.0' in text
    assert 'cmq_queue_segments{queue="kept",state="sealed"} 1.0' in text
    assert f'cmq_queue_disk_bytes{{queue="kept"}} {float(stats.disk_bytes)}' in text
    assert 'cmq_queue_oldest_unarchived_seconds{queue="kept"} 5.0' in text


def test_segment_series_are_capped_like_the_per_queue_ones() -> None:
    """At most ``top`` queues matching the globs keep their label (the largest on disk); the
    others are folded into ``queue="_other"``: segments and bytes summed, backlog the oldest."""
    m = QueueMachine(MemorySegmentStore())
    run = Applier(m)
    for i, name in enumerate(("a-small", "a-big", "a-mid", "b-other")):
        run(CreateQueue(name, QueueAttributes(archive=True), T0 + i, 200, 3_600_000))
        body = NewMessage("i", b"x" * 100, False, (), None, None)
        for _ in range({"a-small": 1, "a-big": 5, "a-mid": 3, "b-other": 4}[name]):
            run(Produce(name, T0 + i, (body,)))
    figures = {name: (counts, size) for name, counts, size, _ in m.segment_figures(T0)}
    settings = QueueMetricsSettings(queues=("a-*",), top=2)
    registry = CollectorRegistry()
    registry.register(SegmentCollector({1: m}, lambda: T0 + 5000, settings))
    text = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    disk = {s.labels["queue"]: s.value for s in families["cmq_queue_disk_bytes"].samples}
    assert set(disk) == {"a-big", "a-mid", "_other"}
    assert disk["_other"] == figures["a-small"][1] + figures["b-other"][1]
    sealed = {
        s.labels["queue"]: s.value
        for s in families["cmq_queue_segments"].samples
        if s.labels["state"] == "sealed"
    }
    assert sealed["_other"] == figures["a-small"][0].sealed + figures["b-other"][0].sealed
    everyone = CollectorRegistry()
    everyone.register(SegmentCollector({1: m}, lambda: T0 + 5000))
    text = generate_latest(everyone).decode()
    assert "_other" not in text and 'queue="a-small"' in text  # under the default cap
