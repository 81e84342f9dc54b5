"""`SyncClient`: the blocking facade of `cmq.client.Client`, for scripts and the CLI.

It runs a private event loop in the calling thread (``asyncio.Runner``) and one `Client` on
it, so it must not be used from inside a running event loop (use `Client` there). Same
methods, same contracts, same errors; close it (or use ``with``) to release the connections.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from datetime import datetime
from typing import Any, TypeVar

from cmq.client.aio import DEFAULT_URL, Client
from cmq.client.retry import RetryPolicy
from cmq.client.signing import AccessKey
from cmq.client.types import Outgoing, QueueCreated, QueueInfo, RawResponse, ReceivedMessage
from cmq.model import EntryResult, QueueAttributes, SentMessage
from cmq.segment_values import ArchiveResult, ClaimResult, SegmentListing, SegmentRecord

T = TypeVar("T")


class SyncClient:
    """A `Client` behind blocking calls; see `Client` for each method's contract."""

    def __init__(
        self,
        urls: str | Sequence[str] = DEFAULT_URL,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        connections: int = 10,
        access_key: AccessKey | tuple[str, str] | None = None,
        ca_file: str | None = None,
        leader_direct: bool = True,
        leader_any_node: bool = False,
    ) -> None:
        self._runner = asyncio.Runner()
        self._client = Client(
            urls,
            timeout=timeout,
            retry=retry,
            connections=connections,
            access_key=access_key,
            ca_file=ca_file,
            leader_direct=leader_direct,
            leader_any_node=leader_any_node,
        )
        self._closed = False

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections and the private loop (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._runner.run(self._client.close())
        self._runner.close()

    def _run(self, call: Coroutine[Any, Any, T]) -> T:
        # The caller's context (its current span, for the trace context a send carries).
        return self._runner.run(call, context=contextvars.copy_context())

    @property
    def urls(self) -> tuple[str, ...]:
        return self._client.urls

    def list_nodes(self) -> list[dict[str, Any]]:
        return self._run(self._client.list_nodes())

    def join_node(
        self,
        node: int,
        address: str,
        data_dirs: Sequence[str],
        *,
        http: str = "",
        zone: str = "",
    ) -> dict[int, str]:
        return self._run(self._client.join_node(node, address, data_dirs, http=http, zone=zone))

    def drain_node(self, node: int) -> None:
        self._run(self._client.drain_node(node))

    def activate_node(self, node: int) -> None:
        self._run(self._client.activate_node(node))

    def remove_node(self, node: int) -> None:
        self._run(self._client.remove_node(node))

    def set_groups(self, groups: int) -> list[int]:
        return self._run(self._client.set_groups(groups))

    def list_features(self) -> list[dict[str, Any]]:
        return self._run(self._client.list_features())

    def enable_features(self, names: list[str] | None = None) -> list[str]:
        return self._run(self._client.enable_features(names))

    def create_queue(
        self, name: str, attributes: QueueAttributes | dict[str, Any] | None = None
    ) -> QueueCreated:
        return self._run(self._client.create_queue(name, attributes))

    def list_queues(self) -> list[str]:
        return self._run(self._client.list_queues())

    def get_queue(self, name: str) -> QueueInfo:
        return self._run(self._client.get_queue(name))

    def set_attributes(self, name: str, changes: dict[str, Any]) -> QueueAttributes:
        return self._run(self._client.set_attributes(name, changes))

    def delete_queue(self, name: str) -> None:
        self._run(self._client.delete_queue(name))

    def purge(self, name: str) -> int:
        return self._run(self._client.purge(name))

    def rewind(self, name: str, since: datetime | str) -> int:
        return self._run(self._client.rewind(name, since))

    def send(self, queue: str, messages: Sequence[Outgoing]) -> list[SentMessage]:
        return self._run(self._client.send(queue, messages))

    def send_one(self, queue: str, message: Outgoing) -> SentMessage:
        return self._run(self._client.send_one(queue, message))

    def send_many(
        self, queue: str, messages: Sequence[Outgoing], batch: int = 100
    ) -> list[SentMessage]:
        return self._run(self._client.send_many(queue, messages, batch))

    def receive(
        self,
        queue: str,
        max_messages: int = 1,
        *,
        visibility_timeout: int | None = None,
        wait_seconds: int | None = None,
        attempt_id: str | None = None,
    ) -> list[ReceivedMessage]:
        return self._run(
            self._client.receive(
                queue,
                max_messages,
                visibility_timeout=visibility_timeout,
                wait_seconds=wait_seconds,
                attempt_id=attempt_id,
            )
        )

    def ack(self, queue: str, receipts: Sequence[str]) -> list[EntryResult]:
        return self._run(self._client.ack(queue, receipts))

    def ack_one(self, queue: str, receipt: str) -> EntryResult:
        return self._run(self._client.ack_one(queue, receipt))

    def ack_many(self, queue: str, receipts: Sequence[str]) -> list[EntryResult]:
        return self._run(self._client.ack_many(queue, receipts))

    def change_visibility(
        self, queue: str, entries: Sequence[tuple[str, int]]
    ) -> list[EntryResult]:
        return self._run(self._client.change_visibility(queue, entries))

    def nack(
        self, queue: str, receipts: Sequence[str], delay_seconds: int = 0
    ) -> list[EntryResult]:
        return self._run(self._client.nack(queue, receipts, delay_seconds))

    def list_segments(
        self, queue: str, state: str = "all", *, url: str | None = None
    ) -> SegmentListing:
        return self._run(self._client.list_segments(queue, state, url=url))

    def read_segment(
        self,
        queue: str,
        first_seq: int,
        *,
        url: str | None = None,
        checksum: str | None = None,
    ) -> Iterator[SegmentRecord]:
        """Lazily, like `Client.read_segment` (consume it before the next call)."""
        stream = self._client.read_segment(queue, first_seq, url=url, checksum=checksum)
        try:
            while True:
                try:
                    record = self._run(_next(stream))
                except StopAsyncIteration:
                    return
                yield record
        finally:
            self._run(stream.aclose())

    def claim_segments(
        self, queue: str, batch_id: str, segments: Sequence[int], ttl_ms: int = 600_000
    ) -> ClaimResult:
        return self._run(self._client.claim_segments(queue, batch_id, segments, ttl_ms))

    def mark_archived(self, queue: str, batch_id: str, segments: Sequence[int]) -> ArchiveResult:
        return self._run(self._client.mark_archived(queue, batch_id, segments))

    def status(self) -> dict[str, Any]:
        return self._run(self._client.status())

    def health(self) -> bool:
        return self._run(self._client.health())

    def ready(self) -> bool:
        return self._run(self._client.ready())

    def metrics(self) -> str:
        return self._run(self._client.metrics())

    def request(
        self, method: str, path: str, body: Any = None, *, raw: bytes | None = None
    ) -> RawResponse:
        return self._run(self._client.request(method, path, body, raw=raw))


async def _next(stream: AsyncIterator[T]) -> T:
    return await anext(stream)
