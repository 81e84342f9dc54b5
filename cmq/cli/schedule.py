"""The scheduling options of the command line (pure: parsing, no I/O): ``cmq send --delay S |
--deliver-at RFC3339, --ttl S`` and ``cmq queue create|set --max-delay S --retry
INITIAL,MULTIPLIER,MAX`` (or ``--retry off``), plus the ``--attribute NAME=VALUE`` values.

Bad input raises `InvalidParameter` before anything is sent (the command prints its code and
message in one line); the ranges themselves (a delay within the queue's ``max_delay_seconds``,
a time to live within its retention) are the server's to check, as for any client.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from cmq.errors import InvalidParameter
from cmq.model import RetryPolicy
from cmq.stream import RFC3339

if TYPE_CHECKING:
    from cmq.client import Message

OFF = ("off", "none", "null")
"""``--retry`` values that remove the queue's back-off policy."""


def add_send_schedule_arguments(p: argparse.ArgumentParser) -> None:
    """``--delay``, ``--deliver-at`` (not both) and ``--ttl`` of ``cmq send``."""
    when = p.add_mutually_exclusive_group()
    when.add_argument(
        "--delay", type=int, metavar="S", help="deliver no earlier than S seconds from now"
    )
    when.add_argument(
        "--deliver-at",
        metavar="RFC3339",
        help="deliver no earlier than this time, with its zone (e.g. 2026-12-01T09:00:00Z)",
    )
    p.add_argument(
        "--ttl", type=int, metavar="S", help="time to live: never delivered S seconds after send"
    )


def add_queue_schedule_arguments(p: argparse.ArgumentParser) -> None:
    """``--max-delay`` and ``--retry`` of ``cmq queue create|set``."""
    p.add_argument(
        "--max-delay",
        type=int,
        metavar="S",
        help="max_delay_seconds: the longest delay or deliver_at a send may ask (up to 604800)",
    )
    p.add_argument(
        "--retry",
        metavar="INITIAL,MULTIPLIER,MAX",
        help="retry back-off after an expired lease or a nack (seconds, factor, seconds), "
        "e.g. 5,2,300; 'off' removes it",
    )


def parse_deliver_at(text: str) -> datetime:
    """An RFC 3339 time with its zone (`InvalidParameter` otherwise)."""
    if not re.match(RFC3339, text):
        raise InvalidParameter(
            f"--deliver-at must be an RFC 3339 time with a zone (e.g. 2026-12-01T09:00:00Z); "
            f"got {text!r}"
        )
    return datetime.fromisoformat(text.replace("z", "Z").replace(" ", "T").replace("t", "T"))


def parse_retry(text: str) -> dict[str, Any] | None:
    """``INITIAL,MULTIPLIER,MAX`` as the ``retry`` attribute (checked as the server checks
    it: `InvalidParameter`), or None for ``off``."""
    if text.strip().lower() in OFF:
        return None
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 3:
        raise InvalidParameter(
            f"--retry takes INITIAL,MULTIPLIER,MAX (e.g. 5,2,300) or 'off'; got {text!r}"
        )
    try:
        initial, most = int(parts[0]), int(parts[2])
        multiplier = float(parts[1])
    except ValueError:
        raise InvalidParameter(
            f"--retry takes whole seconds and a number: INITIAL,MULTIPLIER,MAX; got {text!r}"
        ) from None
    policy = RetryPolicy.from_dict(
        {"initial_seconds": initial, "multiplier": multiplier, "max_seconds": most}
    )
    return {
        "initial_seconds": policy.initial_seconds,
        "multiplier": policy.multiplier,
        "max_seconds": policy.max_seconds,
    }


def attribute_value(name: str, text: str) -> Any:
    """An ``--attribute NAME=VALUE`` value: an integer, true/false, null, or else the text
    (``dead_letter_queue`` is always text: a queue may be named ``123``)."""
    if name == "dead_letter_queue":
        return None if text.lower() in OFF else text
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in OFF:
        return None
    try:
        return int(text)
    except ValueError:
        return text


def queue_attributes(
    pairs: Sequence[str], max_delay: int | None, retry: str | None
) -> dict[str, Any]:
    """The attributes ``--attribute`` pairs, ``--max-delay`` and ``--retry`` name."""
    out: dict[str, Any] = {}
    for kv in pairs:
        k, eq, v = kv.partition("=")
        if not eq or not k:
            raise InvalidParameter(f"--attribute takes NAME=VALUE; got {kv!r}")
        out[k] = attribute_value(k, v)
    if max_delay is not None:
        out["max_delay_seconds"] = max_delay
    if retry is not None:
        out["retry"] = parse_retry(retry)
    return out


def outgoing(
    bodies: Sequence[str],
    *,
    delay: int | None = None,
    deliver_at: str | None = None,
    ttl: int | None = None,
    priority: int = 0,
) -> list[str | Message]:
    """The messages of ``cmq send``: plain bodies, or `Message`\\ s with the options."""
    from cmq.client import Message

    if delay is None and deliver_at is None and ttl is None and not priority:
        return list(bodies)
    if delay is not None and deliver_at is not None:
        raise InvalidParameter("give --delay or --deliver-at, not both")
    if delay is not None and delay < 0:
        raise InvalidParameter(f"--delay must not be negative; got {delay}")
    if ttl is not None and ttl < 1:
        raise InvalidParameter(f"--ttl must be at least 1 second; got {ttl}")
    at = None if deliver_at is None else parse_deliver_at(deliver_at)
    return [
        Message(b, delay_seconds=delay, deliver_at=at, ttl_seconds=ttl, priority=priority)
        for b in bodies
    ]
