"""Queue names, message ids and the limits of the queue's values (`LIMITS`: each queue
attribute's minimum, maximum and default; batch sizes; the dedup window), and the checks of a
name or id against them. Pure.
"""

from __future__ import annotations

import re

from cmq.errors import (
    InvalidParameter,
    InvalidQueueName,
)

QUEUE_NAME = re.compile(r"^(?=.{1,80}$)[A-Za-z0-9_-]+(\.fifo)?$")
"""Queue names: 1-80 characters, letters, digits, ``-`` and ``_``; a FIFO queue's name (and
only a FIFO queue's) ends in ``.fifo``, as in SQS."""
FIFO_SUFFIX = ".fifo"

MAX_RECEIVE_BATCH = 100
MAX_SEND_BATCH = 100
MAX_ACK_BATCH = 100
MAX_MESSAGE_ATTRIBUTES = 10
MAX_ATTRIBUTE_NAME = 256
MAX_DEDUP_ID = 128
DEDUP_WINDOW_MS = 5 * 60 * 1000
MAX_DEDUP_ENTRIES = 100_000
"""At most this many unexpired deduplication ids per queue. At the cap a FIFO queue refuses a
send that needs a new entry (`Overloaded`, nothing stored: dedup is its promise); a standard
queue forgets its oldest entries early (its dedup only absorbs the router's own retries)."""
MAX_GROUP_ID = 128
FIFO_ID = re.compile(r"^[!-~]{1,128}$")
"""A FIFO message group id or deduplication id: 1-128 printable ASCII characters (letters,
digits and punctuation, as SQS allows)."""
MAX_WAIT_SECONDS = 20
DEFAULT_SEGMENT_BYTES = 64 << 20
"""A queue's segment is sealed once it holds this many bytes (`--segment-max-bytes`)..."""
DEFAULT_SEGMENT_AGE_SECONDS = 3600
"""...or once it is this old (`--segment-max-age`); both recorded per queue at its creation."""
OUTCOMES = ("acked", "expired", "dead_lettered", "purged")
"""How a message left its queue (recorded per message, streamed with a released segment)."""


def is_fifo_name(name: str) -> bool:
    """Whether ``name`` is a FIFO queue's name (ends in ``.fifo``)."""
    return name.endswith(FIFO_SUFFIX)


def check_fifo_id(value: object, what: str) -> str:
    """``value`` if it is a valid group / deduplication id (`FIFO_ID`), else
    `InvalidParameter` naming ``what``."""
    if not isinstance(value, str) or not FIFO_ID.match(value):
        raise InvalidParameter(
            f"{what} must be 1-128 printable ASCII characters (letters, digits, punctuation)"
        )
    return value


def check_queue_name(name: object) -> str:
    """``name`` if it matches `QUEUE_NAME`, else `InvalidQueueName`."""
    if not isinstance(name, str) or not QUEUE_NAME.match(name):
        raise InvalidQueueName(f"queue names match {QUEUE_NAME.pattern}; got {name!r}")
    return name


# attribute name -> (minimum, maximum, default)
LIMITS: dict[str, tuple[int, int, int]] = {
    "visibility_timeout": (0, 43_200, 30),
    "delay_seconds": (0, 900, 0),
    "message_retention_seconds": (60, 1_209_600, 345_600),
    "max_message_size": (1024, 1_048_576, 1_048_576),
    "receive_wait_seconds": (0, MAX_WAIT_SECONDS, 0),
    "max_receive_count": (0, 1000, 0),
    "max_delay_seconds": (0, 604_800, 900),
    "priorities": (1, 32, 1),
    "retain_acked_seconds": (0, 1_209_600, 0),
}

MAX_DELAY_SECONDS = LIMITS["max_delay_seconds"][1]
"""A message's delay (``delay_seconds``, ``deliver_at``) is at most its queue's
``max_delay_seconds``, itself at most 7 days (the SQS surface keeps SQS's 15 minutes)."""
DEFAULT_MAX_DELAY_SECONDS = LIMITS["max_delay_seconds"][2]
MAX_PRIORITY = LIMITS["priorities"][1] - 1
"""A message's ``priority`` is at most its queue's ``priorities`` - 1, itself at most 31."""
MAX_RETAIN_ACKED_SECONDS = LIMITS["retain_acked_seconds"][1]
"""Acknowledged messages are kept for a rewind at most 14 days after their send."""


__all__ = [
    "DEDUP_WINDOW_MS",
    "DEFAULT_MAX_DELAY_SECONDS",
    "DEFAULT_SEGMENT_AGE_SECONDS",
    "DEFAULT_SEGMENT_BYTES",
    "FIFO_ID",
    "FIFO_SUFFIX",
    "LIMITS",
    "MAX_ACK_BATCH",
    "MAX_ATTRIBUTE_NAME",
    "MAX_DEDUP_ENTRIES",
    "MAX_DEDUP_ID",
    "MAX_DELAY_SECONDS",
    "MAX_GROUP_ID",
    "MAX_MESSAGE_ATTRIBUTES",
    "MAX_PRIORITY",
    "MAX_RECEIVE_BATCH",
    "MAX_RETAIN_ACKED_SECONDS",
    "MAX_SEND_BATCH",
    "MAX_WAIT_SECONDS",
    "OUTCOMES",
    "QUEUE_NAME",
    "check_fifo_id",
    "check_queue_name",
    "is_fifo_name",
]
