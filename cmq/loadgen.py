"""``cmq bench``: a load generator for a running cluster, like ``nats bench`` or PerfTest.

Producers keep ``window`` send requests in flight, each of ``batch`` messages; consumers run
``recv_window`` long-poll receive loops each and acknowledge every received batch in one
request. Every body starts with a printable header (run tag, producer, sequence number, send
time) so consumers measure end-to-end latency and the run detects duplicated and missing
messages. After the duration (or ``messages``) production stops and the queue is drained until
every confirmed message was received, or the queue is empty (no delivery for a few seconds and
its stats show nothing visible, delayed or leased: a *full* drain, and what is still missing
then is lost), or the drain timeout passes. Messages leased by a receive whose answer was lost
(client timeout, or a receive the server retried across a leader change) are not lost: they
come back after the visibility timeout, which the bench sets to :data:`RECV_VISIBILITY_TIMEOUT`
on its receives so that a drain can wait for them.

The module is two halves:

* pure logic with no I/O, clocks or asyncio, unit-tested on its own: :func:`encode_body` /
  :func:`decode_body`, :class:`LatencyHistogram`, :class:`TokenBucket`, :class:`SeqTracker`,
  :func:`format_progress`, :func:`format_report`, :func:`report_to_json`;
* the run itself (:func:`run_bench`, :func:`main_from_args`): one ``aiohttp`` session with an
  unlimited connector on one event loop (uvloop when installed), every task owned by a
  ``TaskGroup`` or awaited and cancelled by the run.

Memory is bounded by the configuration, not by the run's length: latencies go to log-bucket
histograms (a fixed number of buckets), and duplicate/missing detection costs two bits per
message sent.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import secrets
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import aiohttp

# -- message bodies --------------------------------------------------------------------------------
_MAGIC: Final = "cmqbench"
_HEADER_FORMAT: Final = "{magic} {tag} {producer:04x} {seq:012x} {sent_us:012x} "
HEADER_LEN: Final = len(
    _HEADER_FORMAT.format(magic=_MAGIC, tag="0" * 8, producer=0, seq=0, sent_us=0)
)
"""The length of the body header: ``--size`` must be at least this."""
MAX_PRODUCERS: Final = 0xFFFF
MAX_SEQ: Final = 0xFFFF_FFFF_FFFF
_MAX_SENT_US: Final = 0xFFFF_FFFF_FFFF
_HEX: Final = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class Stamp:
    """What a body's header says: which run and producer sent it, its sequence, when (µs)."""

    tag: str
    producer: int
    seq: int
    sent_us: int


def new_run_tag() -> str:
    """A random 8-hex-digit tag telling this run's messages from any other run's."""
    return secrets.token_hex(4)


def encode_body(stamp: Stamp, size: int) -> str:
    """A printable ASCII body of exactly ``size`` bytes that starts with ``stamp``'s header.

    ``size`` must be at least :data:`HEADER_LEN`; the tag is 8 lowercase hex digits, the
    producer below 2**16, the sequence and the timestamp below 2**48 (``ValueError`` otherwise).
    """
    if size < HEADER_LEN:
        raise ValueError(f"a body needs at least {HEADER_LEN} bytes; got {size}")
    if len(stamp.tag) != 8 or not set(stamp.tag) <= _HEX:
        raise ValueError(f"the run tag must be 8 lowercase hex digits; got {stamp.tag!r}")
    if not (
        0 <= stamp.producer <= MAX_PRODUCERS
        and 0 <= stamp.seq <= MAX_SEQ
        and 0 <= stamp.sent_us <= _MAX_SENT_US
    ):
        raise ValueError(f"stamp out of range: {stamp}")
    header = _HEADER_FORMAT.format(
        magic=_MAGIC, tag=stamp.tag, producer=stamp.producer, seq=stamp.seq, sent_us=stamp.sent_us
    )
    return header + _padding(size - HEADER_LEN)


_PAD_CACHE: dict[int, str] = {}


def _padding(n: int) -> str:
    pad = _PAD_CACHE.get(n)
    if pad is None:
        pad = ("0123456789abcdefghijklmnopqrstuvwxyz" * (n // 36 + 1))[:n]
        if len(_PAD_CACHE) < 16:  # bounded: a run uses one size
            _PAD_CACHE[n] = pad
    return pad


def decode_body(body: str) -> Stamp | None:
    """The header of a body made by :func:`encode_body`, or None for anything else."""
    if len(body) < HEADER_LEN or not body.startswith(_MAGIC + " "):
        return None
    parts = body[len(_MAGIC) + 1 : HEADER_LEN].split(" ")
    if len(parts) != 5 or parts[4] != "":
        return None
    tag, producer, seq, sent_us = parts[0], parts[1], parts[2], parts[3]
    if (len(tag), len(producer), len(seq), len(sent_us)) != (8, 4, 12, 12) or not set(
        tag + producer + seq + sent_us
    ) <= _HEX:
        return None
    return Stamp(tag, int(producer, 16), int(seq, 16), int(sent_us, 16))


# -- latency histogram -----------------------------------------------------------------------------
class LatencyHistogram:
    """Counts of non-negative integer values (µs) in log-linear buckets, HdrHistogram style.

    Values below ``2 ** (sub_bits + 1)`` are exact; above, every power of two is split into
    ``2 ** sub_bits`` equal buckets, so a reported percentile is within a relative
    ``2 ** -sub_bits`` of a value actually recorded at that rank (≈ 1.6 % with the default 6).
    Values above ``max_value`` are counted as ``max_value``. Memory is a fixed number of buckets
    (about 2,000 for the defaults), whatever the number of values recorded.
    """

    __slots__ = ("_counts", "_max", "_min", "_sub", "_sum", "count", "max_value", "sub_bits")

    def __init__(self, sub_bits: int = 6, max_value: int = 3_600_000_000) -> None:
        if not 1 <= sub_bits <= 16 or max_value < 1:
            raise ValueError("sub_bits must be in [1, 16] and max_value positive")
        self.sub_bits = sub_bits
        self.max_value = max_value
        self._sub = 1 << sub_bits
        self._counts = [0] * (self._index(max_value) + 1)
        self.count = 0
        self._sum = 0
        self._min = 0
        self._max = 0

    def _index(self, value: int) -> int:
        shift = value.bit_length() - self.sub_bits - 1
        if shift <= 0:
            return value
        return (shift + 1) * self._sub + ((value >> shift) - self._sub)

    def _bounds(self, index: int) -> tuple[int, int]:
        """The smallest and largest value counted in bucket ``index``."""
        shift = (index >> self.sub_bits) - 1
        if shift <= 0:
            return index, index
        low = ((index & (self._sub - 1)) + self._sub) << shift
        return low, low + (1 << shift) - 1

    def record(self, value: int, n: int = 1) -> None:
        """Count ``value`` (clamped to ``[0, max_value]``) ``n`` times."""
        if n <= 0:
            return
        value = min(max(0, value), self.max_value)
        self._counts[self._index(value)] += n
        if self.count == 0 or value < self._min:
            self._min = value
        self._max = max(value, self._max)
        self.count += n
        self._sum += value * n

    def merge(self, other: LatencyHistogram) -> None:
        """Add ``other``'s counts (same ``sub_bits`` and ``max_value``) to this histogram."""
        if (other.sub_bits, other.max_value) != (self.sub_bits, self.max_value):
            raise ValueError("histograms with different layouts")
        if other.count == 0:
            return
        for i, c in enumerate(other._counts):
            if c:
                self._counts[i] += c
        self._min = other._min if self.count == 0 else min(self._min, other._min)
        self._max = max(self._max, other._max)
        self.count += other.count
        self._sum += other._sum

    def percentile(self, q: float) -> int:
        """The value at percentile ``q`` (0..100): the bucket holding rank ``ceil(q% * count)``.

        The bucket's midpoint, clamped to the exact minimum and maximum recorded; 0 when empty.
        """
        if not 0 <= q <= 100:
            raise ValueError(f"percentile must be in [0, 100]; got {q}")
        if self.count == 0:
            return 0
        rank = max(1, math.ceil(q / 100 * self.count))
        seen = 0
        for i, c in enumerate(self._counts):
            seen += c
            if seen >= rank:
                low, high = self._bounds(i)
                return min(max((low + high) // 2, self._min), self._max)
        return self._max  # pragma: no cover - the counts add up to self.count

    @property
    def min(self) -> int:
        """The smallest value recorded (0 when empty)."""
        return self._min

    @property
    def max(self) -> int:
        """The largest value recorded (0 when empty)."""
        return self._max

    @property
    def mean(self) -> float:
        """The mean of the values recorded (0.0 when empty)."""
        return self._sum / self.count if self.count else 0.0


# -- rate limiter ----------------------------------------------------------------------------------
class TokenBucket:
    """A token bucket of ``rate`` tokens per second holding at most ``burst`` tokens.

    :meth:`reserve` takes tokens at once, going into debt if needed, and says how long the
    caller must wait before acting: concurrent callers each wait their own share, so the
    aggregate rate is ``rate`` (after an initial ``burst``) whatever the number of callers. The
    clock is the caller's (seconds, non-decreasing), so the bucket is pure and testable.
    """

    __slots__ = ("_last", "_tokens", "burst", "rate")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if rate <= 0 or burst <= 0:
            raise ValueError("rate and burst must be positive")
        self.rate = rate
        self.burst = burst
        self._tokens = burst
        self._last = now

    def reserve(self, n: int, now: float) -> float:
        """Take ``n`` tokens; the seconds to wait (≥ 0) before using them."""
        if now > self._last:
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
            self._last = now
        self._tokens -= n
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate


# -- sequence tracking -----------------------------------------------------------------------------
class _Bits:
    """A growable bitset on a bytearray."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data = bytearray()

    def grow(self, nbits: int) -> None:
        need = (nbits + 7) >> 3
        if need > len(self._data):
            self._data.extend(bytes(max(need - len(self._data), 4096)))

    def test(self, i: int) -> bool:
        """Whether bit ``i`` (within the grown size) is set."""
        return bool(self._data[i >> 3] & (1 << (i & 7)))

    def test_and_set(self, i: int) -> bool:
        """Set bit ``i`` (within the grown size); whether it was already set."""
        byte, mask = i >> 3, 1 << (i & 7)
        was = bool(self._data[byte] & mask)
        self._data[byte] |= mask
        return was


class SeqTracker:
    """Which messages of a run were allocated, confirmed and received, per producer.

    Sequence numbers are allocated per producer from 0, contiguously; a message is *settled*
    once it is both confirmed and received. ``missing`` (confirmed, never received) is only
    meaningful after a drain. Costs two bits per allocated sequence number.
    """

    __slots__ = (
        "_allocated",
        "_confirmed",
        "_received",
        "confirmed",
        "duplicates",
        "received",
        "settled",
    )

    def __init__(self, producers: int) -> None:
        self._allocated = [0] * producers
        self._confirmed = [_Bits() for _ in range(producers)]
        self._received = [_Bits() for _ in range(producers)]
        self.confirmed = 0
        """Distinct messages confirmed."""
        self.received = 0
        """Distinct messages received."""
        self.duplicates = 0
        """Deliveries of a message already received in this run."""
        self.settled = 0
        """Distinct messages both confirmed and received."""

    def allocate(self, producer: int, n: int) -> int:
        """Reserve ``n`` sequence numbers for ``producer``; the first of them."""
        first = self._allocated[producer]
        if first + n > MAX_SEQ + 1:
            raise ValueError("sequence numbers exhausted")
        self._allocated[producer] = first + n
        self._confirmed[producer].grow(first + n)
        self._received[producer].grow(first + n)
        return first

    def confirm(self, producer: int, first: int, n: int) -> None:
        """Messages ``first .. first+n-1`` of ``producer`` were confirmed (each counted once)."""
        conf, recv = self._confirmed[producer], self._received[producer]
        for seq in range(first, first + n):
            if not conf.test_and_set(seq):
                self.confirmed += 1
                if recv.test(seq):
                    self.settled += 1

    def deliver(self, producer: int, seq: int) -> bool | None:
        """A delivery of ``(producer, seq)``: True the first time, False for a duplicate, None
        when this run never allocated that number (not ours)."""
        if not 0 <= producer < len(self._allocated) or not 0 <= seq < self._allocated[producer]:
            return None
        if self._received[producer].test_and_set(seq):
            self.duplicates += 1
            return False
        self.received += 1
        if self._confirmed[producer].test(seq):
            self.settled += 1
        return True

    @property
    def missing(self) -> int:
        """Confirmed but not (yet) received."""
        return self.confirmed - self.settled

    @property
    def unconfirmed_received(self) -> int:
        """Received but never confirmed (e.g. committed although the send timed out)."""
        return self.received - self.settled


# -- configuration and results ---------------------------------------------------------------------
MAX_SEND_BATCH: Final = 100
MAX_RECV_BATCH: Final = 100
MAX_REQUEST_BYTES: Final = 12 * 1024 * 1024
DEFAULT_MAX_MESSAGE_SIZE: Final = 262_144
MAX_MESSAGE_SIZE: Final = 1_048_576
PERCENTILES: Final = (50.0, 90.0, 99.0, 99.9)
_LEFT_KEYS: Final = ("visible", "in_flight", "delayed")


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
    return ", ".join(f"{k.replace('_', ' ')} {left.get(k, 0):,}" for k in _LEFT_KEYS)


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
    rate = f"{c.rate:,.0f} msgs/s" if c.rate else "max"
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
        ("consumers", f"{c.consumers} x {c.recv_window} receive loops, batch {c.recv_batch}"),
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
        "ok": r.ok,
    }


# -- the run (I/O) ---------------------------------------------------------------------------------
_RETRIABLE_STATUS: Final = frozenset({429, 503})
_MAX_ATTEMPTS: Final = 5
_MAX_RETRY_SLEEP: Final = 5.0
_MAX_ERROR_CODES: Final = 64
_RECV_WAIT_SECONDS: Final = 1
RECV_VISIBILITY_TIMEOUT: Final = 15
"""Seconds a received message stays leased (the bench acks at once; this bounds how long a
lease lost in transit hides its messages from the drain)."""
_CONSUMER_STOP_GRACE: Final = 10.0
_DRAIN_IDLE: Final = 3.0
"""Seconds without a delivery (and with empty receives) after which a drain ends as full."""


class BenchError(Exception):
    """The run could not start (bad settings, the queue could not be created)."""


class _Run:
    """One benchmark run's shared state; the tasks it starts all end before :meth:`run` does."""

    def __init__(
        self,
        cfg: BenchConfig,
        session: aiohttp.ClientSession,
        queue: str,
        progress: IO[str] | None,
    ) -> None:
        import orjson

        self._dumps: Callable[[Any], bytes] = orjson.dumps
        self._loads: Callable[[bytes], Any] = orjson.loads
        self.cfg = cfg
        self.session = session
        self.queue = queue
        self.progress_out = progress
        self.tag = new_run_tag()
        self.tracker = SeqTracker(cfg.producers)
        self.confirm_hist = LatencyHistogram()
        self.e2e_hist = LatencyHistogram()
        self.t0 = time.monotonic()
        self.bucket = (
            TokenBucket(cfg.rate, max(cfg.batch, cfg.rate / 20), self.t0) if cfg.rate else None
        )
        self.budget = cfg.messages if cfg.messages else None
        self.sent = 0
        self.failed = 0
        self.resent = 0
        self.deliveries = 0
        self.acked = 0
        self.foreign = 0
        self.errors: dict[str, int] = {}
        self.phase = "run"
        self.last_confirm = self.t0
        self.last_ack = self.t0
        self.stop_producing = asyncio.Event()
        self.stop_consuming = asyncio.Event()
        self.settled_event = asyncio.Event()
        self.last_delivery = self.t0
        self.empty_since_delivery = 0
        self.queue_left: Mapping[str, Any] | None = None
        """The queue's stats when the drain found it empty or gave up."""
        self.producing = cfg.producers > 0
        self.interrupted = False

    # ---- bookkeeping
    def now(self) -> float:
        return time.monotonic() - self.t0

    def error(self, code: str) -> None:
        if code not in self.errors and len(self.errors) >= _MAX_ERROR_CODES:
            code = "other"
        self.errors[code] = self.errors.get(code, 0) + 1

    def total_errors(self) -> int:
        return sum(self.errors.values())

    def _check_settled(self) -> None:
        if not self.producing and self.tracker.missing == 0:
            self.settled_event.set()

    def url(self, i: int) -> str:
        return self.cfg.urls[i % len(self.cfg.urls)].rstrip("/")

    # ---- HTTP
    async def _post(self, url: str, body: Any, timeout: float) -> tuple[int, Any, float | None]:
        """POST JSON; (status, parsed body or None, Retry-After seconds or None).

        Transport failures are ``(0, <error code>, None)``."""
        import aiohttp

        try:
            async with self.session.post(
                url,
                data=self._dumps(body),
                headers={"Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                raw = await resp.read()
                retry_after: float | None = None
                ra = resp.headers.get("Retry-After")
                if ra is not None:
                    with contextlib.suppress(ValueError):
                        retry_after = max(0.0, float(ra))
                try:
                    payload = self._loads(raw) if raw else None
                except ValueError:
                    payload = None
                return resp.status, payload, retry_after
        except TimeoutError:
            return 0, "timeout", None
        except aiohttp.ClientError as e:
            return 0, type(e).__name__, None

    @staticmethod
    def _code(status: int, payload: Any) -> str:
        if status == 0:
            return str(payload)
        if isinstance(payload, dict):
            err = payload.get("error")
            if isinstance(err, dict) and isinstance(err.get("code"), str):
                return f"{status} {err['code']}"
        return f"HTTP {status}"

    # ---- producers
    def _claim(self) -> int:
        """Messages for the next request: ``batch``, or what is left of ``messages``."""
        n = self.cfg.batch
        if self.budget is not None:
            n = min(n, self.budget)
            self.budget -= n
        return n

    async def _send_loop(self, producer: int, url: str) -> None:
        """One in-flight slot of ``producer``: send, await the answer, repeat until stopped."""
        cfg = self.cfg
        path = f"{url}/v1/queues/{self.queue}/messages"
        while not self.stop_producing.is_set():
            n = self._claim()
            if n == 0:
                return
            if self.bucket is not None:
                delay = self.bucket.reserve(n, time.monotonic())
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stop_producing.wait(), delay)
                    if self.stop_producing.is_set():
                        return
            first = self.tracker.allocate(producer, n)
            start = time.monotonic()
            sent_us = int((start - self.t0) * 1e6)
            msgs = [
                {"body": encode_body(Stamp(self.tag, producer, seq, sent_us), cfg.size)}
                for seq in range(first, first + n)
            ]
            self.sent += n
            body = {"messages": msgs}
            for attempt in range(_MAX_ATTEMPTS):
                status, payload, retry_after = await self._post(path, body, cfg.request_timeout)
                if status == 200:
                    end = time.monotonic()
                    self.confirm_hist.record(int((end - start) * 1e6), n)
                    self.tracker.confirm(producer, first, n)
                    self.last_confirm = end
                    self._check_settled()
                    break
                code = self._code(status, payload)
                self.error(code)
                # OutcomeUnknown: the send may be stored already; resending could duplicate it.
                retriable = (
                    status in _RETRIABLE_STATUS and not code.endswith("OutcomeUnknown")
                ) or (status == 0 and payload not in ("timeout",))
                # No retries once production has stopped: the run must end near its deadline.
                if not retriable or attempt == _MAX_ATTEMPTS - 1 or self.stop_producing.is_set():
                    self.failed += n
                    break
                self.resent += n
                await asyncio.sleep(min(retry_after or 0.1 * 2**attempt, _MAX_RETRY_SLEEP))

    # ---- consumers
    async def _recv_loop(self, url: str) -> None:
        cfg = self.cfg
        recv_path = f"{url}/v1/queues/{self.queue}/messages/receive"
        ack_path = f"{url}/v1/queues/{self.queue}/messages/ack"
        req = {
            "max_messages": cfg.recv_batch,
            "wait_seconds": _RECV_WAIT_SECONDS,
            "visibility_timeout": RECV_VISIBILITY_TIMEOUT,
        }
        while not self.stop_consuming.is_set():
            status, payload, retry_after = await self._post(
                recv_path, req, cfg.request_timeout + _RECV_WAIT_SECONDS
            )
            if status != 200 or not isinstance(payload, dict):
                self.error(self._code(status, payload))
                await asyncio.sleep(min(retry_after or 0.2, _MAX_RETRY_SLEEP))
                continue
            got = payload.get("messages") or []
            if not got:
                self.empty_since_delivery += 1
                continue
            self.last_delivery = time.monotonic()
            self.empty_since_delivery = 0
            now_us = int((self.last_delivery - self.t0) * 1e6)
            receipts = []
            for m in got:
                self.deliveries += 1
                receipts.append(m["receipt"])
                stamp = decode_body(m["body"]) if isinstance(m.get("body"), str) else None
                first = (
                    self.tracker.deliver(stamp.producer, stamp.seq)
                    if stamp is not None and stamp.tag == self.tag
                    else None
                )
                if first is None:
                    self.foreign += 1
                    continue
                if first and stamp is not None:
                    self.e2e_hist.record(now_us - stamp.sent_us)
            await self._ack(ack_path, receipts)
            self._check_settled()

    async def _ack(self, path: str, receipts: list[str]) -> None:
        for attempt in range(_MAX_ATTEMPTS):
            status, payload, retry_after = await self._post(
                path, {"receipts": receipts}, self.cfg.request_timeout
            )
            if status == 200 and isinstance(payload, dict):
                for res in payload.get("results") or []:
                    if res.get("ok"):
                        self.acked += 1
                    else:
                        self.error(f"ack {res.get('error', 'failed')}")
                self.last_ack = time.monotonic()
                return
            self.error(self._code(status, payload))
            if status not in _RETRIABLE_STATUS or attempt == _MAX_ATTEMPTS - 1:
                return  # the leases expire and the messages come back: duplicates, counted
            await asyncio.sleep(min(retry_after or 0.1 * 2**attempt, _MAX_RETRY_SLEEP))

    # ---- progress
    def sample(self) -> ProgressSample:
        return ProgressSample(
            at=self.now(),
            sent=self.sent,
            confirmed=self.tracker.confirmed,
            consumed=self.deliveries,
            errors=self.total_errors(),
            phase=self.phase,
        )

    async def _progress(self) -> None:
        out = self.progress_out
        if out is None:
            return
        tty = out.isatty()
        prev = self.sample()
        try:
            while True:
                await asyncio.sleep(1.0)
                cur = self.sample()
                line = format_progress(prev, cur)
                out.write(("\r" + line) if tty else (line + "\n"))
                out.flush()
                prev = cur
        finally:
            if tty:
                out.write("\n")
                out.flush()

    # ---- the whole run
    def _interrupt(self) -> None:
        """Ctrl-C: the first stops producing (then drain), the second stops the drain."""
        if not self.stop_producing.is_set():
            self.stop_producing.set()
        else:
            self.interrupted = True
            self.settled_event.set()

    async def _queue_stats(self) -> Mapping[str, Any] | None:
        """The queue's ``stats`` (visible, in_flight, delayed, ...), or None on any failure."""
        import aiohttp

        try:
            async with self.session.get(
                f"{self.url(0)}/v1/queues/{self.queue}",
                timeout=aiohttp.ClientTimeout(total=self.cfg.request_timeout),
            ) as resp:
                if resp.status != 200:
                    self.error(f"stats HTTP {resp.status}")
                    return None
                stats = self._loads(await resp.read()).get("stats")
                return stats if isinstance(stats, dict) else None
        except (TimeoutError, aiohttp.ClientError, ValueError, AttributeError) as e:
            self.error(f"stats {type(e).__name__}")
            return None

    async def _drain(self) -> str:
        """Wait until every confirmed message was received (``complete``), the queue is empty
        (``empty``: no delivery for :data:`_DRAIN_IDLE` seconds and stats showing nothing
        visible, delayed or leased), the drain timeout (``timeout``), or a second Ctrl-C
        (``interrupted``). Leased messages keep the drain waiting: a lease lost in transit
        returns its messages after the visibility timeout."""
        start = time.monotonic()
        self._check_settled()
        next_stats = 0.0
        while not self.settled_event.is_set():
            now = time.monotonic()
            if now - start >= self.cfg.drain_timeout:
                self.queue_left = await self._queue_stats()
                return "timeout"
            idle = now - max(self.last_delivery, start) >= _DRAIN_IDLE
            if idle and self.empty_since_delivery and now >= next_stats:
                next_stats = now + 1.0
                stats = await self._queue_stats()
                if stats is not None and not any(
                    stats.get(k) for k in ("visible", "in_flight", "delayed")
                ):
                    self.queue_left = stats
                    return "empty"
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.settled_event.wait(), 0.1)
        return "interrupted" if self.interrupted else "complete"

    async def run(self) -> tuple[float, float, float, str]:
        """Produce, then drain; (produce s, consume s, drain s, drain result).

        Every task started here has ended (or was cancelled and awaited) when this returns."""
        cfg = self.cfg
        drain_seconds = 0.0
        drain_result = "skipped"
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, self._interrupt)
        try:
            async with asyncio.TaskGroup() as tg:
                progress = tg.create_task(self._progress())
                consumers = [
                    tg.create_task(self._recv_loop(self.url(c)))
                    for c in range(cfg.consumers)
                    for _ in range(cfg.recv_window)
                ]
                producers = [
                    tg.create_task(self._send_loop(p, self.url(p)))
                    for p in range(cfg.producers)
                    for _ in range(cfg.window)
                ]
                stop_wait = tg.create_task(self.stop_producing.wait())
                # Production ends at the deadline, on Ctrl-C, or when a slot finds ``messages``
                # used up (every message is then claimed); the slots finish their requests in
                # flight.
                await asyncio.wait(
                    [*producers, stop_wait],
                    timeout=cfg.seconds,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                self.stop_producing.set()
                await asyncio.gather(*producers, stop_wait)
                produced_at = self.now()
                self.producing = False
                if consumers and cfg.drain and cfg.producers:
                    self.phase = "drain"
                    drain_result = await self._drain()
                    drain_seconds = self.now() - produced_at
                self.stop_consuming.set()
                # Each loop ends after its current long poll and ack; one stuck past the grace
                # period is cancelled (its messages come back after their visibility timeout).
                if consumers:
                    _, stuck = await asyncio.wait(consumers, timeout=_CONSUMER_STOP_GRACE)
                    for t in stuck:
                        t.cancel()
                progress.cancel()
        finally:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGINT)
        produce_s = (self.last_confirm - self.t0) if self.tracker.confirmed else produced_at
        consume_s = self.last_ack - self.t0
        return produce_s, consume_s, drain_seconds, drain_result


async def run_bench(cfg: BenchConfig, progress: IO[str] | None = sys.stderr) -> BenchReport:
    """Run the benchmark described by ``cfg`` against a live cluster; the report.

    Creates the queue (``bench-<tag>`` unless ``cfg.queue``; an existing queue is used as it
    is) and deletes it at the end when this run created it, unless ``keep_queue``. Raises
    :class:`BenchError` when the queue cannot be created; every other failure is counted in
    the report's ``errors``.
    """
    import aiohttp

    cfg.validate()
    name = cfg.queue or f"bench-{new_run_tag()}"
    base = cfg.urls[0].rstrip("/")
    attributes: dict[str, Any] = {}
    if cfg.size > DEFAULT_MAX_MESSAGE_SIZE:
        attributes["max_message_size"] = cfg.size
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        try:
            async with session.put(
                f"{base}/v1/queues/{name}",
                json={"attributes": attributes},
                timeout=aiohttp.ClientTimeout(total=cfg.request_timeout),
            ) as r:
                status = r.status
                text = await r.text()
        except (TimeoutError, aiohttp.ClientError) as e:
            raise BenchError(
                f"cannot create queue {name} at {base}: {e or type(e).__name__}"
            ) from e
        if status not in (200, 201, 409):  # 409: it exists with other attributes: use it
            raise BenchError(f"cannot create queue {name}: HTTP {status} {text[:300]}")
        created = status == 201
        run = _Run(cfg, session, name, progress)
        produce_s, consume_s, drain_s, drain_result = await run.run()
        deleted = False
        if created and not cfg.keep_queue:
            try:
                async with session.delete(
                    f"{base}/v1/queues/{name}",
                    timeout=aiohttp.ClientTimeout(total=cfg.request_timeout),
                ) as r:
                    deleted = r.status == 200
                    if not deleted:
                        run.error(f"delete queue HTTP {r.status}")
            except (TimeoutError, aiohttp.ClientError) as e:
                run.error(f"delete queue {type(e).__name__}")
    t = run.tracker
    checked = cfg.drain and cfg.consumers > 0 and cfg.producers > 0
    return BenchReport(
        queue=name,
        created_queue=created,
        deleted_queue=deleted,
        config=cfg,
        produce_seconds=produce_s,
        consume_seconds=consume_s,
        drain_seconds=drain_s,
        sent=run.sent,
        confirmed=t.confirmed,
        failed=run.failed,
        resent=run.resent,
        received=t.received,
        deliveries=run.deliveries,
        acked=run.acked,
        duplicates=t.duplicates,
        missing=t.missing if checked else None,
        drain_result=drain_result,
        left_in_queue=(
            {k: int(run.queue_left.get(k) or 0) for k in _LEFT_KEYS}
            if run.queue_left is not None
            else None
        ),
        unconfirmed_received=t.unconfirmed_received,
        foreign=run.foreign,
        errors=dict(run.errors),
        confirm_latency=LatencySummary.of(run.confirm_hist),
        e2e_latency=LatencySummary.of(run.e2e_hist),
    )


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    """The :class:`BenchConfig` for the ``cmq bench`` flags (see ``cmq/cli.py``)."""
    urls = tuple(u.strip() for u in str(args.url).split(",") if u.strip())
    seconds = args.seconds
    if seconds is None and not args.messages:
        seconds = 20.0
    return BenchConfig(
        urls=urls,
        queue=args.queue,
        producers=args.producers,
        consumers=args.consumers,
        size=args.size,
        window=args.window,
        batch=args.batch,
        recv_batch=args.recv_batch,
        recv_window=args.recv_window,
        rate=args.rate,
        messages=args.messages,
        seconds=seconds,
        drain=not args.no_drain,
        drain_timeout=args.drain_timeout,
        keep_queue=args.keep_queue,
    )


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - non-Linux
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def main_from_args(args: argparse.Namespace) -> int:
    """``cmq bench``: run, print the report (text or ``--json``) on stdout; the exit status.

    0 when something was confirmed and, after a drain, nothing confirmed is missing; 1
    otherwise; 2 for bad settings or a queue that cannot be created.
    """
    import orjson

    try:
        cfg = config_from_args(args)
        cfg.validate()
    except ValueError as e:
        print(f"cmq bench: {e}", file=sys.stderr)
        return 2
    loop = _new_event_loop()
    try:
        report = loop.run_until_complete(run_bench(cfg))
    except BenchError as e:
        print(f"cmq bench: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ncmq bench: interrupted", file=sys.stderr)
        return 130
    finally:
        loop.close()
    if args.json:
        sys.stdout.write(orjson.dumps(report_to_json(report), option=orjson.OPT_INDENT_2).decode())
        sys.stdout.write("\n")
    else:
        print(format_report(report))
    sys.stdout.flush()
    return 0 if report.ok else 1


__all__ = [
    "HEADER_LEN",
    "BenchConfig",
    "BenchError",
    "BenchReport",
    "LatencyHistogram",
    "LatencySummary",
    "ProgressSample",
    "SeqTracker",
    "Stamp",
    "TokenBucket",
    "config_from_args",
    "decode_body",
    "encode_body",
    "format_progress",
    "format_report",
    "main_from_args",
    "new_run_tag",
    "report_to_json",
    "run_bench",
]
