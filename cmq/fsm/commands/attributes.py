"""The byte layout of a queue's attributes (`cmq.model.QueueAttributes`), carried by the
`CreateQueue` and `SetAttributes` commands (`cmq.fsm.commands.codec`) and by the snapshot image
(`cmq.fsm.image`).

Layout, little-endian: the visibility timeout, delay, retention, largest message size and receive
wait as i64, the dead-letter queue as an optional text, the receive limit as i64, then one flags
byte (it was the archive boolean: a standard queue without later settings encodes as before) and
the fields its bits announce, in bit order: the retry policy (u32 initial seconds, u16 multiplier
percent, u32 most seconds), the longest delay (u32), the priority levels (u8), the seconds acked
messages are kept (u32).

Versions: a flag bit this release does not know is a newer release's setting: `read_attributes`
raises `NewerLayout` naming it.
"""

from __future__ import annotations

from cmq.errors import NewerLayout
from cmq.fsm.wire import Reader, Writer
from cmq.model import DEFAULT_MAX_DELAY_SECONDS, QueueAttributes, RetryPolicy

__all__ = ["read_attributes", "write_attributes"]

_ARCHIVE, _FIFO, _CONTENT_DEDUP, _RETRY, _MAX_DELAY, _PRIORITIES, _RETAIN = 1, 2, 4, 8, 16, 32, 64
_KNOWN_FLAGS = _ARCHIVE | _FIFO | _CONTENT_DEDUP | _RETRY | _MAX_DELAY | _PRIORITIES | _RETAIN
"""Bits of the attributes' flags byte."""


def write_attributes(w: Writer, a: QueueAttributes) -> None:
    """Encode ``a`` (in a `CreateQueue` or `SetAttributes` command and in the snapshot image)."""
    w.i64(a.visibility_timeout)
    w.i64(a.delay_seconds)
    w.i64(a.message_retention_seconds)
    w.i64(a.max_message_size)
    w.i64(a.receive_wait_seconds)
    w.opt_text(a.dead_letter_queue)
    w.i64(a.max_receive_count)
    # One flags byte (was the archive boolean: standard queues encode as before).
    w.u8(
        (_ARCHIVE if a.archive else 0)
        | (_FIFO if a.fifo else 0)
        | (_CONTENT_DEDUP if a.content_based_deduplication else 0)
        | (_RETRY if a.retry is not None else 0)
        | (_MAX_DELAY if a.max_delay_seconds != DEFAULT_MAX_DELAY_SECONDS else 0)
        | (_PRIORITIES if a.priorities != 1 else 0)
        | (_RETAIN if a.retain_acked_seconds else 0)
    )
    if a.retry is not None:  # flag retry_backoff: a queue without a policy encodes as before
        w.u32(a.retry.initial_seconds)
        w.u16(a.retry.multiplier_pct)
        w.u32(a.retry.max_seconds)
    if a.max_delay_seconds != DEFAULT_MAX_DELAY_SECONDS:  # flag long_delays
        w.u32(a.max_delay_seconds)
    if a.priorities != 1:  # flag message_priorities
        w.u8(a.priorities)
    if a.retain_acked_seconds:  # flag rewind
        w.u32(a.retain_acked_seconds)


def read_attributes(r: Reader) -> QueueAttributes:
    """Inverse of `write_attributes`; flag bits this release does not know raise `NewerLayout`."""
    values = (r.i64(), r.i64(), r.i64(), r.i64(), r.i64(), r.opt_text(), r.i64())
    flags = r.u8()
    if flags & ~_KNOWN_FLAGS:
        raise NewerLayout(
            f"unknown queue attribute flags {flags:#x}: from a newer release than this one, "
            f"which reads the flags {_KNOWN_FLAGS:#x}"
        )
    retry = None
    if flags & _RETRY:
        initial, pct, most = r.u32(), r.u16(), r.u32()
        retry = RetryPolicy(initial, pct / 100, most)
    max_delay = r.u32() if flags & _MAX_DELAY else DEFAULT_MAX_DELAY_SECONDS
    priorities = r.u8() if flags & _PRIORITIES else 1
    retain = r.u32() if flags & _RETAIN else 0
    return QueueAttributes(
        visibility_timeout=values[0],
        delay_seconds=values[1],
        message_retention_seconds=values[2],
        max_message_size=values[3],
        receive_wait_seconds=values[4],
        dead_letter_queue=values[5],
        max_receive_count=values[6],
        archive=bool(flags & _ARCHIVE),
        fifo=bool(flags & _FIFO),
        content_based_deduplication=bool(flags & _CONTENT_DEDUP),
        retry=retry,
        max_delay_seconds=max_delay,
        priorities=priorities,
        retain_acked_seconds=retain,
    )
