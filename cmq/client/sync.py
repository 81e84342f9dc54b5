"""`SyncClient`: the blocking facade of `cmq.client.Client`, for scripts and the CLI.

It runs a private event loop in the calling thread (``asyncio.Runner``) and one `Client` on
it, so it must not be used from inside a running event loop (use `Client` there). Same
methods, same contracts, same errors; close it (or use ``with``) to release the connections.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar

from cmq.client.aio import DEFAULT_URL, Client
from cmq.client.retry import RetryPolicy
from cmq.client.signing import AccessKey
from cmq.segment_values import SegmentRecord

T = TypeVar("T")
P = ParamSpec("P")


def _blocking(
    method: Callable[Concatenate[Client, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[SyncClient, P], T]:
    """``method`` of `Client` as a blocking method of `SyncClient`: the same parameters, the
    same result, its docstring (each method of the facade is this one line)."""

    @functools.wraps(method)
    def call(self: SyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._run(method(self._client, *args, **kwargs))

    return call


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

    # -- the nodes and the cluster
    list_nodes = _blocking(Client.list_nodes)
    join_node = _blocking(Client.join_node)
    drain_node = _blocking(Client.drain_node)
    activate_node = _blocking(Client.activate_node)
    remove_node = _blocking(Client.remove_node)
    set_groups = _blocking(Client.set_groups)
    list_features = _blocking(Client.list_features)
    enable_features = _blocking(Client.enable_features)
    # -- queues
    create_queue = _blocking(Client.create_queue)
    list_queues = _blocking(Client.list_queues)
    get_queue = _blocking(Client.get_queue)
    set_attributes = _blocking(Client.set_attributes)
    delete_queue = _blocking(Client.delete_queue)
    purge = _blocking(Client.purge)
    rewind = _blocking(Client.rewind)
    # -- messages
    send = _blocking(Client.send)
    send_one = _blocking(Client.send_one)
    send_many = _blocking(Client.send_many)
    receive = _blocking(Client.receive)
    ack = _blocking(Client.ack)
    ack_one = _blocking(Client.ack_one)
    ack_many = _blocking(Client.ack_many)
    change_visibility = _blocking(Client.change_visibility)
    nack = _blocking(Client.nack)
    # -- segments and the archive
    list_segments = _blocking(Client.list_segments)

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

    claim_segments = _blocking(Client.claim_segments)
    mark_archived = _blocking(Client.mark_archived)
    # -- the node's state and raw requests
    status = _blocking(Client.status)
    health = _blocking(Client.health)
    ready = _blocking(Client.ready)
    metrics = _blocking(Client.metrics)
    request = _blocking(Client.request)


async def _next(stream: AsyncIterator[T]) -> T:
    return await anext(stream)
