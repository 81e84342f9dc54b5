"""Per-queue metrics (`cmq.node.queue_metrics.QueueMetricsCollector`) over real queue
machines: the values after sends, receives, acks, nacks and visibility changes, FIFO groups
blocked, only the led groups' queues, and the cardinality cap (top-N by depth, name globs)
folding the rest into ``queue="_other"``. The exposition is parsed, not grepped."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cmq.errors import InvalidParameter
from cmq.fsm import CreateQueue, Lease, Leased, MemorySegmentStore, NewMessage, Produce
from cmq.fsm.commands import Ack, ChangeVisibility, Nack, Tidy
from cmq.fsm.machine import QueueMachine
from cmq.model import QueueAttributes
from cmq.node.queue_metrics import OTHER, QueueMetricsCollector, QueueMetricsSettings
from tests.cmq.fsm.harness import Applier

T0 = 1_700_000_000_000
Samples = dict[tuple[str, str], float]


def scrape(
    machines: dict[int, QueueMachine],
    led: Collection[int] = (1,),
    settings: QueueMetricsSettings | None = None,
    now: int = T0 + 5000,
    waiting: dict[str, int] | None = None,
) -> Samples:
    """The collector's exposition, parsed: (sample name, queue label) -> value."""
    registry = CollectorRegistry()
    registry.register(
        QueueMetricsCollector(
            machines,
            lambda: led,
            lambda: now,
            settings or QueueMetricsSettings(),
            waiting=lambda: waiting or {},
        )
    )
    text = generate_latest(registry).decode()
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, s.labels.get("queue", ""))] = s.value
    return out


def msg(i: int, delay_ms: int | None = None, group: str | None = None) -> NewMessage:
    dedup = f"d{i}" if group is not None else None
    return NewMessage(f"m{i}", b"x" * 10, False, (), delay_ms, dedup, group)


def filled(*queues: tuple[str, int]) -> QueueMachine:
    """A machine with each (name, visible messages) queue."""
    m = QueueMachine(MemorySegmentStore())
    run = Applier(m)
    for name, n in queues:
        run(CreateQueue(name, QueueAttributes(), T0, 1 << 20, 3_600_000))
        if n:
            run(Produce(name, T0, tuple(msg(i) for i in range(n))))
    return m


def test_gauges_and_counters_after_sends_receives_acks_and_nacks() -> None:
    m = QueueMachine(MemorySegmentStore())
    run = Applier(m)
    run(CreateQueue("q", QueueAttributes(visibility_timeout=30), T0, 1 << 20, 3_600_000))
    run(Produce("q", T0, (msg(1), msg(2))))
    run(Produce("q", T0 + 1000, (msg(3), msg(4), msg(5), msg(6, delay_ms=60_000))))
    leased = run(Lease("q", T0 + 1000, 4, None))
    assert isinstance(leased, Leased)
    lm = {x.seq: x for x in leased.messages}
    assert sorted(lm) == [1, 2, 3, 4]
    run(Ack("q", T0 + 1000, ((2, lm[2].lease_id),)))
    run(Nack("q", T0 + 1000, ((3, lm[3].lease_id),), 0))
    run(ChangeVisibility("q", T0 + 1000, ((4, lm[4].lease_id, 0),)))
    run(ChangeVisibility("q", T0 + 1000, ((1, lm[1].lease_id, 20_000),)))  # not a nack

    got = scrape({1: m})
    # Seq 1 (sent at T0) is in flight: the oldest *visible* is seq 3, sent at T0 + 1000.
    assert got[("cmq_queue_messages_visible", "q")] == 3
    assert got[("cmq_queue_messages_inflight", "q")] == 1
    assert got[("cmq_queue_messages_delayed", "q")] == 1
    assert got[("cmq_queue_oldest_message_age_seconds", "q")] == 4.0
    assert got[("cmq_queue_sends_total", "q")] == 6
    assert got[("cmq_queue_receives_total", "q")] == 4
    assert got[("cmq_queue_acks_total", "q")] == 1
    assert got[("cmq_queue_nacks_total", "q")] == 2
    assert got[("cmq_queue_expirations_total", "q")] == 0
    assert got[("cmq_queue_dead_letters_total", "q")] == 0
    assert got[("cmq_queue_fifo_groups_blocked", "q")] == 0
    stats = m.stats("q", T0 + 5000)
    assert stats is not None and stats.oldest_age_ms == 5000  # the oldest live, in flight
    assert got[("cmq_queue_bytes", "q")] == stats.disk_bytes > 0
    assert got[("cmq_queue_consumers_waiting", "q")] == 0
    assert got[("cmq_queue_series_folded", "")] == 0
    assert not any(queue == OTHER for _, queue in got)  # nothing folded: no _other series

    # All leases lapse: every live message is visible, the oldest sent at T0.
    later = scrape({1: m}, now=T0 + 90_000)
    assert later[("cmq_queue_messages_visible", "q")] == 5
    assert later[("cmq_queue_oldest_message_age_seconds", "q")] == 90.0


def test_no_visible_message_means_age_zero_and_waiting_consumers_are_counted() -> None:
    m = filled(("empty", 0))
    got = scrape({1: m}, waiting={"empty": 2, "elsewhere": 5})
    assert got[("cmq_queue_oldest_message_age_seconds", "empty")] == 0
    assert got[("cmq_queue_consumers_waiting", "empty")] == 2
    assert ("cmq_queue_consumers_waiting", "elsewhere") not in got


def test_fifo_groups_with_a_message_in_flight_are_blocked() -> None:
    m = QueueMachine(MemorySegmentStore())
    run = Applier(m)
    run(CreateQueue("f.fifo", QueueAttributes(fifo=True), T0, 1 << 20, 3_600_000))
    run(Produce("f.fifo", T0, tuple(msg(i, group="abc"[i % 3]) for i in range(9))))
    first = run(Lease("f.fifo", T0, 3, None))  # group a's three messages
    second = run(Lease("f.fifo", T0, 1, None))  # group b's head
    assert isinstance(first, Leased) and isinstance(second, Leased)
    got = scrape({1: m})
    assert got[("cmq_queue_fifo_groups_blocked", "f.fifo")] == 2
    assert got[("cmq_queue_messages_inflight", "f.fifo")] == 4
    run(Ack("f.fifo", T0, tuple((x.seq, x.lease_id) for x in first.messages)))
    assert scrape({1: m})[("cmq_queue_fifo_groups_blocked", "f.fifo")] == 1


def test_only_the_queues_of_led_groups_are_exported() -> None:
    machines = {1: filled(("mine", 1)), 2: filled(("theirs", 1))}
    got = scrape(machines, led=(1, 3))  # group 3 has no replica here: skipped
    assert got[("cmq_queue_messages_visible", "mine")] == 1
    assert not any(queue == "theirs" for _, queue in got)
    assert scrape(machines, led=())[("cmq_queue_series_folded", "")] == 0
    assert not any(queue for _, queue in scrape(machines, led=()))


def test_top_n_by_depth_labels_the_deepest_and_folds_the_rest_into_other() -> None:
    m = filled(("a", 1), ("b", 5), ("c", 2), ("d", 4), ("e", 3), ("f", 4))
    got = scrape({1: m}, settings=QueueMetricsSettings(top=3))
    labelled = {q for (name, q) in got if name == "cmq_queue_messages_visible"} - {OTHER}
    assert labelled == {"b", "d", "f"}  # depths 5, 4, 4
    assert got[("cmq_queue_messages_visible", OTHER)] == 1 + 2 + 3
    assert got[("cmq_queue_sends_total", OTHER)] == 6
    assert got[("cmq_queue_series_folded", "")] == 3
    assert got[("cmq_queue_oldest_message_age_seconds", OTHER)] == 5.0
    # Ties by name: of d and f (depth 4), d.
    tie = scrape({1: m}, settings=QueueMetricsSettings(top=2))
    assert {q for (n, q) in tie if n == "cmq_queue_bytes"} == {"b", "d", OTHER}
    # Everything folded.
    none = scrape({1: m}, settings=QueueMetricsSettings(top=0))
    assert {q for (n, q) in none if n == "cmq_queue_acks_total"} == {OTHER}
    assert none[("cmq_queue_messages_visible", OTHER)] == 19


def test_globs_choose_the_labelled_queues_and_a_queue_named_other_is_folded() -> None:
    m = filled(("orders-eu", 1), ("orders-us", 2), ("billing", 3), ("audit", 4), (OTHER, 5))
    settings = QueueMetricsSettings.parse("orders-*, billing", None)
    assert settings == QueueMetricsSettings(("orders-*", "billing"), 1000)
    got = scrape({1: m}, settings=settings)
    labelled = {q for (n, q) in got if n == "cmq_queue_messages_delayed"}
    assert labelled == {"orders-eu", "orders-us", "billing", OTHER}
    assert got[("cmq_queue_messages_visible", OTHER)] == 4 + 5
    assert got[("cmq_queue_series_folded", "")] == 2
    # The glob and the cap together: the deepest matching queue only.
    both = scrape({1: m}, settings=QueueMetricsSettings(("orders-*",), 1))
    assert {q for (n, q) in both if n == "cmq_queue_messages_visible"} == {"orders-us", OTHER}
    assert both[("cmq_queue_messages_visible", OTHER)] == 1 + 3 + 4 + 5


@pytest.mark.parametrize(
    ("queues", "top"), [("a,", None), ("", None), (None, "many"), (None, -1), (["a", ""], 3)]
)
def test_bad_settings_are_refused(queues: str | list[str] | None, top: str | int | None) -> None:
    with pytest.raises(InvalidParameter):
        QueueMetricsSettings.parse(queues, top)


def test_settings_from_a_config_file_list_and_defaults() -> None:
    assert QueueMetricsSettings.parse(["a*", "b"], 7) == QueueMetricsSettings(("a*", "b"), 7)
    assert QueueMetricsSettings.parse(None, None) == QueueMetricsSettings(("*",), 1000)


def test_cmq_serve_reads_the_settings_from_flags_env_and_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cmq.cli import server
    from cmq.cli.main import main

    seen: list[QueueMetricsSettings | None] = []

    def run(*args: object, queue_metrics: QueueMetricsSettings | None = None, **_: object) -> int:
        seen.append(queue_metrics)
        return 0

    monkeypatch.setattr(server, "run", run)
    monkeypatch.setenv("CMQ_SECRET", "queue-metrics-test-secret-0123456789")
    base = ["serve", "--node-id", "1", "--data-dir", str(tmp_path / "d")]
    base += ["--peers", "1=127.0.0.1:1"]
    assert main([*base, "--metrics-queues", "a*,b", "--metrics-top-queues", "5"]) == 0
    config = tmp_path / "node.toml"
    config.write_text('metrics_queues = ["x*", "y"]\nmetrics_top_queues = 3\n')
    assert main([*base, "--config", str(config)]) == 0
    monkeypatch.setenv("CMQ_METRICS_TOP_QUEUES", "7")
    assert main(base) == 0
    assert seen == [
        QueueMetricsSettings(("a*", "b"), 5),
        QueueMetricsSettings(("x*", "y"), 3),
        QueueMetricsSettings(("*",), 7),
    ]
    with pytest.raises(SystemExit, match="metrics-top-queues"):
        main([*base, "--metrics-top-queues", "-2"])


def test_a_message_copied_forward_keeps_its_age() -> None:
    from tests.cmq.fsm.lifecycle_env import Env

    e = Env(QueueAttributes(visibility_timeout=30))
    e.produce(30, T0)
    e.produce(1, T0 + 5000)  # seq 31: seals 21..30
    e.lease(1, T0 + 5000, vis=60_000)  # seq 1, kept
    e.ack(e.lease(28, T0 + 5000), T0 + 5000)  # 2..29: 1 (leased) and 30 (ready) left behind
    got = scrape({1: e.m}, now=T0 + 5500)
    assert got[("cmq_queue_oldest_message_age_seconds", "q")] == 5.5  # seq 30, sent at T0
    e.run(Tidy("q", T0 + 6000))  # copies 1 and 30 forward, after 31 (sent at T0 + 5000)
    got = scrape({1: e.m}, now=T0 + 10_000)
    assert got[("cmq_queue_messages_visible", "q")] == 2
    assert got[("cmq_queue_oldest_message_age_seconds", "q")] == 10.0  # 30's copy, not 31
