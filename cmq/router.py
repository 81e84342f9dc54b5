"""`Router`: queue -> data group -> the group's leader, here or on a peer.

A call runs where its group's leader is: on this node (`LeaderOps.execute`) or forwarded over the
peer connection (`MultiRaft.call`, the call and its reply in `cmq.rpc` encoding). A leader change
is retried with jittered exponential backoff until the request deadline, then `Unavailable`.

An attempt whose outcome is unknown (a leader change after the change reached the log, a
forwarded call without an answer) is repeated only when the call says a repeat is harmless
(`Call.retry_unknown`); otherwise `OutcomeUnknown` is raised at once. A send is therefore never
repeated after such an attempt unless every message carries a dedup id. If the deadline passes
after an attempt with an unknown outcome, `OutcomeUnknown` is raised rather than `Unavailable`.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any, TypeVar, cast

from cmq.errors import CmqError, OutcomeUnknown, QueueNotFound, Unavailable
from cmq.meta import CatalogMachine
from cmq.ops import LeaderOps
from cmq.rpc import RETRY, Call, decode_call, decode_error, encode_error
from raftlog.errors import NotLeader, PeerUnavailable, ProposalDropped
from raftlog.errors import Overloaded as RaftOverloaded
from raftlog.runtime import MultiRaft
from raftlog.runtime.multiraft import RemoteCallError

R = TypeVar("R")

FIRST_BACKOFF = 0.02
"""Seconds before the first retry; doubled per retry up to `MAX_BACKOFF`, each wait drawn
uniformly from its upper half (jitter: nodes retrying the same leader change spread out)."""
MAX_BACKOFF = 0.2


class Router:
    """Routes typed calls to their group's leader (see the module docstring)."""

    def __init__(
        self,
        node_id: int,
        raft: MultiRaft,
        catalog: CatalogMachine,
        ops: LeaderOps,
        request_timeout: float,
    ) -> None:
        self._id = node_id
        self._raft = raft
        self._catalog = catalog
        self._ops = ops
        self._timeout = request_timeout
        self._rng = random.Random()

    def group_of(self, name: str) -> int:
        """The data group holding queue ``name``; `QueueNotFound` if the catalog lacks it."""
        group = self._catalog.group_of(name)
        if group is None:
            raise QueueNotFound(f"queue {name!r} does not exist")
        return group

    async def run(self, call: Call[R]) -> R:
        """Run ``call`` at its group's leader, retrying leader changes until the deadline."""
        return await self.run_attempts(call.group, lambda: call)

    async def run_attempts(self, group: int, attempt: Callable[[], Call[R]]) -> R:
        """Like `run`, with each attempt's call built anew by ``attempt()`` (a retried send
        gets fresh message ids)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        delay = FIRST_BACKOFF
        unknown: OutcomeUnknown | None = None  # an attempt that may have taken effect
        call: Call[R] | None = None  # the latest attempt
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                if unknown is not None:
                    raise unknown
                raise Unavailable(f"no leader for group {group} answered in time")
            leader = self._raft.leader_of(group)
            try:
                if leader == self._id:
                    call = attempt()
                    return await self._ops.execute(call)
                if leader:
                    call = attempt()
                    reply = await self._raft.call(leader, call.encode(), timeout=remaining)
                    return call.decode_reply(reply)
            except RemoteCallError as e:
                err = decode_error(e.payload)
                if isinstance(err, OutcomeUnknown):
                    unknown = err
                elif err is not None:
                    raise err from None
            except (NotLeader, ProposalDropped, PeerUnavailable, RaftOverloaded) as e:
                if e.outcome_unknown:
                    unknown = OutcomeUnknown(f"{e}; the outcome is unknown")
            if unknown is not None and call is not None and not call.retry_unknown():
                raise unknown
            pause = self._rng.uniform(delay / 2, delay)
            await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
            delay = min(delay * 2, MAX_BACKOFF)

    async def serve(self, peer: int, payload: bytes) -> bytes:
        """Serve a call forwarded by ``peer`` (we should lead its group); failures are
        answered with `cmq.rpc.encode_error` (``Retry``: route it again)."""
        try:
            call = decode_call(payload)
            leader = self._raft.leader_of(call.group)
            if leader != self._id:
                raise NotLeader(leader)
            return await self._answer(cast("Call[Any]", call))
        except CmqError as e:
            raise RemoteCallError(encode_error(e.code, e.message)) from None
        except (NotLeader, ProposalDropped, RaftOverloaded) as e:
            code = OutcomeUnknown.code if e.outcome_unknown else RETRY
            raise RemoteCallError(encode_error(code, str(e))) from None

    async def _answer(self, call: Call[R]) -> bytes:
        return call.encode_reply(await self._ops.execute(call))
