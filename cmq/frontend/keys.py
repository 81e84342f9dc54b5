"""An HTTP front end's copy of its node's key ring (`cmq.frontend.key_calls`), so the front end
checks signed requests itself with the node's own code (`api.auth.guard`), and its ``/v1/keys``
administration, carried to the node.

Contract, the bound on a revoked key: the copy is polled every `POLL_SECONDS` (one small frame
while nothing changed), and a request is checked against a copy whose last poll was *sent* at
most `BOUND_SECONDS` before the request reached the front end (`current`, awaited by the auth
middleware: when the copy is older, the request waits for a new poll instead of being checked
against stale keys). A poll sent after the node applied a change brings that change, so a key
deleted or a grant revoked on the node (its catalog applied the change) is refused by every front
end of that node for every request that arrives more than `BOUND_SECONDS` (1 s) later. A request
that cannot get a current copy within `WAIT_SECONDS` (its node does not answer) is refused with
503 ``Unavailable``. The frames of an open stream (`api.stream`) are checked against the copy as
the polls keep it, held to the arrival of the stream's opening request: a revocation reaches them
within `POLL_SECONDS` plus a poll's round trip while the node answers. A key changed through
this front end's own ``/v1/keys`` is copied again before the change's answer, so the next
request sees it.

Secrets are held in memory only and never logged; the copy holds no sealed secret and the
cluster secret never reaches a front end (only the credential derived from it).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Final, Protocol, TypeVar

from cmq.errors import CmqError, Unavailable
from cmq.frontend.base import Call
from cmq.frontend.key_calls import (
    CopyKeys,
    CreateKey,
    DeleteKey,
    GrantKey,
    KeyCopy,
    KeyEntry,
    RevokeKey,
)
from cmq.grants import ADMIN, KeyGrant, KeyRecord

R = TypeVar("R")

POLL_SECONDS: Final = 0.2
"""How often a front end asks its node whether the keys changed."""
BOUND_SECONDS: Final = 1.0
"""A request is checked against a copy polled at most this long before it arrived (see above)."""
WAIT_SECONDS: Final = 10.0
"""How long a request waits for a current copy before 503 ``Unavailable``."""
_CLUSTER_GRANTS: Final = (KeyGrant("*", (ADMIN,)),)
_ARRIVED: ContextVar[float | None] = ContextVar("cmq_front_end_request_arrived", default=None)
"""When the request being checked reached the front end (set by `KeyCopyRing.current`)."""


def _retrieve(poll: asyncio.Future[None]) -> None:
    """Mark a finished poll's failure as seen (its waiters, if any, got it)."""
    if not poll.cancelled():
        poll.exception()


class NodeCalls(Protocol):
    """Runs a call in the node process (`cmq.frontend.proxy.ServiceProxy.call`)."""

    def __call__(self, call: Call[R]) -> Awaitable[R]: ...


class KeyCopyRing:
    """The key look-ups of `api.auth.guard.KeyLookup` and the administration of
    `api.auth.key_routes.KeyAdministration`, for a front end (see the module docstring).
    `refresh` once before serving, then run `keep` for as long as the front end serves; give
    `current` to the auth middleware (`api.auth.guard.AuthConfig.current`)."""

    def __init__(
        self,
        call: NodeCalls,
        clock: Callable[[], float] = time.monotonic,
        wait_seconds: float = WAIT_SECONDS,
    ) -> None:
        self._call = call
        self._clock = clock
        self._wait = wait_seconds
        self._generation = -1
        self._fresh_at = -float("inf")
        self._cluster: KeyEntry | None = None
        self._keys: dict[str, KeyEntry] = {}
        self._polling: asyncio.Future[None] | None = None

    async def refresh(self) -> None:
        """Poll the node once (joining a poll under way, which was sent earlier): take its
        keys if they changed since this copy."""
        if self._polling is None or self._polling.done():
            self._polling = asyncio.ensure_future(self._poll())
            self._polling.add_done_callback(_retrieve)  # its waiters may all have gone
        await asyncio.shield(self._polling)

    def close(self) -> None:
        """Cancel a poll under way (the front end is closing)."""
        if self._polling is not None:
            self._polling.cancel()

    async def _poll(self) -> None:
        sent = self._clock()
        got: KeyCopy | None = await self._call(CopyKeys(self._generation))
        if got is not None:
            self._generation = got.generation
            self._cluster = got.cluster
            self._keys = {k.id: k for k in got.keys}
        self._fresh_at = max(self._fresh_at, sent)

    async def keep(self) -> None:
        """`refresh` every `POLL_SECONDS` until cancelled (a failed poll is retried: until one
        succeeds the copy ages, and requests wait for it)."""
        while True:
            await asyncio.sleep(POLL_SECONDS)
            with contextlib.suppress(CmqError):
                await self.refresh()

    async def current(self) -> None:
        """Return once the copy was polled at most `BOUND_SECONDS` before now, the request's
        arrival (polling again when it is older; the look-ups of this request's task then hold
        the copy to that arrival). `Unavailable` after `WAIT_SECONDS` without such a copy; a
        poll's own `CmqError` as raised."""
        arrived = self._clock()
        _ARRIVED.set(arrived)
        if self._fresh_at >= arrived - BOUND_SECONDS:
            return
        try:
            async with asyncio.timeout(self._wait):
                while self._fresh_at < arrived - BOUND_SECONDS:
                    await self.refresh()
        except TimeoutError:
            raise Unavailable(
                f"this front end got no current copy of the access keys from its node in "
                f"{self._wait:g}s"
            ) from None

    def _fresh(self) -> None:
        since = _ARRIVED.get()
        since = self._clock() if since is None else since
        if self._fresh_at < since - BOUND_SECONDS:
            age = self._clock() - self._fresh_at
            raise Unavailable(
                f"this front end's copy of the access keys is {age:.1f}s old (its node has not "
                f"answered); signed requests wait until it is at most {BOUND_SECONDS:g}s old"
            )

    # -- api.auth.guard.KeyLookup ------------------------------------------------------------------
    def secret_of(self, key_id: str) -> str | None:
        """The key's secret; None when unknown. `Unavailable` when the copy is too old."""
        self._fresh()
        if self._cluster is not None and key_id == self._cluster.id:
            return self._cluster.secret
        entry = self._keys.get(key_id)
        return None if entry is None else entry.secret

    def grants_of(self, key_id: str) -> tuple[KeyGrant, ...] | None:
        """The key's grants; None when unknown. `Unavailable` when the copy is too old."""
        self._fresh()
        if self._cluster is not None and key_id == self._cluster.id:
            return _CLUSTER_GRANTS
        entry = self._keys.get(key_id)
        return None if entry is None else entry.grants

    # -- api.auth.key_routes.KeyAdministration -----------------------------------------------------
    def list(self) -> list[KeyRecord]:
        """Every stored key, by id, as last copied (no secret, sealed or not)."""
        return [
            KeyRecord(k.id, "", k.grants, k.created_ms)
            for k in sorted(self._keys.values(), key=lambda k: k.id)
        ]

    async def create(self, grants: tuple[KeyGrant, ...]) -> tuple[KeyRecord, str]:
        created = await self._call(CreateKey(grants))
        await self.refresh()
        return created.record, created.secret

    async def grant(self, key_id: str, grant: KeyGrant) -> KeyRecord:
        record = await self._call(GrantKey(key_id, grant))
        await self.refresh()
        return record

    async def revoke(self, key_id: str, pattern: str) -> KeyRecord:
        record = await self._call(RevokeKey(key_id, pattern))
        await self.refresh()
        return record

    async def delete(self, key_id: str) -> None:
        await self._call(DeleteKey(key_id))
        await self.refresh()
