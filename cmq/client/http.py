"""The HTTP exchange under `cmq.client.Client`: one pooled `aiohttp.ClientSession`, node
failover, retries and request signing.

`Http.call` sends one JSON request to the node that last worked (a call about a queue: first to
the node `cmq.client.leaders.Leaders` prefers for it, the queue's leader as a node last named it)
and moves on to the next node
when a call could not connect or a node refused it (503 ``Overloaded`` / ``Unavailable``, 429),
retrying only as `cmq.client.retry` allows for the call's `Safety` (a send whose outcome is
unknown is never resent unless every message carries a ``dedup_id``: the caller decides). Errors
are the server's, raised as the `cmq.errors` class of their code (also `ServerError`), or
transport failures: `ConnectFailed` / `ResponseLost`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Final

import aiohttp
import orjson
from yarl import URL

from cmq.client.errors import ConnectFailed, ResponseLost, ServerError, TransportError, server_error
from cmq.client.leaders import LEADER_HEADER, Leaders
from cmq.client.retry import Failure, RetryPolicy, Safety, failure_of, retry_after_of
from cmq.client.signing import AccessKey, ssl_context
from cmq.client.types import Json
from cmq.errors import CmqError

_JSON_HEADERS: Final = {"Content-Type": "application/json"}


def parse_urls(urls: str | Sequence[str]) -> tuple[str, ...]:
    """Node URLs from ``"URL[,URL...]"`` or a sequence, without trailing slashes."""
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    out = tuple(u.strip().rstrip("/") for u in items if u.strip())
    if not out:
        raise ValueError("at least one node URL is needed")
    return out


class Pool:
    """The shared `aiohttp.ClientSession` of a client and the clients derived from it."""

    def __init__(
        self,
        connections: int,
        session: aiohttp.ClientSession | None,
        ca_file: str | None = None,
    ) -> None:
        self.connections = connections
        self.session = session
        self.owned = session is None
        self.ssl = ssl_context(ca_file)

    def get(self) -> aiohttp.ClientSession:
        if self.session is None:
            connector = aiohttp.TCPConnector(limit=self.connections, ssl=self.ssl or True)
            self.session = aiohttp.ClientSession(connector=connector)
        return self.session

    async def close(self) -> None:
        if self.owned and self.session is not None:
            await self.session.close()
            self.session = None


@dataclass(slots=True)
class Http:
    """Requests to a cluster's nodes over one `Pool` (see the module docstring). ``urls`` are
    tried in order from the last one that worked (``current``); ``timeout`` is each attempt's
    limit in seconds. ``leaders``: where each queue's calls go first (None: leader-direct
    routing off, every call takes the rotation)."""

    urls: tuple[str, ...]
    timeout: float
    retry: RetryPolicy
    access_key: AccessKey | None
    pool: Pool
    rng: random.Random
    current: int = 0
    leaders: Leaders | None = None

    def derive(
        self,
        urls: tuple[str, ...] | None,
        timeout: float | None,
        retry: RetryPolicy | None,
    ) -> Http:
        """The same connections, key and randomness; other nodes, timeout or retry policy.
        With the same nodes it shares the leader map; with other ``urls`` it starts its own,
        over those nodes (a client pinned to one node stays there unless ``any_node``)."""
        leaders = self.leaders
        if urls is not None and leaders is not None:
            leaders = Leaders(urls, any_node=leaders.any_node, capacity=leaders.capacity)
        return Http(
            self.urls if urls is None else urls,
            self.timeout if timeout is None else timeout,
            self.retry if retry is None else retry,
            self.access_key,
            self.pool,
            self.rng,
            leaders=leaders,
        )

    async def probe(self, path: str) -> bool:
        """Whether the first node answers ``GET path`` with 200 (False if unreachable)."""
        try:
            status, _, _, _ = await self.attempt(self.urls[0], "GET", path, None, self.timeout)
        except TransportError:
            return False
        return status == 200

    async def call(
        self,
        method: str,
        path: str,
        body: Json | None,
        safety: Safety,
        timeout: float | None = None,
        *,
        queue: str | None = None,
    ) -> Json:
        """Send ``body`` (JSON) and return the parsed 2xx answer, retrying as `retry` and
        ``safety`` allow; the last failure is raised. ``queue``: the queue the call is about,
        run by its leader: the first attempt goes to the node `leaders` prefers for it, if
        any (its failure drops the preference and the retries, as the policy allows them,
        take the rotation; a 4xx keeps it); each answer's ``Cmq-Leader`` header updates
        the preference."""
        data = None if body is None else orjson.dumps(body)
        limit = self.timeout if timeout is None else timeout
        n = len(self.urls)
        start = self.current
        leaders = self.leaders if queue is not None else None
        preferred = leaders.get(queue) if leaders is not None and queue is not None else None
        attempt = 0
        turn = 0  # attempts taken from the rotation
        while True:
            attempt += 1
            if preferred is not None and attempt == 1:
                index, url = -1, preferred
            else:
                index = (start + turn) % n
                turn += 1
                url = self.urls[index]
            try:
                status, content, retry_after, leader = await self.attempt(
                    url, method, path, data, limit
                )
            except TransportError as e:
                error: CmqError = e
            else:
                if leaders is not None and queue is not None:
                    leaders.learn(queue, url, leader)
                if status < 300:
                    if index >= 0 and index != self.current:
                        self.current = index
                    payload: Json = orjson.loads(content) if content else {}
                    return payload
                error = _error_of(status, content, retry_after)
            failure = failure_of(error)
            if index < 0:
                if failure is not Failure.DEFINITE and leaders is not None:
                    leaders.failed(queue or "", url)  # unreachable, refused, or lost: not there
                if self.urls[start % n] == url:  # the rotation does not begin with it again
                    start += 1
            if not self.retry.should_retry(failure, safety, attempt):
                raise error
            await asyncio.sleep(
                self.retry.delay(
                    failure, attempt, retry_after_of(error), attempt < n, self.rng.random()
                )
            )

    async def stream(self, base: str, path: str, chunk: int) -> AsyncGenerator[bytes, None]:
        """The body of ``GET base + path`` in chunks as it arrives, from that node only (no
        retry; the read timeout applies between chunks, not to the whole body). A non-2xx
        answer raises its error; a connection that fails `ConnectFailed`, one cut while
        reading `ResponseLost`."""
        session = self.pool.get()
        try:
            async with session.get(
                URL(base + path, encoded=True),
                headers=self.sign("GET", base + path, None),
                timeout=aiohttp.ClientTimeout(total=None, sock_read=self.timeout),
            ) as resp:
                if resp.status >= 300:
                    content = await resp.read()
                    retry_after = _retry_after(resp.headers.get("Retry-After"))
                    raise _error_of(resp.status, content, retry_after)
                async for data in resp.content.iter_chunked(chunk):
                    yield data
        except aiohttp.ClientConnectorError as e:
            raise ConnectFailed(f"connect: {e.strerror or e}", base, type(e).__name__) from None
        except (aiohttp.ClientError, TimeoutError) as e:
            raise ResponseLost(f"{type(e).__name__}: {e}", base, type(e).__name__) from None

    def sign(self, method: str, url: str, data: bytes | None) -> dict[str, str]:
        """The signature headers of a request (none without an access key)."""
        if self.access_key is None:
            return {}
        return self.access_key.sign(method, url, data)

    async def attempt(
        self, url: str, method: str, path: str, data: bytes | None, timeout: float
    ) -> tuple[int, bytes, float | None, str | None]:
        """One HTTP exchange: (status, body bytes, ``Retry-After`` seconds or None, the
        ``Cmq-Leader`` header or None)."""
        session = self.pool.get()
        headers = self.sign(method, url + path, data)
        if data is not None:
            headers.update(_JSON_HEADERS)
        try:
            async with session.request(
                method,
                URL(url + path, encoded=True),
                data=data,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as resp:
                content = await resp.read()
                retry_after = _retry_after(resp.headers.get("Retry-After"))
                return resp.status, content, retry_after, resp.headers.get(LEADER_HEADER)
        except aiohttp.ClientConnectorError as e:
            reason = type(e).__name__
            raise ConnectFailed(f"connect: {e.strerror or e}", url, reason) from None
        except TimeoutError:
            message = f"TimeoutError: no answer within {timeout:g}s"
            raise ResponseLost(message, url, "timeout") from None
        except aiohttp.ClientError as e:
            reason = type(e).__name__
            raise ResponseLost(f"{reason}: {e}", url, reason) from None


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _error_of(status: int, content: bytes, retry_after: float | None) -> ServerError:
    """The error for a non-2xx answer (``{"error": {"code", "message"}}`` when the body is
    that; ``HttpError`` otherwise)."""
    code, message = "HttpError", f"HTTP {status}"
    try:
        err = orjson.loads(content).get("error") if content else None
    except (orjson.JSONDecodeError, AttributeError):
        err = None
    if isinstance(err, dict):
        code = str(err.get("code") or code)
        message = str(err.get("message") or message)
    return server_error(status, code, message, retry_after)
