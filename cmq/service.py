"""`QueueService`: what the front ends (native JSON API, SQS, streaming protocol) call, and what
moves messages between queues (`cmq.redrive`). Protocol only.

Every method either returns after the change is committed on a majority of the queue's replicas
(sends, acks, leases, attribute changes) or raises a `CmqError` (bad input changes nothing).
Any node serves any queue: calls for a queue led elsewhere are forwarded transparently, and
leader changes are retried within the request deadline (`Unavailable` after it; see
`cmq.routing.router`). Implemented by `cmq.node.queue_node.QueueNode`.
"""

from __future__ import annotations

from typing import Any, Protocol

from cmq.export_values import ExportPage, ImportedMessage
from cmq.model import (
    EntryResult,
    GroupDigest,
    OutgoingMessage,
    PeekedMessage,
    QueueAttributes,
    QueueStats,
    ReceivedMessage,
    SendRefused,
    SentMessage,
)
from cmq.segment_values import (
    ArchiveResult,
    ClaimResult,
    SegmentData,
    SegmentListing,
    SegmentStream,
)


class QueueService(Protocol):
    """The queue operations, as a client of the cluster sees them."""

    async def create_queue(self, name: str, attributes: QueueAttributes) -> bool:
        """Create ``name``; True if created, False if it already existed with the same
        attributes. Raises `QueueAlreadyExists` if it exists with different ones."""
        ...

    async def list_queues(self) -> list[str]:
        """Every queue name, sorted."""
        ...

    async def get_queue(self, name: str) -> tuple[QueueAttributes, QueueStats]:
        """Attributes and statistics; `QueueNotFound` if absent."""
        ...

    async def peek(self, name: str, limit: int) -> list[PeekedMessage]:
        """Up to ``limit`` (1..`MAX_PEEK`) messages at the head of the queue, visible ones
        lowest seq first, read at its leader without leasing them (nothing changes);
        `QueueNotFound` if absent."""
        ...

    async def set_attributes(self, name: str, changes: dict[str, Any]) -> QueueAttributes:
        """Apply validated attribute ``changes``; returns the new attributes."""
        ...

    async def delete_queue(self, name: str) -> None:
        """Delete the queue and its messages; `QueueNotFound` if absent."""
        ...

    async def queue_metadata(self, name: str) -> dict[str, str]:
        """The queue's metadata: string pairs the catalog stores for other surfaces (the SQS
        surface keeps tags and timestamps there) without interpreting them; `QueueNotFound` if
        absent. Read at the catalog's leader."""
        ...

    async def update_metadata(
        self, name: str, changes: dict[str, str], unset: list[str]
    ) -> dict[str, str]:
        """Set ``changes`` and remove the keys ``unset`` in the queue's metadata (committed in
        the catalog before this returns); returns the metadata after the change. Deleting the
        queue deletes its metadata."""
        ...

    async def purge(self, name: str) -> int:
        """Delete every message; returns how many were deleted."""
        ...

    async def rewind(self, name: str, since_ms: int) -> int:
        """Make every acknowledged message sent at or after ``since_ms`` (Unix ms) that the
        queue still retains (``retain_acked_seconds``) deliverable once more, as a replicated
        command (`cmq.fsm.rewind`): receive counts restart, live messages keep their state, the
        archive writes none of them twice. Returns how many came back. A FIFO queue refuses
        (`InvalidParameter`); `FeatureNotEnabled` before the ``rewind`` flag."""
        ...

    async def send(self, name: str, messages: list[OutgoingMessage]) -> list[SentMessage]:
        """Append ``messages`` in order; returns once committed (fsynced on a majority).

        A message the queue refuses (too large for it, a FIFO rule: `cmq.model.send_refusal`)
        refuses the whole send: nothing is stored, its error is raised; so is a failure of the
        send itself (`QueueNotFound`, `Unavailable`, ...)."""
        ...

    async def send_each(
        self, name: str, messages: list[OutgoingMessage]
    ) -> list[SentMessage | SendRefused]:
        """`send`, answered per entry as SQS's SendMessageBatch is: each refused message is
        answered in its place by a `SendRefused` and the others are stored (one commit). A
        failure of the send itself (`QueueNotFound`, `Unavailable`, ...) is raised."""
        ...

    async def receive(
        self,
        name: str,
        max_messages: int,
        visibility_timeout: int | None,
        wait_seconds: int | None,
        *,
        attempt_id: str | None = None,
    ) -> list[ReceivedMessage]:
        """Lease up to ``max_messages`` visible messages (the lease is committed before this
        returns); waits up to ``wait_seconds`` (None: the queue's default) for one to appear.
        FIFO queues: messages of one group in send order, none of a group while one of it is
        in flight; ``attempt_id`` makes a retry within 5 minutes get the same messages and
        receipts while they are all still in flight."""
        ...

    async def ack(self, name: str, receipts: list[str]) -> list[EntryResult]:
        """Delete the messages whose receipts hold current leases; per-entry results."""
        ...

    async def change_visibility(
        self, name: str, entries: list[tuple[str, int]]
    ) -> list[EntryResult]:
        """Set each leased message's visibility deadline to now + seconds."""
        ...

    async def nack(self, name: str, receipts: list[str], delay_seconds: int) -> list[EntryResult]:
        """Release leases: the messages become visible again after ``delay_seconds``."""
        ...

    async def list_segments(self, name: str, state: str = "all") -> SegmentListing:
        """The queue's segments in ``state`` (active, sealed, released, archived_pending or
        all) as this node's replica holds them (no leader needed); `InvalidParameter` for
        another state."""
        ...

    async def read_segment(self, name: str, first_seq: int) -> SegmentStream:
        """The records of a released segment from this node's replica, with their outcomes;
        `SegmentNotFound` (unknown or archived), `SegmentNotReleased`, or `CorruptSegment`
        (this replica's copy is damaged: read another) before anything is streamed."""
        ...

    async def read_segment_data(self, name: str, first_seq: int) -> SegmentData:
        """The binary read of a released segment from this node's replica (its stored bytes
        and outcome tables: `cmq.fsm.segdata`); the same errors as `read_segment` before
        anything is streamed, and `FeatureNotEnabled` until the ``segment_read_binary`` flag
        is (the caller then serves `read_segment`)."""
        ...

    async def claim_segments(
        self, name: str, batch_id: str, segments: list[int], ttl_ms: int
    ) -> ClaimResult:
        """Claim released segments for an archive batch (committed); per-segment refusals."""
        ...

    async def mark_archived(self, name: str, batch_id: str, segments: list[int]) -> ArchiveResult:
        """Forget archived segments (committed; every replica then deletes their files)."""
        ...

    def is_ready(self) -> bool:
        """Whether every group of this node has a known leader (for ``/readyz``)."""
        ...

    def status(self) -> dict[str, Any]:
        """This node's view of the cluster (``/v1/status``): ``{"node": id, "release",
        "protocol": {"min", "max"}, "queues": n, "placement": {queue: group},
        "nodes": {id: {"address", "data_dirs", "release", "protocol", "reported"}},
        "data_groups": {group: {"replicas", "data_dirs", "queues"}},
        "groups": {group id: {"role", "term", "leader", "commit", "applied", "last_index",
        "voters", "lag": {peer: entries behind}}}}``; ``lag`` is known on a group's leader."""
        ...

    async def group_digest(self, group: int) -> GroupDigest:
        """Hashes of data group ``group``'s replicated state on this node (read-only, never
        forwarded): applied index, SHA-256 of the state machine image and of the segment files
        it lists. `GroupNotFound` when this node hosts no replica of that data group."""
        ...

    # -- backup and restore (cmq.admin.backup_admin) -----------------------------------------------
    async def export_catalog(self) -> dict[str, Any]:
        """``{"release", "sections": {name: JSON value}}``: the catalog's placement, groups,
        metadata and access keys (secrets sealed), as this node's copy holds them."""
        ...

    async def import_catalog(
        self, keys: list[Any], metadata: dict[str, dict[str, str]]
    ) -> dict[str, Any]:
        """Recreate access keys (`cmq.catalog.keys.KeyRecord`, sealed secrets that must open with
        this cluster's secret: `InvalidParameter` otherwise, nothing changed) and queue metadata."""
        ...

    async def export_messages(self, name: str, after: int, upto: int, limit: int) -> ExportPage:
        """A page of the queue's live messages (visible, in flight, delayed) with seq in
        (``after``, ``upto``), read at its leader without changing anything."""
        ...

    async def import_messages(
        self, name: str, messages: list[ImportedMessage], expect_sent: int
    ) -> list[SentMessage]:
        """Store ``messages`` keeping their ids, if the queue has had exactly ``expect_sent``
        messages sent; `ImportConflict` otherwise (nothing stored)."""
        ...

    # -- nodes (cmq.admin.nodes_admin) -----------------------------------------------------------
    async def list_nodes(self) -> list[dict[str, Any]]:
        """Every registered node as this node sees it
        (`cmq.admin.nodes_admin.NodeView.to_dict`)."""
        ...

    async def join_node(
        self, node: int, address: str, http: str, data_dirs: tuple[str, ...], zone: str
    ) -> dict[int, str]:
        """Register a joining node; every registered node's peer address by id."""
        ...

    async def drain_node(self, node: int) -> None:
        """Move every replica and leadership off ``node`` (`NodeNotFound`, `NodeBusy`)."""
        ...

    async def activate_node(self, node: int) -> None:
        """Undo a drain of ``node`` (`NodeNotFound`)."""
        ...

    async def remove_node(self, node: int) -> None:
        """Forget a drained ``node`` (`NodeNotFound`, `NodeBusy`)."""
        ...

    async def set_groups(self, groups: int) -> tuple[int, ...]:
        """Grow the number of data groups to ``groups``; the ids of the groups added
        (`InvalidParameter` for fewer groups than today or too many)."""
        ...

    async def list_features(self) -> list[dict[str, Any]]:
        """Every feature flag: name, since, description, enabled, supported_by (node ids),
        missing (node ids without it or not answering), asked live (`cmq.admin.feature_admin`)."""
        ...

    async def enable_features(self, names: list[str] | None) -> list[str]:
        """Enable ``names`` (None: every flag this release knows) once every registered node
        supports them; the names newly enabled (`InvalidParameter`, `FeatureUnsupported`)."""
        ...


SERVICE_METHODS: tuple[str, ...] = tuple(
    name
    for name, value in vars(QueueService).items()
    if not name.startswith("_") and callable(value)
)
"""`QueueService`'s method names in declaration order: what a stand-in for the service must
carry (`cmq.frontend.wire.CALLS` is checked against it; test doubles are built from it)."""
