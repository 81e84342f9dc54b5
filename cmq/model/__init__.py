"""Values shared by the state machine, the node service and the API: queue attributes with their
limits, what a client sends and receives, and a queue's statistics. Pure: no I/O, no clocks.
The values of the archive's calls are `cmq.segment_values`, those of backups'
`cmq.export_values`.

The values live in this package's modules, by idea, and are all re-exported here:
`cmq.model.limits` (names, ids and limits), `cmq.model.attributes` (a queue's attributes),
`cmq.model.sending` (what is sent, the send rules, the answers), `cmq.model.receiving` (what a
consumer is handed) and `cmq.model.stats` (what a queue and a group report).

Times inside the queue are integer milliseconds since the Unix epoch, always stamped by the
proposer (the leader) and carried in commands, never read during apply.
"""

from __future__ import annotations

from cmq.model.attributes import (
    MAX_RETRY_MULTIPLIER,
    MAX_RETRY_SECONDS,
    QueueAttributes,
    RetryPolicy,
)
from cmq.model.limits import (
    DEDUP_WINDOW_MS,
    DEFAULT_MAX_DELAY_SECONDS,
    DEFAULT_SEGMENT_AGE_SECONDS,
    DEFAULT_SEGMENT_BYTES,
    FIFO_ID,
    FIFO_SUFFIX,
    LIMITS,
    MAX_ACK_BATCH,
    MAX_ATTRIBUTE_NAME,
    MAX_DEDUP_ENTRIES,
    MAX_DEDUP_ID,
    MAX_DELAY_SECONDS,
    MAX_GROUP_ID,
    MAX_MESSAGE_ATTRIBUTES,
    MAX_PRIORITY,
    MAX_RECEIVE_BATCH,
    MAX_RETAIN_ACKED_SECONDS,
    MAX_SEND_BATCH,
    MAX_WAIT_SECONDS,
    OUTCOMES,
    QUEUE_NAME,
    check_fifo_id,
    check_queue_name,
    is_fifo_name,
)
from cmq.model.receiving import (
    MAX_PEEK,
    EntryResult,
    PeekedMessage,
    ReceivedMessage,
)
from cmq.model.sending import (
    OutgoingMessage,
    SendRefused,
    SentMessage,
    check_send_rules,
    delay_refusal,
    send_refusal,
    size_refusal,
    within_retention,
)
from cmq.model.stats import (
    GroupDigest,
    QueueStats,
    SegmentCounts,
)

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
    "MAX_PEEK",
    "MAX_PRIORITY",
    "MAX_RECEIVE_BATCH",
    "MAX_RETAIN_ACKED_SECONDS",
    "MAX_RETRY_MULTIPLIER",
    "MAX_RETRY_SECONDS",
    "MAX_SEND_BATCH",
    "MAX_WAIT_SECONDS",
    "OUTCOMES",
    "QUEUE_NAME",
    "EntryResult",
    "GroupDigest",
    "OutgoingMessage",
    "PeekedMessage",
    "QueueAttributes",
    "QueueStats",
    "ReceivedMessage",
    "RetryPolicy",
    "SegmentCounts",
    "SendRefused",
    "SentMessage",
    "check_fifo_id",
    "check_queue_name",
    "check_send_rules",
    "delay_refusal",
    "is_fifo_name",
    "send_refusal",
    "size_refusal",
    "within_retention",
]
