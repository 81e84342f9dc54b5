"""Values shared by the state machine, the node service and the API: queue attributes with their
limits, what a client sends and receives, and a queue's statistics. Pure: no I/O, no clocks.
The values of the archive's calls are `cmq.segment_values`, those of backups'
`cmq.export_values`.

Times inside the queue are integer milliseconds since the Unix epoch, always stamped by the
proposer (the leader) and carried in commands, never read during apply.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from cmq.errors import (
    CmqError,
    InvalidParameter,
    InvalidQueueName,
    MessageTooLarge,
    MissingParameter,
    error_for,
)
from cmq.tracecontext import trace_refusal

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


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One message a producer sends. ``delay_seconds`` None: the queue's default."""

    body: bytes
    binary: bool = False
    """Whether the client sent ``body_base64`` (it is returned the same way)."""
    delay_seconds: int | None = None
    attributes: tuple[tuple[str, str], ...] = ()
    dedup_id: str | None = None
    group_id: str | None = None
    """The message group (FIFO queues: required; standard queues: refused)."""
    deliver_at_ms: int | None = None
    """Deliver no earlier than this (Unix ms; instead of ``delay_seconds``): the node that takes
    the send turns it into a delay from its clock (in the past: none)."""
    ttl_seconds: int | None = None
    """Time to live (1 .. the queue's retention): never delivered once this long has passed
    since the send (decided by the queue's state machine); it then counts as expired."""
    ttl_deadline_ms: int | None = None
    """A time to live given as its deadline (Unix ms; instead of ``ttl_seconds``): what a
    moved message keeps (`cmq.redrive`). The node that takes the send turns it into a time to
    live from its clock, as it does ``deliver_at_ms``; a deadline already passed leaves 1 ms
    (the message expires at once, unseen)."""
    priority: int = 0
    """Priority level: 0 (the lowest, the default) .. the queue's ``priorities`` - 1."""


def check_send_rules(queue: str, messages: list[OutgoingMessage]) -> None:
    """The FIFO rules a send can be checked against before it is proposed, from the queue's
    name alone (the committed attributes decide again in apply): on a FIFO queue every
    message needs a group id (`MissingParameter`) and takes no delay of its own; a standard
    queue's group id names the message's tenant (fair queues) and needs priority 0; ids are
    `FIFO_ID`s; a reserved trace attribute is valid W3C trace context
    (`cmq.tracecontext.trace_refusal`). Raises the first message's refusal."""
    for m in messages:
        refusal = _rule_refusal(queue, m)
        if refusal is not None:
            raise refusal


def _rule_refusal(queue: str, m: OutgoingMessage) -> CmqError | None:
    """`check_send_rules` for one message."""
    if not 0 <= m.priority <= MAX_PRIORITY:
        return InvalidParameter(f"priority must be in [0, {MAX_PRIORITY}]; got {m.priority}")
    if m.attributes and (refused := trace_refusal(m.attributes)) is not None:
        return refused
    fifo = is_fifo_name(queue)
    try:
        if m.group_id is None:
            if fifo:
                return MissingParameter("a FIFO queue's messages need a group_id (MessageGroupId)")
        else:  # a standard queue's: its tenant (fair queues)
            check_fifo_id(m.group_id, "group_id (MessageGroupId)")
            if not fifo and m.priority:
                return InvalidParameter(
                    "a standard queue's message with a group_id (a fair-queue tenant) takes "
                    "priority 0: priorities and tenants do not combine"
                )
        if fifo and m.dedup_id is not None:
            check_fifo_id(m.dedup_id, "dedup_id (MessageDeduplicationId)")
    except InvalidParameter as e:
        return e
    if fifo and (m.delay_seconds is not None or m.deliver_at_ms is not None):
        return InvalidParameter(
            "a FIFO queue takes no per-message delay (DelaySeconds); set the queue's"
        )
    if m.delay_seconds is not None and m.deliver_at_ms is not None:
        return InvalidParameter("give delay_seconds or deliver_at, not both")
    if m.ttl_seconds is not None and m.ttl_deadline_ms is not None:
        return InvalidParameter("give ttl_seconds or a ttl deadline, not both")
    if m.delay_seconds is not None and not 0 <= m.delay_seconds <= MAX_DELAY_SECONDS:
        return InvalidParameter(
            f"delay_seconds must be in [0, {MAX_DELAY_SECONDS}]; got {m.delay_seconds}"
        )
    return None


def delay_refusal(
    m: OutgoingMessage, attributes: QueueAttributes, now_ms: int
) -> InvalidParameter | None:
    """`InvalidParameter` if ``m``'s delay (``delay_seconds``, or ``deliver_at_ms`` from
    ``now_ms``) is longer than the queue's ``max_delay_seconds``, its ``ttl_seconds`` is
    outside 1 .. the queue's retention, or its ``priority`` is not below the queue's
    ``priorities``."""
    levels = attributes.priorities
    if not 0 <= m.priority < levels:
        return InvalidParameter(
            f"priority must be in [0, {levels - 1}] (the queue's priorities is {levels}); "
            f"got {m.priority}"
        )
    retention = attributes.message_retention_seconds
    if m.ttl_seconds is not None and not 1 <= m.ttl_seconds <= retention:
        return InvalidParameter(
            f"ttl_seconds must be in [1, the queue's message_retention_seconds ({retention})]; "
            f"got {m.ttl_seconds}"
        )
    limit = attributes.max_delay_seconds
    if m.delay_seconds is not None and m.delay_seconds > limit:
        return InvalidParameter(
            f"delay_seconds {m.delay_seconds} exceeds the queue's max_delay_seconds ({limit})"
        )
    if m.deliver_at_ms is not None and m.deliver_at_ms - now_ms > limit * 1000:
        return InvalidParameter(
            f"deliver_at is {(m.deliver_at_ms - now_ms) / 1000:.0f} s away; the queue's "
            f"max_delay_seconds is {limit}"
        )
    return None


def within_retention(
    m: OutgoingMessage, attributes: QueueAttributes, now_ms: int
) -> OutgoingMessage:
    """``m`` with a ``ttl_deadline_ms`` farther than the queue's retention from ``now_ms``
    brought within it (a moved message whose deadline its new queue's retention would outlast:
    the retention would expire it by then all the same, and the state machine takes no longer
    time to live); ``m`` itself otherwise."""
    limit = now_ms + attributes.message_retention_seconds * 1000
    if m.ttl_deadline_ms is None or m.ttl_deadline_ms <= limit:
        return m
    return replace(m, ttl_deadline_ms=limit)


def size_refusal(m: OutgoingMessage, attributes: QueueAttributes) -> MessageTooLarge | None:
    """`MessageTooLarge` if ``m``'s body is above the queue's ``max_message_size``."""
    if len(m.body) <= attributes.max_message_size:
        return None
    return MessageTooLarge(
        f"a message body has {len(m.body)} bytes; the queue allows {attributes.max_message_size}"
    )


def send_refusal(queue: str, m: OutgoingMessage, attributes: QueueAttributes) -> CmqError | None:
    """Why ``queue`` (with ``attributes``) refuses ``m`` in a send, or None: the rules of
    `check_send_rules`, the size limit (`MessageTooLarge`), and on a FIFO queue without
    content-based deduplication a deduplication id (`InvalidParameter`). The committed
    attributes decide again when the send is applied."""
    refusal = _rule_refusal(queue, m) or size_refusal(m, attributes)
    dedup = attributes.content_based_deduplication or m.dedup_id is not None
    if refusal is None and attributes.fifo and not dedup:
        refusal = InvalidParameter(
            "the queue should either have ContentBasedDeduplication enabled or "
            "MessageDeduplicationId (dedup_id) provided explicitly"
        )
    return refusal


@dataclass(frozen=True, slots=True)
class SentMessage:
    """The confirmation of one sent message (returned only after commit). ``seq`` is also a
    FIFO message's sequence number; a deduplicated send gets the original's id and seq."""

    id: str
    seq: int


@dataclass(frozen=True, slots=True)
class SendRefused:
    """A message a per-entry send (``QueueService.send(..., per_entry=True)``) left out, in
    its place among the answers: the code and message of the error (`send_refusal`) that
    would have refused a whole send."""

    code: str
    message: str

    @staticmethod
    def of(error: CmqError) -> SendRefused:
        return SendRefused(error.code, error.message)

    def error(self) -> CmqError:
        """The refusal as the error a whole send raises for it."""
        return error_for(self.code, self.message)


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """One leased message handed to a consumer."""

    id: str
    seq: int
    body: bytes
    binary: bool
    receipt: str
    receive_count: int
    sent_at_ms: int
    attributes: tuple[tuple[str, str], ...]
    group_id: str | None = None
    """FIFO queues: the message's group; its deduplication id in ``dedup_id``."""
    dedup_id: str | None = None
    ttl_deadline_ms: int | None = None
    """When its time to live runs out (the queue's time, Unix ms); None: it has none. What
    a move to another queue keeps (`cmq.redrive`)."""
    priority: int = 0
    """Its priority level (0 on a queue without priorities)."""


@dataclass(frozen=True, slots=True)
class PeekedMessage:
    """A message at the head of a queue, read without leasing it (no receipt)."""

    id: str
    seq: int
    body: bytes
    binary: bool
    sent_at_ms: int
    attributes: tuple[tuple[str, str], ...]


MAX_PEEK = 100
"""Most messages one peek returns."""


@dataclass(frozen=True, slots=True)
class EntryResult:
    """The outcome of one ack / visibility change / nack entry."""

    receipt: str
    ok: bool
    error: str | None = None


@dataclass(frozen=True, slots=True)
class SegmentCounts:
    """A queue's segments by state (see `SEGMENT_STATES`), on the replica that answers."""

    active: int = 0
    sealed: int = 0
    released: int = 0
    archived_pending: int = 0


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Counts for `GET /v1/queues/{name}` (exact at the leader's applied index)."""

    visible: int = 0
    in_flight: int = 0
    delayed: int = 0
    sent_total: int = 0
    acked_total: int = 0
    dead_lettered_total: int = 0
    expired_total: int = 0
    oldest_age_ms: int = 0
    segments: SegmentCounts = SegmentCounts()
    disk_bytes: int = 0
    """Bytes of the queue's segment files on this replica (archived_pending ones included)."""
    oldest_unarchived_ms: int = 0
    """The archive's backlog: age of the oldest message of a released segment not yet
    archived (from its send time); 0 when none (always 0 on a queue without ``archive``)."""
    visible_by_priority: tuple[int, ...] = ()
    """Queues with ``priorities`` > 1: the visible messages at each level, 0 (lowest) first
    (they add up to ``visible``); empty otherwise."""
    tenants: int = 0
    """Standard queues whose messages have group ids (fair queues): the tenants with a message
    ready to be received (the messages without a group id count as one tenant); 0 otherwise."""


@dataclass(frozen=True, slots=True)
class GroupDigest:
    """A data group's replicated state on one node, hashed (``GET /v1/groups/{group}/digest``):
    replicas that applied the same index must show the same hashes. ``image_sha256`` covers
    the state machine's snapshot image (queues, messages' metadata, leases, dedup window);
    ``segments_sha256`` the bytes of the ``segments`` segment files that image lists, up to
    the sizes it records."""

    group: int
    node: int
    applied: int
    image_sha256: str
    image_bytes: int
    segments_sha256: str
    segments: int
