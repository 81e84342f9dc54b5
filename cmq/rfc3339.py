"""RFC 3339 times as the Unix milliseconds the node works in (``deliver_at`` of a send)."""

from __future__ import annotations

from datetime import UTC, datetime

from cmq.errors import InvalidParameter

__all__ = ["epoch_ms"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_ms(when: datetime) -> int:
    """``when`` (timezone-aware) as Unix milliseconds, rounded up (never earlier);
    `InvalidParameter` for a time without a zone."""
    if when.tzinfo is None:
        raise InvalidParameter("a time needs its zone (RFC 3339: Z or +hh:mm)")
    delta = when - _EPOCH
    micros = delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds
    return (micros + 999) // 1000
