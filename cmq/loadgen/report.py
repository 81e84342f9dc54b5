"""A ``cmq bench`` run's settings (`BenchConfig`) and results (`BenchReport`), and how they are
printed: the progress line, the human report and the JSON report. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from cmq.loadgen.body import HEADER_LEN, MAX_PRODUCERS
from cmq.loadgen.measure import LatencyHistogram

# -- configuration and results ---------------------------------------------------------------------
MAX_SEND_BATCH: Final = 100
MAX_RECV_BATCH: Final = 100
MAX_REQUEST_BYTES: Final = 16 * 1024 * 1024
DEFAULT_MAX_MESSAGE_SIZE: Final = 262_144
MAX_MESSAGE_SIZE: Final = 1_048_576
PERCENTILES: Final = (50.0, 90.0, 99.0, 99.9)
LEFT_KEYS: Final = ("visible", "in_flight", "delayed")


PROTOCOLS = ("http", "stream")


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """One run's settings; :meth:`validate` states the limits."""

    urls: tuple[str, ...] = ("http://127.0.0.1:8080",)
    queue: str | None = None
    """None: a fresh ``bench-<tag>`` queue."""
    producers: int = 4
    consumers: int = 2
    size: int = 1024
    """Body bytes per message (≥ :data:`HEADER_LEN`)."""
    window: int = 64
    """Send requests in flight per producer."""
    batch: int = 1
    """Messages per send request."""
    recv_batch: int = 32
    recv_window: int = 4
    """Receive loops (requests in flight) per consumer."""
    rate: float = 0.0
    """Messages per second over all producers; 0 = as fast as possible."""
    messages: int = 0
    """Stop producing after this many messages in total; 0 = no limit."""
    seconds: float | None = 20.0
    """Stop producing after this long; None = no limit (needs ``messages``)."""
    drain: bool = True
    drain_timeout: float = 60.0
    """Give up draining after this long (leases lost in transit need the visibility timeout)."""
    keep_queue: bool = False
    request_timeout: float = 30.0
    protocol: str = "http"
    """``http`` (one request per send / receive / ack) or ``stream`` (one WebSocket per
    producer and consumer: ``window`` unconfirmed sends, deliveries pushed within a credit of
    ``recv_batch`` x ``recv_window``)."""
    leader_direct: bool = True
    """HTTP: each client sends a queue's calls to its leader once a node named it
    (`cmq.client.leaders`); False: to its own node, which forwards them."""

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first setting out of its range."""
        checks: list[tuple[bool, str]] = [
            (len(self.urls) > 0, "at least one --url is needed"),
            (0 <= self.producers <= MAX_PRODUCERS, f"--producers must be in [0, {MAX_PRODUCERS}]"),
            (0 <= self.consumers <= 10_000, "--consumers must be in [0, 10000]"),
            (self.producers + self.consumers > 0, "need at least one producer or consumer"),
            (
                HEADER_LEN <= self.size <= MAX_MESSAGE_SIZE,
                f"--size must be in [{HEADER_LEN}, {MAX_MESSAGE_SIZE}]",
            ),
            (1 <= self.window <= 10_000, "--window must be in [1, 10000]"),
            (1 <= self.batch <= MAX_SEND_BATCH, f"--batch must be in [1, {MAX_SEND_BATCH}]"),
            (
                self.batch * (self.size + 64) <= MAX_REQUEST_BYTES,
                f"--batch * --size must stay under the {MAX_REQUEST_BYTES} request limit",
            ),
            (
                1 <= self.recv_batch <= MAX_RECV_BATCH,
                f"--recv-batch must be in [1, {MAX_RECV_BATCH}]",
            ),
            (1 <= self.recv_window <= 1_000, "--recv-window must be in [1, 1000]"),
            (self.rate >= 0 and math.isfinite(self.rate), "--rate must be ≥ 0"),
            (self.messages >= 0, "--messages must be ≥ 0"),
            (
                self.seconds is None or (0 < self.seconds <= 86_400),
                "--seconds must be in (0, 86400]",
            ),
            (
                self.seconds is not None or self.messages > 0 or self.producers == 0,
                "without --seconds, --messages is needed",
            ),
            (
                self.seconds is not None or self.producers > 0,
                "consumers alone need --seconds",
            ),
            (0 < self.drain_timeout <= 3_600, "--drain-timeout must be in (0, 3600]"),
            (0 < self.request_timeout <= 600, "the request timeout must be in (0, 600]"),
            (self.protocol in PROTOCOLS, f"--protocol must be one of {', '.join(PROTOCOLS)}"),
        ]
        for ok, why in checks:
            if not ok:
                raise ValueError(why)


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """Percentiles of one latency histogram, in milliseconds."""

    count: int
    percentiles: tuple[tuple[float, float], ...]
    """``(percentile, ms)`` for each of :data:`PERCENTILES`."""
    max_ms: float
    mean_ms: float

    @staticmethod
    def of(hist: LatencyHistogram) -> LatencySummary:
        """The summary of a histogram of microseconds."""
        return LatencySummary(
            count=hist.count,
            percentiles=tuple((q, hist.percentile(q) / 1000) for q in PERCENTILES),
            max_ms=hist.max / 1000,
            mean_ms=hist.mean / 1000,
        )


@dataclass(frozen=True, slots=True)
class BenchReport:
    """What a run measured. Rates are per second of the phase that produced them."""

    queue: str
    created_queue: bool
    deleted_queue: bool
    config: BenchConfig
    produce_seconds: float
    """From the start until the last send answered."""
    consume_seconds: float
    """From the start until the last ack answered."""
    drain_seconds: float
    sent: int
    """Messages in send requests issued (a retried request counts once)."""
    confirmed: int
    failed: int
    """Messages whose send request finally failed (committed or not: unknown)."""
    resent: int
    """Messages sent again after a retriable error."""
    received: int
    """Distinct messages of this run received."""
    deliveries: int
    """Messages received, duplicates and foreign ones included."""
    acked: int
    duplicates: int
    missing: int | None
    """Confirmed but never received; None when the run did not drain."""
    drain_result: str
    """How the drain ended: ``complete`` (every confirmed message received), ``empty`` (the
    queue stayed empty: what is missing is lost), ``timeout`` (messages were still coming),
    ``interrupted`` (Ctrl-C) or ``skipped`` (no drain)."""
    left_in_queue: Mapping[str, int] | None
    """``visible``, ``in_flight``, ``delayed`` from the queue's stats when the drain ended
    (None when not drained or the stats could not be read)."""
    unconfirmed_received: int
    foreign: int
    """Messages received that this run did not send (acknowledged all the same)."""
    errors: Mapping[str, int]
    confirm_latency: LatencySummary
    e2e_latency: LatencySummary
    schedule_lag: float | None = None
    """At a fixed ``rate``: the worst lateness (s) of a send's start against its due time
    (large when ``producers`` x ``window`` cannot keep the rate); None at full speed."""

    @property
    def confirmed_per_s(self) -> float:
        """Confirmed messages per second of production."""
        return self.confirmed / self.produce_seconds if self.produce_seconds > 0 else 0.0

    @property
    def acked_per_s(self) -> float:
        """Acknowledged messages per second of consumption."""
        return self.acked / self.consume_seconds if self.consume_seconds > 0 else 0.0

    def mib_per_s(self, msgs_per_s: float) -> float:
        """Body MiB per second at ``msgs_per_s``."""
        return msgs_per_s * self.config.size / (1024 * 1024)

    @property
    def drained(self) -> bool:
        """A full drain: every confirmed message was received or the queue stayed empty."""
        return self.drain_result in ("complete", "empty")

    @property
    def ok(self) -> bool:
        """The run's verdict: something was confirmed (when producing) and, after a full
        drain, nothing confirmed is missing."""
        if self.config.producers > 0 and self.confirmed == 0:
            return False
        return not (self.drained and self.missing)


# -- formatting ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ProgressSample:
    """Cumulative counters at one instant, for :func:`format_progress`."""

    at: float
    sent: int
    confirmed: int
    consumed: int
    errors: int
    phase: str = "run"


def format_progress(prev: ProgressSample, cur: ProgressSample) -> str:
    """One progress line: elapsed time, rates over ``prev → cur``, and the total errors."""
    dt = cur.at - prev.at
    per_s = (lambda a, b: (b - a) / dt) if dt > 0 else (lambda a, b: 0.0)
    return (
        f"[{cur.at:6.1f}s {cur.phase:5}] sent {per_s(prev.sent, cur.sent):9,.0f}/s"
        f"  confirmed {per_s(prev.confirmed, cur.confirmed):9,.0f}/s"
        f"  consumed {per_s(prev.consumed, cur.consumed):9,.0f}/s"
        f"  errors {cur.errors:,}"
    )


def _latency_line(s: LatencySummary) -> str:
    if s.count == 0:
        return "-"
    parts = [f"p{q:g} {ms:.2f}" for q, ms in s.percentiles]
    return "  ".join([*parts, f"max {s.max_ms:.2f}", f"mean {s.mean_ms:.2f}"])


def _left(left: Mapping[str, int] | None) -> str:
    if left is None:
        return "-"
    return ", ".join(f"{k.replace('_', ' ')} {left.get(k, 0):,}" for k in LEFT_KEYS)


def _verdict(r: BenchReport) -> str:
    if not r.ok:
        return "FAILED"
    if r.missing and not r.drained:
        return "ok (loss not checked: the drain did not finish)"
    return "ok"


def format_report(r: BenchReport) -> str:
    """The human report: one figure per line."""
    c = r.config
    queue_note = []
    if r.created_queue:
        queue_note.append("created")
    if r.deleted_queue:
        queue_note.append("deleted")
    rate = f"{c.rate:,.0f} msgs/s open loop" if c.rate else "max"
    if r.schedule_lag is not None:
        rate += f" (worst start {r.schedule_lag * 1000:,.1f} ms late)"
    if r.missing is None:
        missing = "not checked (no drain)"
    else:
        how = {
            "complete": "after a full drain",
            "empty": "LOST: after a full drain, the queue is empty",
            "timeout": "not conclusive: the drain timed out",
            "interrupted": "not conclusive: the drain was interrupted",
        }.get(r.drain_result, r.drain_result)
        missing = f"{r.missing:,} ({how}; {r.drain_seconds:.1f} s)"
    errors = ", ".join(f"{k} {v:,}" for k, v in sorted(r.errors.items())) or "none"
    rows = [
        ("queue", f"{r.queue}" + (f" ({', '.join(queue_note)})" if queue_note else "")),
        (
            "producers",
            f"{c.producers} x window {c.window}, batch {c.batch}, {c.size:,} B, rate {rate}",
        ),
        (
            "consumers",
            f"{c.consumers} x {c.recv_window} receive loops, batch {c.recv_batch}"
            if c.protocol == "http"
            else f"{c.consumers} x prefetch {c.recv_batch * c.recv_window}, batch {c.recv_batch}",
        ),
        ("protocol", c.protocol + ("" if c.leader_direct else ", no leader-direct")),
        ("sent", f"{r.sent:,} msgs in {r.produce_seconds:.1f} s"),
        (
            "confirmed",
            f"{r.confirmed:,} msgs  {r.confirmed_per_s:,.0f} msgs/s"
            f"  {r.mib_per_s(r.confirmed_per_s):.2f} MiB/s",
        ),
        (
            "consumed+acked",
            f"{r.acked:,} msgs  {r.acked_per_s:,.0f} msgs/s"
            f"  {r.mib_per_s(r.acked_per_s):.2f} MiB/s",
        ),
        ("confirm latency ms", _latency_line(r.confirm_latency)),
        ("e2e latency ms", _latency_line(r.e2e_latency)),
        ("received", f"{r.received:,} distinct, {r.deliveries:,} deliveries"),
        ("duplicates", f"{r.duplicates:,}"),
        ("missing", missing),
        ("left in queue", _left(r.left_in_queue)),
        ("failed sends", f"{r.failed:,} msgs (resent after retriable errors: {r.resent:,})"),
        ("unconfirmed received", f"{r.unconfirmed_received:,}"),
        ("foreign", f"{r.foreign:,}"),
        ("errors", errors),
        ("verdict", _verdict(r)),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def _latency_json(s: LatencySummary) -> dict[str, Any]:
    out: dict[str, Any] = {"count": s.count}
    out.update({f"p{q:g}": round(ms, 3) for q, ms in s.percentiles})
    out["max"] = round(s.max_ms, 3)
    out["mean"] = round(s.mean_ms, 3)
    return out


def report_to_json(r: BenchReport) -> dict[str, Any]:
    """The machine-readable report (latencies in ms, rates per second)."""
    c = r.config
    return {
        "queue": r.queue,
        "created_queue": r.created_queue,
        "deleted_queue": r.deleted_queue,
        "config": {
            "urls": list(c.urls),
            "producers": c.producers,
            "consumers": c.consumers,
            "size": c.size,
            "window": c.window,
            "batch": c.batch,
            "recv_batch": c.recv_batch,
            "recv_window": c.recv_window,
            "rate": c.rate,
            "messages": c.messages,
            "seconds": c.seconds,
            "drain": c.drain,
            "protocol": c.protocol,
            "leader_direct": c.leader_direct,
        },
        "produce_seconds": round(r.produce_seconds, 3),
        "consume_seconds": round(r.consume_seconds, 3),
        "drain_seconds": round(r.drain_seconds, 3),
        "sent": r.sent,
        "confirmed": r.confirmed,
        "failed": r.failed,
        "resent": r.resent,
        "received": r.received,
        "deliveries": r.deliveries,
        "acked": r.acked,
        "duplicates": r.duplicates,
        "missing": r.missing,
        "drained": r.drained,
        "drain_result": r.drain_result,
        "left_in_queue": dict(r.left_in_queue) if r.left_in_queue is not None else None,
        "unconfirmed_received": r.unconfirmed_received,
        "foreign": r.foreign,
        "errors": dict(sorted(r.errors.items())),
        "confirmed_msgs_per_s": round(r.confirmed_per_s, 1),
        "confirmed_mib_per_s": round(r.mib_per_s(r.confirmed_per_s), 3),
        "acked_msgs_per_s": round(r.acked_per_s, 1),
        "acked_mib_per_s": round(r.mib_per_s(r.acked_per_s), 3),
        "confirm_latency_ms": _latency_json(r.confirm_latency),
        "e2e_latency_ms": _latency_json(r.e2e_latency),
        "schedule_lag_ms": (
            round(r.schedule_lag * 1000, 3) if r.schedule_lag is not None else None
        ),
        "ok": r.ok,
    }
