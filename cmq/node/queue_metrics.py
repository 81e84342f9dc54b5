"""Per-queue metrics on ``/metrics``: `QueueMetricsCollector`, exported only by the node that
leads each queue's group (so every series has one source), read at scrape time.

One pass over the led groups' machines (`QueueMachine.gauges`: in memory, no segment read, no
await, no Raft call), then at most `QueueMetricsSettings.top` queues whose names match
`QueueMetricsSettings.queues` get their own ``queue`` label, chosen by depth (visible + in
flight + delayed, ties by name); the rest are folded into one ``queue="_other"`` series (sums;
the oldest age is the maximum), so the series count is bounded whatever the number of queues.
A queue named ``_other`` is always folded. Counters of ``_other`` go down when a queue leaves
the fold (Prometheus treats that as a reset); a queue's own counters reset when its group's
leadership moves (the new leader's series starts) and the ``received``/``nacked`` ones when the
leader restarts (they are counted as commands apply, not replicated).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from operator import attrgetter

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from cmq.errors import InvalidParameter
from cmq.fsm.gauges import QueueGauges
from cmq.fsm.machine import QueueMachine
from raftlog.runtime import MultiRaft

__all__ = [
    "OTHER",
    "QueueMetricsCollector",
    "QueueMetricsSettings",
    "choose_labelled",
    "led_groups",
]

OTHER = "_other"
"""The ``queue`` label of the series the queues without their own label are folded into."""
DEFAULT_TOP = 1000


@dataclass(frozen=True, slots=True)
class QueueMetricsSettings:
    """Which queues get their own series: names matching one of the globs ``queues``
    (`fnmatch` syntax, case-sensitive), at most ``top`` of them (the deepest)."""

    queues: tuple[str, ...] = ("*",)
    top: int = DEFAULT_TOP

    def __post_init__(self) -> None:
        if self.top < 0:
            raise InvalidParameter(f"--metrics-top-queues must be >= 0, not {self.top}")
        if not self.queues or any(not g for g in self.queues):
            raise InvalidParameter("--metrics-queues needs at least one non-empty glob")

    @classmethod
    def parse(
        cls, queues: str | Iterable[str] | None, top: int | str | None
    ) -> QueueMetricsSettings:
        """From the settings' text: ``queues`` as ``GLOB[,GLOB...]`` (or a list of globs, as a
        TOML config file may give it; None: every queue), ``top`` a count (None: 1000).
        `InvalidParameter` on a bad value."""
        if queues is None:
            globs: tuple[str, ...] = ("*",)
        elif isinstance(queues, str):
            globs = tuple(g.strip() for g in queues.split(","))
        else:
            globs = tuple(str(g).strip() for g in queues)
        try:
            count = DEFAULT_TOP if top is None else int(top)
        except ValueError:
            raise InvalidParameter(f"--metrics-top-queues must be a count, not {top!r}") from None
        return cls(globs, count)

    def matcher(self) -> Callable[[str], bool]:
        """Whether a queue name matches one of the globs (one compiled pattern)."""
        if "*" in self.queues:
            return lambda name: True
        pattern = re.compile("|".join(f"(?:{fnmatch.translate(g)})" for g in self.queues))
        return lambda name: pattern.match(name) is not None


def choose_labelled(
    rows: Iterable[QueueGauges], settings: QueueMetricsSettings
) -> tuple[list[QueueGauges], list[QueueGauges]]:
    """Split ``rows`` into (labelled, folded): those matching the globs, the ``top`` deepest
    of them when more (ties by name); everything else (and a queue named `OTHER`) folded."""
    matches = settings.matcher()
    labelled: list[QueueGauges] = []
    folded: list[QueueGauges] = []
    for row in rows:
        (labelled if row.name != OTHER and matches(row.name) else folded).append(row)
    if len(labelled) > settings.top:
        labelled.sort(key=lambda r: (-r.depth, r.name))
        folded.extend(labelled[settings.top :])
        del labelled[settings.top :]
    return labelled, folded


def led_groups(raft: MultiRaft) -> Callable[[], set[int]]:
    """The groups ``raft``'s node leads now (one `MultiRaft.stats` snapshot per call)."""

    def led() -> set[int]:
        stats = raft.stats()
        return {g.group for g in stats.groups if g.leader == stats.node}

    return led


_GAUGES = (
    ("cmq_queue_messages_visible", "Messages a receive would get now.", "visible"),
    (
        "cmq_queue_messages_inflight",
        "Messages leased and not yet visible again (or waiting for the dead-letter queue).",
        "in_flight",
    ),
    (
        "cmq_queue_messages_delayed",
        "Messages invisible without a lease (delayed sends, nacks with a delay).",
        "delayed",
    ),
    (
        "cmq_queue_bytes",
        "Bytes of the queue's segment files not yet released: the stored messages plus the "
        "records of deleted ones sharing their segments (not the per-message live bytes).",
        "bytes",
    ),
    (
        "cmq_queue_fifo_groups_blocked",
        "FIFO message groups with a message in flight, which holds the rest of the group back "
        "(0 for a standard queue).",
        "fifo_groups_blocked",
    ),
)
_COUNTERS = (
    ("cmq_queue_sends", "Messages stored by sends (replicated count).", "sent_total"),
    (
        "cmq_queue_receives",
        "Messages delivered (leased) by receives; counted on this node as commands apply.",
        "received_total",
    ),
    ("cmq_queue_acks", "Messages deleted by acks (replicated count).", "acked_total"),
    (
        "cmq_queue_nacks",
        "Leases released early (nack, or visibility set to 0); counted on this node as "
        "commands apply.",
        "nacked_total",
    ),
    (
        "cmq_queue_expirations",
        "Messages deleted by the retention period (replicated count).",
        "expired_total",
    ),
    (
        "cmq_queue_dead_letters",
        "Messages moved to the dead-letter queue (replicated count).",
        "dead_lettered_total",
    ),
)


class QueueMetricsCollector(Collector):
    """Per-queue series for the queues of the groups this node leads (see the module
    docstring). ``led``: the groups led now; ``machines``: data group -> its queue machine;
    ``waiting``: queue -> receives long-polling here now; ``subscriptions``: queue -> stream
    subscriptions open on this node."""

    def __init__(
        self,
        machines: Mapping[int, QueueMachine],
        led: Callable[[], Collection[int]],
        now_ms: Callable[[], int],
        settings: QueueMetricsSettings = QueueMetricsSettings(),
        *,
        waiting: Callable[[], Mapping[str, int]] = dict,
        subscriptions: Callable[[], Mapping[str, int]] = dict,
    ) -> None:
        self.machines = machines
        self.led = led
        self.now_ms = now_ms
        self.settings = settings
        self.waiting = waiting
        self.subscriptions = subscriptions

    def rows(self) -> list[QueueGauges]:
        """The figures of every queue of the led groups, now."""
        now = self.now_ms()
        rows: list[QueueGauges] = []
        for group in self.led():
            machine = self.machines.get(group)
            if machine is not None:
                rows.extend(machine.gauges(now))
        return rows

    def collect(self) -> Iterator[Metric]:
        labelled, folded = choose_labelled(self.rows(), self.settings)
        waiting, subs = self.waiting(), self.subscriptions()

        def consumers(name: str) -> int:
            return waiting.get(name, 0) + subs.get(name, 0)

        for metric, doc, field in _GAUGES:
            family = GaugeMetricFamily(metric, doc, labels=["queue"])
            _fill(family, labelled, folded, field)
            yield family
        oldest = GaugeMetricFamily(
            "cmq_queue_oldest_message_age_seconds",
            "Age of the oldest visible message (0 when none is visible; _other: the maximum).",
            labels=["queue"],
        )
        waiters = GaugeMetricFamily(
            "cmq_queue_consumers_waiting",
            "Receives long-polling the queue at this leader (forwarded ones and the stream's "
            "receive loops included) plus stream subscriptions open on this node.",
            labels=["queue"],
        )
        for r in labelled:
            oldest.add_metric([r.name], r.oldest_visible_ms / 1000)
            waiters.add_metric([r.name], consumers(r.name))
        if folded:
            oldest.add_metric([OTHER], max(r.oldest_visible_ms for r in folded) / 1000)
            waiters.add_metric([OTHER], sum(consumers(r.name) for r in folded))
        yield oldest
        yield waiters
        for metric, doc, field in _COUNTERS:
            counter = CounterMetricFamily(metric, doc, labels=["queue"])
            _fill(counter, labelled, folded, field)
            yield counter
        yield GaugeMetricFamily(
            "cmq_queue_series_folded",
            f"Queues led here folded into queue={OTHER!r} (beyond --metrics-top-queues or "
            "not matching --metrics-queues).",
            value=len(folded),
        )


def _fill(
    family: GaugeMetricFamily | CounterMetricFamily,
    labelled: list[QueueGauges],
    folded: list[QueueGauges],
    field: str,
) -> None:
    """One sample of ``field`` per labelled queue, and their sum for `OTHER` if any folded."""
    read = attrgetter(field)
    for r in labelled:
        family.add_metric([r.name], read(r))
    if folded:
        family.add_metric([OTHER], sum(map(read, folded)))
