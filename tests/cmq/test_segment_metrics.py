"""The queues' segment metrics (`cmq.node.metrics.SegmentCollector`) read from real queue
machines."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from cmq.fsm import CreateQueue, Lease, Leased, MemorySegmentStore, NewMessage, Produce
from cmq.fsm.commands import Ack
from cmq.fsm.machine import QueueMachine
from cmq.model import QueueAttributes
from cmq.node.metrics import SegmentCollector
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
