"""SLO gates of a load test run, as pure functions (no Locust import, so tests can use them).

The locustfile builds an :class:`Observed` from Locust's statistics when the run ends and asks
:func:`evaluate` for the breached objectives; any breach makes the run's exit code 1. A gate
never passes vacuously: a run that sent nothing or recorded no end-to-end latency fails.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

ENV_MAX_FAILURE_RATIO = "SLO_MAX_FAILURE_RATIO"
ENV_SEND_P99_MS = "SLO_SEND_P99_MS"
ENV_E2E_P99_MS = "SLO_E2E_P99_MS"


@dataclass(frozen=True, slots=True)
class Slo:
    """The objectives; each threshold is inclusive (observed == threshold passes)."""

    max_failure_ratio: float = 0.01
    """Failed HTTP requests / all HTTP requests (send, receive, ack; E2E events excluded)."""
    send_p99_ms: float = 1000.0
    """99th percentile of a send request (one batch, confirmed once fsynced on a majority)."""
    e2e_p99_ms: float = 2000.0
    """99th percentile of end-to-end latency: producer's send start to the consumer holding it."""


@dataclass(frozen=True, slots=True)
class Observed:
    """What a run measured; percentiles are ``None`` when there was no sample."""

    requests: int
    failures: int
    send_count: int
    send_p99_ms: float | None
    e2e_count: int
    e2e_p99_ms: float | None


def slo_from_env(env: Mapping[str, str] | None = None) -> Slo:
    """The objectives with any ``SLO_*`` variable of ``env`` (default ``os.environ``) applied.

    Raises ``ValueError`` naming the variable when a value is not a non-negative number.
    """
    env = os.environ if env is None else env
    default = Slo()

    def number(name: str, fallback: float) -> float:
        raw = env.get(name, "").strip()
        if not raw:
            return fallback
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"{name}={raw!r} is not a number") from None
        if not value >= 0:  # also refuses NaN
            raise ValueError(f"{name}={raw!r} must be >= 0")
        return value

    return Slo(
        max_failure_ratio=number(ENV_MAX_FAILURE_RATIO, default.max_failure_ratio),
        send_p99_ms=number(ENV_SEND_P99_MS, default.send_p99_ms),
        e2e_p99_ms=number(ENV_E2E_P99_MS, default.e2e_p99_ms),
    )


def evaluate(slo: Slo, observed: Observed) -> list[str]:
    """The breached objectives, one human-readable line each; an empty list means all passed."""
    breaches: list[str] = []
    if observed.requests <= 0:
        breaches.append("failure ratio: no HTTP request was made")
    else:
        ratio = observed.failures / observed.requests
        if ratio > slo.max_failure_ratio:
            breaches.append(
                f"failure ratio {ratio:.4f} ({observed.failures}/{observed.requests}) "
                f"> {slo.max_failure_ratio:g}"
            )
    if observed.send_count <= 0 or observed.send_p99_ms is None:
        breaches.append("send p99: no send request was made")
    elif observed.send_p99_ms > slo.send_p99_ms:
        breaches.append(f"send p99 {observed.send_p99_ms:g} ms > {slo.send_p99_ms:g} ms")
    if observed.e2e_count <= 0 or observed.e2e_p99_ms is None:
        breaches.append("e2e p99: no message made it from a producer to a consumer")
    elif observed.e2e_p99_ms > slo.e2e_p99_ms:
        breaches.append(f"e2e p99 {observed.e2e_p99_ms:g} ms > {slo.e2e_p99_ms:g} ms")
    return breaches


def report(slo: Slo, observed: Observed, breaches: list[str]) -> dict[str, Any]:
    """A JSON-ready summary of a verdict (written next to the CSV files by the locustfile)."""
    return {
        "passed": not breaches,
        "breaches": list(breaches),
        "slo": asdict(slo),
        "observed": asdict(observed),
    }


def bucket_ms(ms: float) -> int:
    """Round a latency like Locust's statistics do: 1 ms below 100, then 2 significant digits."""
    if ms < 100:
        return round(ms)
    step = 10 ** (int(math.log10(ms)) - 1)
    return round(ms / step) * step


@dataclass(slots=True)
class Series:
    """Latencies of one kind of request within one stage of a run (bucketed, constant memory)."""

    count: int = 0
    failures: int = 0
    buckets: Counter[int] = field(default_factory=Counter)

    def add(self, ms: float, failed: bool) -> None:
        self.count += 1
        self.failures += failed
        self.buckets[bucket_ms(ms)] += 1

    def percentile(self, q: float) -> float | None:
        """The smallest bucket with at least ``q`` of the samples at or below it."""
        if not self.count:
            return None
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for ms in sorted(self.buckets):
            seen += self.buckets[ms]
            if seen >= rank:
                return float(ms)
        raise AssertionError("unreachable: the buckets hold count samples")


@dataclass(slots=True)
class Stage:
    """What one user count of a run saw: sends, end-to-end samples, all HTTP requests."""

    users: int
    first_s: float
    last_s: float
    send: Series = field(default_factory=Series)
    e2e: Series = field(default_factory=Series)
    http: Series = field(default_factory=Series)

    def summary(self, batch: int) -> dict[str, Any]:
        seconds = max(self.last_s - self.first_s, 1e-9)
        return {
            "users": self.users,
            "seconds": round(seconds, 1),
            "send_per_s": round(self.send.count / seconds, 1),
            "messages_per_s": round((self.send.count - self.send.failures) * batch / seconds),
            "send_p50_ms": self.send.percentile(0.5),
            "send_p99_ms": self.send.percentile(0.99),
            "e2e_p50_ms": self.e2e.percentile(0.5),
            "e2e_p99_ms": self.e2e.percentile(0.99),
            "http_requests": self.http.count,
            "http_failures": self.http.failures,
        }


def stage_table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of :meth:`Stage.summary` rows (printed at the end, pasted in READMEs)."""

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:g}"

    lines = [
        "| users | send req/s | msgs/s | send p50 / p99 ms | e2e p50 / p99 ms | failures |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['users']} | {r['send_per_s']:g} | {r['messages_per_s']} "
            f"| {ms(r['send_p50_ms'])} / {ms(r['send_p99_ms'])} "
            f"| {ms(r['e2e_p50_ms'])} / {ms(r['e2e_p99_ms'])} "
            f"| {r['http_failures']}/{r['http_requests']} |"
        )
    return "\n".join(lines)
