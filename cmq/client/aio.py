"""`Client`: the asynchronous Python client of the cmq native JSON API (``docs/api.md``).

The endpoints, one method each; the HTTP exchange underneath is `cmq.client.http`. One
`aiohttp.ClientSession` per client (created on first use, in the running loop), so
connections are pooled and reused; several node URLs with failover: a call that could not
connect, or that a node refused (503 ``Overloaded`` / ``Unavailable``, 429), goes to the next
node. Retries follow `cmq.client.retry`: only where a repeat cannot change the outcome. Above
all, a send whose outcome is unknown (503 ``OutcomeUnknown``, a timeout or a dropped connection
after sending) is never resent unless every message carries a ``dedup_id``: the error is
raised and the caller decides. A receive is not retried once it may have been processed (a
lost answer leaves its messages leased until their visibility timeout).

Errors: the server's are raised as the `cmq.errors` class of their code, also instances of
`ServerError` (HTTP ``status``, ``code``, ``retry_after``); transport failures as
`ConnectFailed` / `ResponseLost` (`cmq.client.errors`).
"""

from __future__ import annotations

import random
from collections.abc import AsyncGenerator, Sequence
from datetime import datetime
from typing import Any, Final

import aiohttp
import orjson

from cmq.client import tracing
from cmq.client.errors import (
    SendManyError,
    server_error,
)
from cmq.client.http import Http, Pool, parse_urls
from cmq.client.leaders import Leaders
from cmq.client.retry import RetryPolicy, Safety
from cmq.client.segments import (
    RecordsReader,
    archived_from_json,
    claim_from_json,
    listing_from_json,
)
from cmq.client.signing import AccessKey
from cmq.client.types import (
    Json,
    Outgoing,
    QueueCreated,
    QueueInfo,
    RawResponse,
    ReceivedMessage,
    all_deduplicated,
    attributes_from_json,
    message_json,
    received_from_json,
    results_from_json,
    sent_from_json,
    stats_from_json,
)
from cmq.errors import CmqError, InvalidParameter
from cmq.model import (
    MAX_ACK_BATCH,
    MAX_SEND_BATCH,
    MAX_WAIT_SECONDS,
    EntryResult,
    QueueAttributes,
    SentMessage,
)
from cmq.segment_values import ArchiveResult, ClaimResult, SegmentListing, SegmentRecord

DEFAULT_URL: Final = "http://127.0.0.1:8080"
_JSON_HEADERS: Final = {"Content-Type": "application/json"}


class Client:
    """Asynchronous client of a cmq cluster; use ``async with Client(urls) as c:`` (or call
    `close`). Every call may raise `CmqError` (see the module docstring); ``timeout`` is each
    attempt's limit in seconds (a receive adds its long-poll wait)."""

    def __init__(
        self,
        urls: str | Sequence[str] = DEFAULT_URL,
        *,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        connections: int = 100,
        session: aiohttp.ClientSession | None = None,
        rng: random.Random | None = None,
        access_key: AccessKey | tuple[str, str] | None = None,
        ca_file: str | None = None,
        leader_direct: bool = True,
        leader_any_node: bool = False,
    ) -> None:
        """``urls``: the nodes (``"URL[,URL...]"`` or a sequence; any node serves any queue),
        tried in order from the last one that worked. ``connections``: the pool's limit (0 =
        unlimited). ``session``: an existing session to use (not closed by `close`).
        ``access_key``: the key requests are signed with (an `AccessKey` or (id, secret));
        None: the environment's or a key file's (`cmq.client.signing`), else unsigned.
        ``ca_file``: the CA bundle ``https`` URLs are verified with (else ``CMQ_CA_FILE``,
        else the system's). ``leader_direct``: send a queue's calls to the node that leads it,
        as the ``Cmq-Leader`` answer header names it, when that node is one of ``urls``
        (`cmq.client.leaders`; falls back to the rotation when it fails); ``leader_any_node``:
        also when the header names another address (off by default: a node could then steer
        the client, and its signed requests, to any address)."""
        nodes = parse_urls(urls)
        self._http = Http(
            nodes,
            timeout,
            retry if retry is not None else RetryPolicy(),
            AccessKey.resolve(access_key),
            Pool(connections, session, ca_file),
            rng if rng is not None else random.Random(),
            leaders=Leaders(nodes, any_node=leader_any_node) if leader_direct else None,
        )
        self._root = True

    # -- lifecycle ---------------------------------------------------------------------------------
    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connections (a derived client leaves them to the client it came from)."""
        if self._root:
            await self._http.pool.close()

    def derive(
        self,
        urls: str | Sequence[str] | None = None,
        *,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> Client:
        """A client sharing this one's connections with other nodes (e.g. one node: no
        failover), timeout or retry policy. Closing it is a no-op; close this one."""
        child = Client.__new__(Client)
        child._http = self._http.derive(None if urls is None else parse_urls(urls), timeout, retry)
        child._root = False
        return child

    @property
    def urls(self) -> tuple[str, ...]:
        """The nodes this client calls, in failover order."""
        return self._http.urls

    @property
    def timeout(self) -> float:
        """Each attempt's limit in seconds (a receive adds its long-poll wait)."""
        return self._http.timeout

    @property
    def access_key(self) -> AccessKey | None:
        """The key requests are signed with (None: unsigned)."""
        return self._http.access_key

    @access_key.setter
    def access_key(self, key: AccessKey | None) -> None:
        self._http.access_key = key

    # -- queues ------------------------------------------------------------------------------------
    async def create_queue(
        self, name: str, attributes: QueueAttributes | dict[str, Any] | None = None
    ) -> QueueCreated:
        """Create ``name`` with ``attributes`` (omitted ones take their defaults). Idempotent:
        ``created`` is False when the queue existed with the same attributes (also when a
        retry follows a first attempt that created it); `QueueAlreadyExists` when it exists
        with different ones."""
        attrs = attributes.to_dict() if isinstance(attributes, QueueAttributes) else attributes
        body = {} if attrs is None else {"attributes": attrs}
        got = await self._http.call("PUT", _q(name), body, _IDEM, queue=name)
        return QueueCreated(got["name"], got["created"], attributes_from_json(got["attributes"]))

    async def list_queues(self) -> list[str]:
        """Every queue name, sorted."""
        got = await self._http.call("GET", "/v1/queues", None, Safety.IDEMPOTENT)
        return [q["name"] for q in got["queues"]]

    async def get_queue(self, name: str) -> QueueInfo:
        """Attributes and statistics of ``name``; `QueueNotFound` if absent."""
        got = await self._http.call("GET", _q(name), None, _IDEM, queue=name)
        return QueueInfo(
            got["name"], attributes_from_json(got["attributes"]), stats_from_json(got["stats"])
        )

    async def set_attributes(self, name: str, changes: dict[str, Any]) -> QueueAttributes:
        """Change some attributes of ``name`` (at least one); the attributes after the change."""
        body = {"attributes": changes}
        got = await self._http.call("PATCH", _q(name), body, _IDEM, queue=name)
        return attributes_from_json(got["attributes"])

    async def delete_queue(self, name: str) -> None:
        """Delete ``name`` and its messages; `QueueNotFound` if absent. Not retried once the
        request may have been processed (a retry could answer `QueueNotFound`)."""
        await self._http.call("DELETE", _q(name), None, Safety.ONCE, queue=name)

    async def purge(self, name: str) -> int:
        """Delete every message of ``name``; how many. Not retried once it may have been
        processed (a retry could delete messages sent since)."""
        got = await self._http.call("POST", _q(name) + "/purge", None, Safety.ONCE, queue=name)
        return int(got["purged"])

    async def rewind(self, name: str, since: datetime | str) -> int:
        """Deliver once more every acknowledged message of ``name`` sent at or after
        ``since`` that the queue still retains (its ``retain_acked_seconds``); how many came
        back. ``since``: a timezone-aware datetime, or an ISO 8601 / RFC 3339 time with a zone
        (``2026-11-26T10:00Z``; `InvalidParameter` without one). Needs the admin grant. Not
        retried once it may have been processed."""
        body = {"since": rfc3339(since)}
        got = await self._http.call("POST", _q(name) + "/rewind", body, Safety.ONCE, queue=name)
        return int(got["rewound"])

    # -- messages ----------------------------------------------------------------------------------
    async def send(self, queue: str, messages: Sequence[Outgoing]) -> list[SentMessage]:
        """Send 1..100 messages in one request; their ids and sequence numbers in order, once
        every one is fsynced on a majority of the queue's replicas.

        Retried only when nothing was stored (could not connect, 503 ``Overloaded`` /
        ``Unavailable``) — or, when every message has a ``dedup_id``, also after an unknown
        outcome. Otherwise an unknown outcome raises `OutcomeUnknown` (the server's) or
        `ResponseLost` (no answer): the messages may or may not be stored."""
        safety = Safety.IDEMPOTENT if all_deduplicated(messages) else Safety.ONCE
        trace = tracing.current()
        body = {"messages": [message_json(m, trace) for m in messages]}
        got = await self._http.call("POST", _m(queue), body, safety, queue=queue)
        return sent_from_json(got)

    async def send_one(self, queue: str, message: Outgoing) -> SentMessage:
        """`send` of one message."""
        return (await self.send(queue, [message]))[0]

    async def send_many(
        self, queue: str, messages: Sequence[Outgoing], batch: int = MAX_SEND_BATCH
    ) -> list[SentMessage]:
        """`send` any number of messages, ``batch`` per request (at most 100), one request at a
        time in order. A failed request raises `SendManyError` holding what was confirmed
        before it; the messages after it are not sent."""
        if not 1 <= batch <= MAX_SEND_BATCH:
            raise ValueError(f"batch must be in [1, {MAX_SEND_BATCH}]")
        sent: list[SentMessage] = []
        for i in range(0, len(messages), batch):
            try:
                sent.extend(await self.send(queue, messages[i : i + batch]))
            except CmqError as e:
                raise SendManyError(list(sent), e) from e
        return sent

    async def receive(
        self,
        queue: str,
        max_messages: int = 1,
        *,
        visibility_timeout: int | None = None,
        wait_seconds: int | None = None,
        timeout: float | None = None,
        attempt_id: str | None = None,
    ) -> list[ReceivedMessage]:
        """Lease up to ``max_messages`` (1..100) visible messages for ``visibility_timeout``
        seconds (None: the queue's), waiting up to ``wait_seconds`` (None: the queue's
        ``receive_wait_seconds``) for one to arrive; possibly none.

        Retried only when the request was certainly not processed (could not connect, 503
        ``Overloaded`` / ``Unavailable``): after a timeout or dropped connection the messages
        it may have leased come back after their visibility timeout. FIFO queues: with an
        ``attempt_id`` a retry returns the same messages and receipts, so it is retried after
        an unknown outcome too."""
        body: Json = {"max_messages": max_messages}
        if attempt_id is not None:
            body["attempt_id"] = attempt_id
        if visibility_timeout is not None:
            body["visibility_timeout"] = visibility_timeout
        if wait_seconds is not None:
            body["wait_seconds"] = wait_seconds
        wait = MAX_WAIT_SECONDS if wait_seconds is None else wait_seconds
        limit = (self.timeout if timeout is None else timeout) + wait
        safety = Safety.ONCE if attempt_id is None else Safety.IDEMPOTENT
        got = await self._http.call(
            "POST", _m(queue) + "/receive", body, safety, limit, queue=queue
        )
        return received_from_json(got)

    async def ack(self, queue: str, receipts: Sequence[str]) -> list[EntryResult]:
        """Delete 1..100 received messages; one result per receipt, in order (``ok`` False
        with an ``error`` code such as ``LeaseStale`` for a receipt that no longer holds the
        lease). Committed on a majority before it answers; retried on any transient failure
        (a repeated ack answers per entry)."""
        body = {"receipts": list(receipts)}
        got = await self._http.call("POST", _m(queue) + "/ack", body, _IDEM, queue=queue)
        return results_from_json(got)

    async def ack_one(self, queue: str, receipt: str) -> EntryResult:
        """`ack` of one receipt."""
        return (await self.ack(queue, [receipt]))[0]

    async def ack_many(self, queue: str, receipts: Sequence[str]) -> list[EntryResult]:
        """`ack` any number of receipts, 100 per request; the results in order."""
        out: list[EntryResult] = []
        for i in range(0, len(receipts), MAX_ACK_BATCH):
            out.extend(await self.ack(queue, receipts[i : i + MAX_ACK_BATCH]))
        return out

    async def change_visibility(
        self, queue: str, entries: Sequence[tuple[str, int]]
    ) -> list[EntryResult]:
        """Set the remaining lease of 1..100 ``(receipt, seconds)`` entries (0: visible again
        now); one result per entry, in order. Retried on any transient failure."""
        body = {"entries": [{"receipt": r, "visibility_timeout": s} for r, s in entries]}
        got = await self._http.call("POST", _m(queue) + "/visibility", body, _IDEM, queue=queue)
        return results_from_json(got)

    async def nack(
        self, queue: str, receipts: Sequence[str], delay_seconds: int = 0
    ) -> list[EntryResult]:
        """Give 1..100 leased messages back, visible again after ``delay_seconds``; one result
        per receipt, in order. Retried on any transient failure."""
        body = {"receipts": list(receipts), "delay_seconds": delay_seconds}
        got = await self._http.call("POST", _m(queue) + "/nack", body, _IDEM, queue=queue)
        return results_from_json(got)

    # -- segments and the archive ------------------------------------------------------------------
    async def list_segments(
        self, queue: str, state: str = "all", *, url: str | None = None
    ) -> SegmentListing:
        """The segments of ``queue`` in ``state`` (active, sealed, released, archived_pending
        or all) as one node's replica holds them: ``url``'s (e.g. a follower's, so archiving
        does not load the leader), else the first answering node's. ``leader`` names the
        group's leader (map node ids to URLs with `status`)."""
        client = self if url is None else self.derive(url)
        got = await client._http.call("GET", f"{_q(queue)}/segments?state={state}", None, _IDEM)
        return listing_from_json(got)

    async def read_segment(
        self,
        queue: str,
        first_seq: int,
        *,
        url: str | None = None,
        checksum: str | None = None,
        chunk: int = 1 << 16,
    ) -> AsyncGenerator[SegmentRecord, None]:
        """The records of a released segment, read lazily from one node's replica (``url``,
        else the current node), each with how it left the queue. The stream is checked as
        it ends: a cut stream, a count or CRC mismatch, or a trailer checksum other than
        ``checksum`` (the listing's, when given) raises `CorruptSegment`, so a caller that
        stores records must only commit them once iteration ended cleanly (then read again
        from another replica on failure). `SegmentNotFound` / `SegmentNotReleased` as the
        server answers."""
        base = url.rstrip("/") if url is not None else self.urls[self._http.current]
        path = f"{_q(queue)}/segments/{first_seq}/records"
        reader = RecordsReader(f"{base}{path}", checksum)
        async for data in self._http.stream(base, path, chunk):
            for record in reader.feed(data):
                yield record
        reader.finish()

    async def claim_segments(
        self, queue: str, batch_id: str, segments: Sequence[int], ttl_ms: int = 600_000
    ) -> ClaimResult:
        """Claim released segments for archive batch ``batch_id`` for ``ttl_ms``; a repeat by
        the same batch renews (so it is retried like a read)."""
        body = {"batch_id": batch_id, "segments": list(segments), "ttl_ms": ttl_ms}
        got = await self._http.call("POST", f"{_q(queue)}/segments/claim", body, _IDEM, queue=queue)
        return claim_from_json(got)

    async def mark_archived(
        self, queue: str, batch_id: str, segments: Sequence[int]
    ) -> ArchiveResult:
        """Mark released segments archived (idempotent: a repeat lists them in ``already``);
        every replica then deletes their files."""
        body = {"batch_id": batch_id, "segments": list(segments)}
        got = await self._http.call(
            "POST", f"{_q(queue)}/segments/archived", body, _IDEM, queue=queue
        )
        return archived_from_json(got)

    # -- operations --------------------------------------------------------------------------------
    async def status(self) -> dict[str, Any]:
        """The first answering node's view of the cluster (``GET /v1/status``): its groups
        (role, term, leader, commit/applied, follower lag), nodes, placement of queues."""
        got: dict[str, Any] = await self._http.call("GET", "/v1/status", None, Safety.IDEMPOTENT)
        return got

    # -- nodes -------------------------------------------------------------------------------------
    async def list_nodes(self) -> list[dict[str, Any]]:
        """Every registered node (``GET /v1/nodes``): id, addresses, zone, state ("active",
        "draining"), replicas, incoming moves, leaderships and lag as the answering node sees
        them."""
        got: dict[str, Any] = await self._http.call("GET", "/v1/nodes", None, Safety.IDEMPOTENT)
        nodes: list[dict[str, Any]] = got["nodes"]
        return nodes

    async def join_node(
        self,
        node: int,
        address: str,
        data_dirs: Sequence[str],
        *,
        http: str = "",
        zone: str = "",
    ) -> dict[int, str]:
        """Register node ``node`` (peer ``address`` host:port) in the cluster (idempotent);
        every registered node's peer address by id. `cmq serve --join` calls it."""
        body = {
            "id": node,
            "address": address,
            "http": http,
            "data_dirs": list(data_dirs),
            "zone": zone,
        }
        got: dict[str, Any] = await self._http.call("POST", "/v1/nodes", body, Safety.IDEMPOTENT)
        return {int(k): str(v) for k, v in got["peers"].items()}

    async def drain_node(self, node: int) -> None:
        """Move every replica and leadership off ``node`` (returns at once; watch
        `list_nodes`). `NodeNotFound`; `NodeBusy` if too few active nodes would remain."""
        await self._http.call("POST", f"/v1/nodes/{int(node)}/drain", {}, Safety.IDEMPOTENT)

    async def activate_node(self, node: int) -> None:
        """Undo a drain: ``node`` takes replicas again. `NodeNotFound` for an unknown id."""
        await self._http.call("POST", f"/v1/nodes/{int(node)}/activate", {}, Safety.IDEMPOTENT)

    async def remove_node(self, node: int) -> None:
        """Forget ``node``. `NodeBusy` while it holds replicas or votes in the catalog group
        (drain it first); `NodeNotFound` for an unknown id."""
        await self._http.call("DELETE", f"/v1/nodes/{int(node)}", None, Safety.IDEMPOTENT)

    async def set_groups(self, groups: int) -> list[int]:
        """Grow the cluster to ``groups`` data groups (``PUT /v1/cluster/groups``); the ids of
        the groups added (empty when it had that many). `InvalidParameter` for fewer groups
        than today (shrinking is not supported) or more than 10,000."""
        body = {"groups": groups}
        got: dict[str, Any] = await self._http.call(
            "PUT", "/v1/cluster/groups", body, Safety.IDEMPOTENT
        )
        return [int(g) for g in got["added"]]

    async def list_features(self) -> list[dict[str, Any]]:
        """Every feature flag with its state and per-node support
        (``GET /v1/cluster/features``)."""
        got: dict[str, Any] = await self._http.call(
            "GET", "/v1/cluster/features", None, Safety.IDEMPOTENT
        )
        return list(got["features"])

    async def enable_features(self, names: list[str] | None = None) -> list[str]:
        """Enable ``names`` (None: every flag the node's release knows) once every node
        supports them (``POST /v1/cluster/features``); the names this call enabled.
        `FeatureUnsupported` names a node without one (nothing enabled)."""
        got: dict[str, Any] = await self._http.call(
            "POST", "/v1/cluster/features", {"names": names}, Safety.IDEMPOTENT
        )
        return [str(n) for n in got["enabled"]]

    async def health(self) -> bool:
        """Whether the first node answers ``/healthz`` (liveness; never raises)."""
        return await self._http.probe("/healthz")

    async def ready(self) -> bool:
        """Whether the first node is ready (``/readyz``: every group has a leader; never
        raises)."""
        return await self._http.probe("/readyz")

    async def metrics(self) -> str:
        """The first node's Prometheus exposition (``/metrics``)."""
        raw = await self.request("GET", "/metrics")
        if raw.status != 200:
            raise server_error(raw.status, "HttpError", f"/metrics answered {raw.status}")
        return raw.body.decode()

    async def request(
        self, method: str, path: str, body: Any = None, *, raw: bytes | None = None
    ) -> RawResponse:
        """One request to the first node, as it is: no retry, no error mapping (any status
        is returned). ``body`` is sent as JSON, or ``raw`` as given. For probing the HTTP
        surface itself (e.g. malformed requests); prefer the typed calls."""
        data = raw if raw is not None else (None if body is None else orjson.dumps(body))
        status, content, _, _ = await self._http.attempt(
            self.urls[0], method, path, data, self.timeout
        )
        try:
            payload = orjson.loads(content) if content else None
        except orjson.JSONDecodeError:
            payload = None
        return RawResponse(status, payload, content)


_IDEM = Safety.IDEMPOTENT


def _q(name: str) -> str:
    return f"/v1/queues/{name}"


def _m(name: str) -> str:
    return f"/v1/queues/{name}/messages"


def rfc3339(when: datetime | str) -> str:
    """``when`` as the RFC 3339 text the API takes: a timezone-aware datetime, or ISO 8601
    text with a zone (seconds optional: ``2026-11-26T10:00Z``); `InvalidParameter` else."""
    if isinstance(when, str):
        try:
            when = datetime.fromisoformat(when.strip())
        except ValueError:
            raise InvalidParameter(f"not an ISO 8601 time: {when!r}") from None
    if when.tzinfo is None:
        raise InvalidParameter(f"a time needs its zone (Z or +hh:mm): {when.isoformat()!r}")
    return when.isoformat()
