"""The Python client of a cmq cluster (the native JSON API of ``docs/api.md``).

    async with Client("http://127.0.0.1:8080,http://127.0.0.1:8081") as c:
        await c.create_queue("orders")
        await c.send("orders", ["order 1", Message("order 2", dedup_id="o-2")])
        for m in await c.receive("orders", 10, wait_seconds=5):
            ...
            await c.ack("orders", [m.receipt])

`Client` is asynchronous (aiohttp, pooled connections, failover across nodes, retries only
where safe: `cmq.client.retry`); `SyncClient` is its blocking facade for scripts. Errors are
`cmq.errors` classes (also `ServerError`, with the HTTP status) and `ConnectFailed` /
`ResponseLost` for the transport (`cmq.client.errors`). Calls about a queue go straight to
the node leading it once a node named it (the ``Cmq-Leader`` header: `cmq.client.leaders`),
skipping the forwarding hop; ``leader_direct=False`` turns that off.

The archive read side: `Client.list_segments` (one node's replica, e.g. a follower's),
`Client.read_segment` (records yielded lazily; the stream's trailer, count, CRC and the
listing's checksum are checked when it ends: `CorruptSegment` otherwise), `claim_segments`
and `mark_archived`; the same on `SyncClient`.
"""

from cmq.client import types
from cmq.client.aio import DEFAULT_URL, Client
from cmq.client.errors import (
    UNKNOWN_OUTCOME,
    ConnectFailed,
    ResponseLost,
    SendManyError,
    ServerError,
    TransportError,
)
from cmq.client.http import parse_urls
from cmq.client.retry import NO_RETRY, RetryPolicy
from cmq.client.signing import AccessKey
from cmq.client.sync import SyncClient
from cmq.client.types import *  # noqa: F403 - the values a caller handles, re-exported

__all__ = [
    "DEFAULT_URL",
    "NO_RETRY",
    "UNKNOWN_OUTCOME",
    "AccessKey",
    "Client",
    "ConnectFailed",
    "ResponseLost",
    "RetryPolicy",
    "SendManyError",
    "ServerError",
    "SyncClient",
    "TransportError",
    "parse_urls",
]
__all__ += types.__all__
