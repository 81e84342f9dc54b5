"""`Subscription`: one queue's messages pushed to a `cmq.client.stream.StreamClient` within the
credit its consumer grants (the streaming protocol's `Subscribe`, `Deliver` and `Credit` frames,
`cmq.stream`), and the acks that hand the credit back.

A subscription counts the messages delivered and not yet granted back (`Subscription.outstanding`,
at most ``prefetch``); `Subscription.grant` and `Subscription.ack` grant them back, and a
subscription resumed on another connection (`StreamClient` does that when its connection drops
or its queue's leader moves) subscribes there with the credit it has left (`Subscription._frame`).
The connections, leader routing and request window are `cmq.client.stream`'s; this module holds
the subscription's side of them only.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Final, Protocol

from cmq.client.types import ReceivedMessage
from cmq.errors import CmqError
from cmq.model import EntryResult
from cmq.stream import Ack, Credit, Deliver, Request, Results, Subscribe, Unsubscribe

if TYPE_CHECKING:
    from cmq.client.stream import StreamClient

__all__ = ["DEFAULT_PREFETCH", "Link", "Subscription", "delivered"]

DEFAULT_PREFETCH: Final = 128
"""A subscription's prefetch unless told, chosen by measurement (bench/stream_consumers.py,
bench/RESULTS.md "Stream consumers"). With `Subscription.ack` granting credit as the ack is
sent, one batch (32, the default ``max_batch``) fell behind the producers; two (64) kept up,
and 128 and 256 kept up no better on the machine measured. 128 doubles the two-batch minimum as
headroom for a faster cluster (a consumer needs about its rate x the refill time + one batch)
and holds half the leases 256 held (fewer to come back after a consumer's crash)."""


class Link(Protocol):
    """What a subscription needs of the connection its deliveries come over (a WebSocket of
    `cmq.client.stream.StreamClient`): its node's base URL, whether it has ended, and its
    bounded queue of frames to write."""

    url: str
    closed: asyncio.Event
    out: asyncio.Queue[Request]


def _body(body: bytes, binary: bool) -> str | bytes:
    """A delivered body as it was sent: text unless binary (or stored text that is not UTF-8,
    handed over as bytes rather than failing)."""
    if binary:
        return body
    try:
        return body.decode()
    except UnicodeDecodeError:
        return body


def delivered(d: Deliver) -> list[ReceivedMessage]:
    """The messages of a `Deliver` frame, as the client hands them over."""
    return [
        ReceivedMessage(
            m.id,
            m.seq,
            _body(m.body, m.binary),
            m.receipt,
            m.receive_count,
            m.sent_at_ms,
            m.attributes,
            m.group_id,
            m.dedup_id,
            None if m.group_id is None else str(m.seq),
            m.priority,
        )
        for m in d.messages
    ]


class Subscription:
    """Messages of one queue pushed to this client, at most ``prefetch`` delivered and not yet
    granted back (`grant`, or `ack` which grants what it acknowledges).

    Built by `StreamClient.subscribe`, which owns it: the client keeps it by id (its ``_subs``,
    which `close` and a failure leave), routes its deliveries to it (`_deliver`, `_fail`), puts it
    on a connection (`conn`, by `_frame`, with the credit left), and carries its acks in the
    client's request window (``_call``)."""

    def __init__(
        self,
        client: StreamClient,
        sid: int,
        queue: str,
        *,
        prefetch: int,
        visibility_timeout: int | None,
        max_batch: int,
    ) -> None:
        self.client = client
        self.id = sid
        self.queue = queue
        self.prefetch = prefetch
        self.visibility_timeout = visibility_timeout
        self.max_batch = max_batch
        self.outstanding = 0
        """Messages delivered and not granted back."""
        self.conn: Link | None = None
        """The connection the subscription's deliveries come over (None: being resumed)."""
        self._batches: asyncio.Queue[list[ReceivedMessage] | CmqError] = asyncio.Queue()
        self._closed = False

    def _frame(self) -> Subscribe:
        credit = max(0, self.prefetch - self.outstanding)
        return Subscribe(self.id, self.queue, credit, self.visibility_timeout, self.max_batch)

    def _deliver(self, batch: list[ReceivedMessage]) -> None:
        self.outstanding += len(batch)
        self._batches.put_nowait(batch)  # bounded by the credit: at most prefetch messages

    def _fail(self, error: CmqError) -> None:
        self.client._subs.pop(self.id, None)
        self._closed = True
        self._batches.put_nowait(error)

    async def next(self) -> list[ReceivedMessage]:
        """The next delivered batch (waits for one); raises the error that ended the
        subscription (e.g. `QueueNotFound`)."""
        item = await self._batches.get()
        if isinstance(item, CmqError):
            self._batches.put_nowait(item)
            raise item
        return item

    def __aiter__(self) -> AsyncIterator[list[ReceivedMessage]]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[list[ReceivedMessage]]:
        while not self._closed or not self._batches.empty():
            yield await self.next()

    def _take_back(self, n: int) -> Credit | None:
        """The `Credit` frame granting ``n`` delivered messages back (at most what is
        outstanding), counted as granted now; None when there is nothing to grant."""
        n = min(n, self.outstanding)
        if n <= 0 or self._closed:
            return None
        self.outstanding -= n
        return Credit(self.id, n)

    async def grant(self, n: int) -> None:
        """Let the server deliver ``n`` more messages (after handling ``n`` delivered ones)."""
        credit = self._take_back(n)
        conn = self.conn
        if credit is not None and conn is not None and not conn.closed.is_set():
            await conn.out.put(credit)
        # else: the subscription is resumed with the credit left, this included

    async def ack(self, messages: Sequence[ReceivedMessage]) -> list[EntryResult]:
        """Acknowledge ``messages`` (delivered by this subscription); per-message results once
        the acks are committed (fsynced on a majority), as `StreamClient.ack`.

        Their credit is granted back as the ack is sent, not after it commits: the `Credit`
        frame follows the `Ack` frame in the same WebSocket message, so the server proposes the
        acks before it leases the next messages, and the next deliveries overlap the acks'
        commit. Messages this consumer holds and has not acknowledged stay at most
        ``prefetch``; an ack that fails (an expired lease) leaves its message to come back
        after its visibility timeout, as it would have anyway. If the ack cannot be sent (no
        connection), the credit is granted once the call has failed."""
        granted = False

        def credit() -> Credit | None:
            nonlocal granted
            granted = True
            return self._take_back(len(messages))

        try:
            answer = await self.client._call(
                Ack(next(self.client._ids), self.queue, [m.receipt for m in messages]), credit
            )
        finally:
            if not granted:
                await self.grant(len(messages))
        assert isinstance(answer, Results), answer
        return [EntryResult(r, ok, err) for r, ok, err in answer.results]

    async def close(self) -> None:
        """Stop deliveries; messages delivered and not acknowledged keep their leases."""
        if self._closed:
            return
        self._closed = True
        self.client._subs.pop(self.id, None)
        conn = self.conn
        if conn is not None and not conn.closed.is_set():
            await conn.out.put(Unsubscribe(self.id))
