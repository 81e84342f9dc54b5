"""The pure counters of ``cmq bench``: latency histograms, the open-loop send schedule and the
sequence tracker (duplicates, missing). No I/O; clocks are the caller's.
"""

from __future__ import annotations

import math

from cmq.loadgen.body import MAX_SEQ


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


# -- open-loop schedule ----------------------------------------------------------------------------
class SendSchedule:
    r"""When each send request of a fixed-rate run is *due* (open loop).

    Request ``k`` of a run at ``rate`` msgs/s is due when the messages before it are due:
    ``start + issued / rate``. A sender :meth:`claim`\ s the next due time when it has a free
    slot, waits until then if it is early, and measures latency from the due time, not from
    when it actually sent. A cluster that falls behind therefore shows the wait in the
    latencies instead of silently lowering the offered load (no coordinated omission, as in
    wrk2 or HdrHistogram's corrected recording). :attr:`max_lag` is the worst lateness of a
    start: large when the window is too small to keep the rate. The clock is the caller's
    (seconds), so the schedule is pure and testable.
    """

    __slots__ = ("_issued", "max_lag", "rate", "start")

    def __init__(self, rate: float, start: float) -> None:
        if rate <= 0 or not math.isfinite(rate):
            raise ValueError("rate must be positive")
        self.rate = rate
        self.start = start
        self._issued = 0
        self.max_lag = 0.0

    def claim(self, n: int) -> float:
        """The due time of the next request, of ``n`` messages."""
        due = self.start + self._issued / self.rate
        self._issued += n
        return due

    def started(self, due: float, now: float) -> None:
        """Record that a request due at ``due`` started at ``now`` (for :attr:`max_lag`)."""
        self.max_lag = max(self.max_lag, now - due)


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
