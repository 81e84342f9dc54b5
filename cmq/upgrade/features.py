"""Feature flags: the format changes this release can write, each behind a flag (pure).

A release *supports* every flag it lists here. A flag is *enabled* in the catalog (the meta
group's replicated state, `cmq.catalog.meta.CatalogMachine`): only then does any node write what the
flag gates, so a cluster mixing this release with the previous one replicates the same groups in
the format both read. A flag can be enabled only when every registered node supports it (asked
live at that moment, `cmq.admin.feature_admin`); enabling is a replicated, idempotent command; a
cluster formed by this release enables every flag it knows at once. Disabling is not offered:
data written under a flag may already be on every replica, and only a release that reads it can
run on it (a node that finds a flag enabled that it does not know refuses to start, naming it).
As RabbitMQ's feature flags and CockroachDB's version gates do.

The rule for every later change to a byte layout, on disk or on the wire: add a version to that
format and a flag here, write the new version only once the flag is enabled, and cover it in the
rolling-upgrade test (``tests/upgrade``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cmq.errors import FeatureNotEnabled


@dataclass(frozen=True, slots=True)
class Feature:
    """One flag: its ``name`` (stable, stored in catalogs), the release that introduced it, and
    what it lets a node write."""

    name: str
    since: str
    description: str
    peer_protocol: int = 1
    """The lowest peer protocol a node must speak once this flag is enabled (a flag that
    changes the peer frames raises it: older nodes are then refused at the handshake)."""


QUEUE_RETIME = "queue_retime"
MESSAGE_IMPORT = "message_import"
SELF_REPAIR = "self_repair"
SEGMENT_INDEX = "segment_index"
RETRY_BACKOFF = "retry_backoff"
LONG_DELAYS = "long_delays"
MESSAGE_TTL = "message_ttl"
MESSAGE_PRIORITIES = "message_priorities"
REWIND = "rewind"
SEGMENT_READ_BINARY = "segment_read_binary"
FAIR_QUEUES = "fair_queues"
BATCH_RECEIPTS = "batch_receipts"
PEER_FAILURES = "peer_failures"

FEATURES: tuple[Feature, ...] = (
    Feature(
        QUEUE_RETIME,
        "0.2.0",
        "a leader may propose RETIME (a queue whose time got ahead of the leaders' clocks runs "
        "on and slews back), and snapshot images with a clock skew are written as version 3",
    ),
    Feature(
        MESSAGE_IMPORT,
        "0.2.0",
        "sends may carry an import's expected count (cmq restore keeps message ids)",
    ),
    Feature(
        SELF_REPAIR,
        "0.2.0",
        "a replica whose stored state is damaged (a WAL record, a snapshot or a segment file "
        "failing its checksum) is reset and caught up from the others instead of refusing to "
        "start; the data directory then holds a repair record (repair.json) while it runs",
    ),
    Feature(
        SEGMENT_INDEX,
        "0.2.0",
        "a sealed segment gets an index file beside it (<first_seq>.idx, version 1), so a "
        "restart reads it instead of every record",
    ),
    Feature(
        RETRY_BACKOFF,
        "0.3.0",
        "queues may have a retry back-off policy (the queue attribute retry): the attribute "
        "encoding's flag 0x08 and its fields, and touched-message slots flagged backing-off",
    ),
    Feature(
        LONG_DELAYS,
        "0.3.0",
        "queues may set max_delay_seconds above 900 (up to 7 days): the attribute encoding's "
        "flag 0x10 and its u32 field",
    ),
    Feature(
        MESSAGE_TTL,
        "0.3.0",
        "messages may have a time to live (ttl_seconds): the send's message option 0x08 and "
        "its i64, and data group images of version 4 (the live messages' deadlines)",
    ),
    Feature(
        MESSAGE_PRIORITIES,
        "0.3.0",
        "queues may have priorities (the attribute encoding's flag 0x20 and its u8) and "
        "messages a priority above 0 (the send's message option 0x10 and its u8), and data "
        "group images of version 5 (the live messages' priority levels)",
    ),
    Feature(
        REWIND,
        "0.3.0",
        "queues may keep acknowledged messages (the queue attribute retain_acked_seconds: the "
        "attribute encoding's flag 0x40 and its u32) and be rewound (command REWIND, type 17); "
        "data group images of version 6 (per segment: archived-but-retained, rewound copies)",
    ),
    Feature(
        SEGMENT_READ_BINARY,
        "0.3.0",
        "a released segment's read may be answered in binary (application/x-cmq-segment "
        "version 1: the stored bytes with their outcome tables) to a reader that asks for it; "
        "before, and on a node without it, the reader gets the JSON lines",
    ),
    Feature(
        FAIR_QUEUES,
        "0.3.0",
        "a standard queue's messages may have a group id naming their tenant (the send's "
        "message option 0x04, until then FIFO queues' only), leased round-robin over tenants, "
        "and data group images of version 7 (the tenants' live messages and the fair cursor)",
    ),
    Feature(
        BATCH_RECEIPTS,
        "0.3.0",
        "receipts of layout 2 (cmq.routing.receipts): one HMAC per run of lease ids a receive "
        "hands out, each message's receipt carrying the run (before: one HMAC per message, "
        "layout 1, still accepted); and acks whose entries are runs of consecutive (seq, lease) "
        "pairs (command ACK_RUNS, type 18)",
    ),
    Feature(
        PEER_FAILURES,
        "0.3.0",
        "a forwarded call's failure is answered in the front-end socket's form (cmq.failure: "
        "MessagePack [code, message, retry_after, leader]), so a leader's retry_after reaches "
        "the node the client called; before, a JSON object that drops retry_after (still read)",
    ),
)
"""Every flag this release supports, oldest first."""

KNOWN: frozenset[str] = frozenset(f.name for f in FEATURES)
"""The names of `FEATURES`."""


def by_name(name: str) -> Feature | None:
    """The flag called ``name`` if this release knows it."""
    return next((f for f in FEATURES if f.name == name), None)


def unknown(enabled: Iterable[str]) -> list[str]:
    """The enabled flags this release does not know, sorted: a node running this release on
    such a cluster would misread what they gate."""
    return sorted(n for n in enabled if n not in KNOWN)


def required_protocol(enabled: Iterable[str]) -> int:
    """The peer protocol every connection needs once the flags ``enabled`` are (1: any)."""
    return max([1, *(f.peer_protocol for f in FEATURES if f.name in set(enabled))])


def not_enabled(name: str, what: str) -> FeatureNotEnabled:
    """The refusal of ``what`` (a sentence's subject: "imports", "a retry policy") while flag
    ``name`` is not enabled, saying how to enable it."""
    return FeatureNotEnabled(
        f"{what} need the feature flag {name}: enable it with "
        f"`cmq cluster enable-feature {name}` once every node runs a release that has it"
    )
