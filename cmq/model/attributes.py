"""A queue's attributes (`QueueAttributes`) and its retry back-off (`RetryPolicy`): their
bounds (`cmq.model.limits.LIMITS`), their checks and their dict form. Pure.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from cmq.errors import (
    InvalidParameter,
)
from cmq.model.limits import LIMITS, check_queue_name, is_fifo_name

MAX_RETRY_SECONDS = 43_200
"""A retry back-off's initial and maximum delay are at most 12 hours (SQS's longest lease)."""
MAX_RETRY_MULTIPLIER = 10.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """A queue's retry back-off: a message whose lease expires, or that is nacked, becomes
    visible again only after ``delay_ms(receive count)``: ``initial_seconds`` after its first
    receive, times ``multiplier`` after each further one, at most ``max_seconds``.

    ``multiplier`` has at most two decimals (it is kept as hundredths, so every replica computes
    the same delays with integer arithmetic)."""

    initial_seconds: int
    multiplier: float = 2.0
    max_seconds: int = 300

    @property
    def multiplier_pct(self) -> int:
        """The multiplier in hundredths (what the machine computes with and stores)."""
        return round(self.multiplier * 100)

    def delay_ms(self, receive_count: int) -> int:
        """The back-off after the ``receive_count``-th receive (1: the first), in ms."""
        cap = self.max_seconds * 1000
        delay = self.initial_seconds * 1000
        pct = self.multiplier_pct
        for _ in range(max(0, receive_count - 1)):
            if delay >= cap or pct == 100:
                break
            delay = delay * pct // 100
        return min(delay, cap)

    @staticmethod
    def from_dict(data: object) -> RetryPolicy:
        """A checked policy from its JSON object (`InvalidParameter` naming the field)."""
        if not isinstance(data, dict):
            raise InvalidParameter(
                "attribute retry must be an object {initial_seconds, multiplier, max_seconds} "
                "or null"
            )
        unknown = set(data) - {"initial_seconds", "multiplier", "max_seconds"}
        if unknown:
            raise InvalidParameter(f"unknown retry field {sorted(unknown)[0]!r}")
        if "initial_seconds" not in data:
            raise InvalidParameter("retry.initial_seconds is required")
        values: dict[str, Any] = {}
        for key in ("initial_seconds", "max_seconds"):
            if key in data:
                v = data[key]
                if isinstance(v, bool) or not isinstance(v, int):
                    raise InvalidParameter(f"retry.{key} must be an integer")
                if not 1 <= v <= MAX_RETRY_SECONDS:
                    raise InvalidParameter(
                        f"retry.{key} must be in [1, {MAX_RETRY_SECONDS}]; got {v}"
                    )
                values[key] = v
        if "multiplier" in data:
            m = data["multiplier"]
            if isinstance(m, bool) or not isinstance(m, int | float):
                raise InvalidParameter("retry.multiplier must be a number")
            if not 1 <= m <= MAX_RETRY_MULTIPLIER or abs(m * 100 - round(m * 100)) > 1e-6:
                raise InvalidParameter(
                    f"retry.multiplier must be in [1, {MAX_RETRY_MULTIPLIER:g}] with at most two "
                    f"decimals; got {m}"
                )
            values["multiplier"] = round(m * 100) / 100
        policy = RetryPolicy(**values)
        if policy.max_seconds < policy.initial_seconds:
            raise InvalidParameter("retry.max_seconds must be at least retry.initial_seconds")
        return policy


@dataclass(frozen=True, slots=True)
class QueueAttributes:
    """A queue's settings (SQS/CMQ names in snake_case). Defaults as in SQS.

    ``dead_letter_queue`` with ``max_receive_count > 0``: a message received that many times
    is moved to that queue instead of being delivered again. ``max_receive_count == 0`` means
    no limit.
    """

    visibility_timeout: int = 30
    delay_seconds: int = 0
    message_retention_seconds: int = 345_600
    max_message_size: int = 1_048_576
    """The largest body a send may carry, in bytes (1 KiB .. 1 MiB; SQS's default and limit
    since 2025). The default applies to queues created from now on: a queue's value is stored
    with it, so queues created with the earlier default (256 KiB) keep theirs."""
    receive_wait_seconds: int = 0
    dead_letter_queue: str | None = None
    max_receive_count: int = 0
    archive: bool = False
    """Keep released segments (every message deleted) until an archive job marks them
    archived; False: every replica deletes them once released."""
    fifo: bool = False
    """A FIFO queue (fixed at creation; its name ends in ``.fifo``): messages carry a group id,
    each group is delivered in send order with at most one receive of it in flight, and every
    send is deduplicated for 5 minutes (`DEDUP_WINDOW_MS`)."""
    content_based_deduplication: bool = False
    """FIFO only: a send without a deduplication id uses the SHA-256 of its body instead."""
    max_delay_seconds: int = 900
    """The longest delay a message sent to the queue may take (``delay_seconds`` or
    ``deliver_at``), 0 .. 7 days; at least ``delay_seconds``. Above 900 needs the
    ``long_delays`` feature flag."""
    retry: RetryPolicy | None = None
    """Retry back-off (`RetryPolicy`): an expired or nacked lease brings its message back only
    after the policy's delay for its receive count. None: at once (an expired lease) or after
    the nack's own delay. Needs the ``retry_backoff`` feature flag."""
    priorities: int = 1
    """How many priority levels a message sent to the queue may take (1 .. 32; 1: none): a
    message's ``priority`` is 0 (the lowest) .. ``priorities`` - 1, and a receive takes the
    highest level with a visible message first (strict: a sustained backlog at a higher level
    starves the lower ones). May change at any time (messages keep their level). Other than 1
    needs the ``message_priorities`` feature flag."""
    retain_acked_seconds: int = 0
    """Keep acknowledged messages for a rewind (`QueueService.rewind`) until this long after
    their send (0 .. 14 days): their segments stay until both this retention and the archive
    (with ``archive``) are done with them. 0: acknowledged messages go as they always did (a
    rewind then finds nothing). Above 0 needs the ``rewind`` feature flag."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def merged(self, changes: dict[str, Any]) -> QueueAttributes:
        """These attributes with ``changes`` applied and validated (see `from_dict`)."""
        return QueueAttributes.from_dict({**self.to_dict(), **changes})

    @staticmethod
    def from_dict(data: object) -> QueueAttributes:
        """Validated attributes from a JSON object; unknown names, wrong types and values out of
        range raise `InvalidParameter` naming the field."""
        if data is None:
            return QueueAttributes()
        attrs = replace(QueueAttributes(), **QueueAttributes.check_changes(data))
        if attrs.max_receive_count and not attrs.dead_letter_queue:
            raise InvalidParameter("max_receive_count needs dead_letter_queue")
        if attrs.delay_seconds > attrs.max_delay_seconds:
            raise InvalidParameter(
                f"delay_seconds ({attrs.delay_seconds}) exceeds max_delay_seconds "
                f"({attrs.max_delay_seconds})"
            )
        if attrs.content_based_deduplication and not attrs.fifo:
            raise InvalidParameter("content_based_deduplication is for FIFO queues only")
        dlq = attrs.dead_letter_queue
        if dlq and is_fifo_name(dlq) != attrs.fifo:
            kind = "a FIFO" if attrs.fifo else "a standard"
            raise InvalidParameter(f"the dead-letter queue of {kind} queue must be {kind} queue")
        return attrs

    @staticmethod
    def check_changes(data: object) -> dict[str, Any]:
        """``data`` checked field by field (names, types, ranges) but not across fields: what a
        partial update (PATCH / SetQueueAttributes) can validate before it knows the current
        attributes. Cross-field rules are checked by `from_dict` / `merged` on the result."""
        if not isinstance(data, dict):
            raise InvalidParameter("attributes must be an object")
        known = {f.name for f in fields(QueueAttributes)}
        for key in data:
            if key not in known:
                raise InvalidParameter(f"unknown attribute {key!r}")
        values: dict[str, Any] = {}
        for key, (lo, hi, _) in LIMITS.items():
            if key in data:
                v = data[key]
                if isinstance(v, bool) or not isinstance(v, int):
                    raise InvalidParameter(f"attribute {key} must be an integer")
                if not lo <= v <= hi:
                    raise InvalidParameter(f"attribute {key} must be in [{lo}, {hi}]; got {v}")
                values[key] = v
        for key in ("archive", "fifo", "content_based_deduplication"):
            if key in data:
                if not isinstance(data[key], bool):
                    raise InvalidParameter(f"attribute {key} must be a boolean")
                values[key] = data[key]
        if "dead_letter_queue" in data:
            dlq = data["dead_letter_queue"]
            if dlq is not None:
                check_queue_name(dlq)
            values["dead_letter_queue"] = dlq
        if "retry" in data:
            retry = data["retry"]
            if isinstance(retry, RetryPolicy) or retry is None:
                values["retry"] = retry
            else:
                values["retry"] = RetryPolicy.from_dict(retry)
        return values


__all__ = ["MAX_RETRY_MULTIPLIER", "MAX_RETRY_SECONDS", "QueueAttributes", "RetryPolicy"]
