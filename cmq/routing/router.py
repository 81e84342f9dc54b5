"""`Router`: queue -> data group -> the group's leader, here or on a peer.

A call runs where its group's leader is: on this node (`LeaderOps.execute`) or forwarded over the
peer connection (`MultiRaft.call`, the call and its reply in `cmq.routing.rpc` encoding). A leader
change is retried with jittered exponential backoff until the request deadline, then `Unavailable`.

An attempt whose outcome is unknown (a leader change after the change reached the log, a
forwarded call without an answer) is repeated only when the call says a repeat is harmless
(`Call.retry_unknown`); otherwise `OutcomeUnknown` is raised at once. A send is therefore never
repeated after such an attempt unless every message carries a dedup id. If the deadline passes
after an attempt with an unknown outcome, `OutcomeUnknown` is raised rather than `Unavailable`.

A data group this node does not host (it runs only the groups it is a replica of) is routed to
the leader a replica last named, else to its live replicas in turn (from the catalog); a replica
that does not lead answers ``Retry`` with the leader it knows, so asking any live replica finds
the leader in one more hop. `CatalogCall`s (node and move commands) are proposed to the meta
group here, their refusals raised as errors. A `ReleaseCall` is about the node it is sent to and
is answered there, whichever node leads (`cmq.admin.peer_releases`).

A forwarded attempt is never sent to, and never keeps waiting on, a peer that has gone quiet:
the runtime hears from every live peer at least twice a second (heartbeats, clock probes), so a
peer silent for `silence` seconds (two election timeouts) is taken for paused or gone. While an
attempt waits, it is abandoned (`MultiRaft.call`'s ``abandon``; an unknown outcome) as soon as
its peer goes quiet or, for a group hosted here, the local replica names another leader. A peer
whose attempt went unanswered is avoided for `SUSPECT_SECONDS`, and the hint that led there is
dropped (also when the request is cancelled, e.g. its client went away). An attempt to a peer
that keeps talking is not cut short: a leader holding a send back for want of room
(backpressure) is waited for, never answered with a duplicate-prone retry.

While this node's clock is not trusted (``clock_ok``, see `cmq.node.clockguard`), it runs nothing
as a leader: local attempts and calls forwarded here are answered "not the leader" until the
guard has handed its groups' leadership away.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any, TypeVar, cast

from cmq.catalog import META_GROUP
from cmq.catalog.meta import CatalogMachine, Refused
from cmq.errors import CmqError, OutcomeUnknown, QueueNotFound, Unavailable, error_for
from cmq.failure import Failure
from cmq.routing.ops import LeaderOps
from cmq.routing.rpc import (
    RETRY,
    Call,
    CatalogCall,
    ReleaseCall,
    ReleaseInfo,
    decode_call,
    decode_failure,
    encode_failure,
)
from cmq.upgrade.features import KNOWN as SUPPORTED_FEATURES
from cmq.upgrade.features import PEER_FAILURES
from cmq.upgrade.release import PEER_PROTOCOL_MAX, PEER_PROTOCOL_MIN, RELEASE
from raftlog.buggify import buggify, uniform
from raftlog.errors import NotLeader, PeerUnavailable, ProposalDropped
from raftlog.errors import Overloaded as RaftOverloaded
from raftlog.runtime import Clock, MultiRaft, RemoteCallError

R = TypeVar("R")

FIRST_BACKOFF = 0.02
"""Seconds before the first retry; doubled per retry up to `MAX_BACKOFF`, each wait drawn
uniformly from its upper half (jitter: nodes retrying the same leader change spread out)."""
MAX_BACKOFF = 0.2
SUSPECT_SECONDS = 2.0
"""How long a peer whose attempt went unanswered (silent, or past the deadline) is avoided."""
CHECK_EVERY = 0.1
"""Seconds between two looks at a waiting forwarded attempt (is its peer still talking, still
the leader?)."""


def _always() -> bool:
    return True


class Router:
    """Routes typed calls to their group's leader (see the module docstring)."""

    def __init__(
        self,
        node_id: int,
        raft: MultiRaft,
        catalog: CatalogMachine,
        ops: LeaderOps,
        request_timeout: float,
        *,
        clock: Clock,
        election_timeout: float = 0.5,
        clock_ok: Callable[[], bool] = _always,
        rng: random.Random | None = None,
    ) -> None:
        """``clock``: this node's (`cmq.routing.clock.NodeClock`; its monotonic time marks
        how long a suspect is avoided); ``rng``: the retry jitter's random numbers (a seeded
        one under simulation)."""
        self._id = node_id
        self._clock = clock
        self._raft = raft
        self._catalog = catalog
        self._ops = ops
        self._timeout = request_timeout
        self._rng = rng if rng is not None else random.Random()
        self._hints: dict[int, int] = {}  # group not hosted here -> the leader last named
        self._turn = 0
        self.silence = 2 * election_timeout
        """A peer unheard for longer is taken for paused or gone (not routed to)."""
        self._suspects: dict[int, float] = {}  # peer -> monotonic time until it is avoided
        self.clock_ok = clock_ok
        """Whether this node's clock may stamp times (else it leads nothing)."""

    def usable(self, peer: int) -> bool:
        """Whether ``peer`` may be sent a call: heard from within `silence` seconds and not
        a suspect."""
        until = self._suspects.get(peer)
        if until is not None:
            if until > self._clock.monotonic():
                return False
            del self._suspects[peer]
        return self._raft.silent_for(peer) <= self.silence

    def _suspect(self, peer: int) -> None:
        self._suspects[peer] = self._clock.monotonic() + SUSPECT_SECONDS

    def _leader(self, group: int) -> int:
        """Where to send a call for ``group`` (0: nowhere yet, wait and look again): its known
        leader when hosted here and usable; else the leader a replica named, if usable; else
        the next usable replica in the catalog."""
        if group in self._raft.groups:
            lead = self._raft.leader_of(group)
            return lead if lead in (0, self._id) or self.usable(lead) else 0
        hint = self._hints.get(group)
        if hint:
            if self.usable(hint):
                return hint
            del self._hints[group]
        p = self._catalog.placement(group)
        hosts = [n for n in (p.hosts() if p is not None else ()) if n != self._id]
        hosts = [n for n in hosts if self.usable(n)]
        if not hosts:
            return 0
        self._turn += 1
        return hosts[self._turn % len(hosts)]

    def known_leader(self, group: int) -> int:
        """The node this node believes leads ``group`` (0: unknown): the local replica's view
        when hosted here, else the leader a replica last named. Cheap (two dict lookups), for
        the leader hint the HTTP API answers with (`cmq.node.queue_node.QueueNode.leader_http`)."""
        if group in self._raft.groups:
            return self._raft.leader_of(group)
        return self._hints.get(group, 0)

    def _watch(self, group: int, peer: int) -> Callable[[], str | None]:
        """The ``abandon`` check of a forwarded attempt to ``peer`` for ``group``."""

        def abandon() -> str | None:
            silent = self._raft.silent_for(peer)
            if silent > self.silence:
                self._suspect(peer)
                return f"node {peer} silent for {silent:.1f} s"
            if group in self._raft.groups:
                lead = self._raft.leader_of(group)
                if lead not in (0, peer):
                    return f"group {group} is led by node {lead} now"
            return None

        return abandon

    def group_of(self, name: str) -> int:
        """The data group holding queue ``name``; `QueueNotFound` if the catalog lacks it."""
        group = self._catalog.group_of(name)
        if group is None:
            raise QueueNotFound(f"queue {name!r} does not exist")
        return group

    async def run(self, call: Call[R]) -> R:
        """Run ``call`` at its group's leader, retrying leader changes until the deadline."""
        return await self.run_attempts(call.group, lambda: call, wait=call.wait_budget())

    async def run_attempts(
        self, group: int, attempt: Callable[[], Call[R]], *, wait: float = 0.0
    ) -> R:
        """Like `run`, with each attempt's call built anew by ``attempt()`` (a retried send
        gets fresh message ids). The deadline is the request timeout plus ``wait``, the time
        the call may spend waiting at the leader by design (`Call.wait_budget`)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout + wait
        delay = FIRST_BACKOFF
        unknown: OutcomeUnknown | None = None  # an attempt that may have taken effect
        call: Call[R] | None = None  # the latest attempt
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                if unknown is not None:
                    raise unknown
                raise Unavailable(f"no leader for group {group} answered in time")
            leader = self._leader(group)
            try:
                if leader == self._id:
                    if not self.clock_ok():
                        raise NotLeader(0, "this node's clock is off; it does not lead")
                    call = attempt()
                    return await self._execute(call)
                if leader:
                    if buggify("router.forward_delay"):  # a slow hop: may land after a change
                        await asyncio.sleep(min(uniform(0.0, 0.3), remaining))
                        remaining = max(0.001, deadline - loop.time())
                    call = attempt()
                    try:
                        reply = await self._raft.call(
                            leader,
                            call.encode(),
                            timeout=remaining,
                            abandon=self._watch(group, leader),
                            check_every=CHECK_EVERY,
                        )
                    except asyncio.CancelledError:
                        self._drop_hint(group, leader)
                        raise
                    except PeerUnavailable as e:
                        if e.outcome_unknown and deadline - loop.time() <= 0:
                            self._suspect(leader)  # unanswered for the whole deadline
                        raise
                    if group not in self._raft.groups and not buggify("router.forget_hint"):
                        self._hints[group] = leader  # it answered: it leads
                    return call.decode_reply(reply)
            except RemoteCallError as e:
                failure = decode_failure(e.payload)
                self._note_hint(group, failure.leader)
                err = None if failure.code == RETRY else failure.error()
                if isinstance(err, OutcomeUnknown):
                    unknown = err
                elif err is not None:
                    raise err from None
            except (NotLeader, ProposalDropped, PeerUnavailable, RaftOverloaded) as e:
                self._hints.pop(group, None)
                if e.outcome_unknown:
                    unknown = OutcomeUnknown(f"{e}; the outcome is unknown")
            if unknown is not None and call is not None and not call.retry_unknown():
                raise unknown
            pause = self._rng.uniform(delay / 2, delay)
            if buggify("router.retry_at_once"):
                pause = 0.0
            await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
            delay = min(delay * 2, MAX_BACKOFF)

    async def serve(self, peer: int, payload: bytes) -> bytes:
        """Serve a call forwarded by ``peer`` (we should lead its group); failures are
        answered with a `Failure` (`cmq.routing.rpc.encode_failure`; ``Retry``: route it
        again, with the leader this node knows of)."""
        hint = 0
        try:
            call = decode_call(payload)
            if isinstance(call, ReleaseCall):  # about this node: answered here, leader or not
                info = ReleaseInfo(
                    RELEASE, PEER_PROTOCOL_MIN, PEER_PROTOCOL_MAX, tuple(sorted(SUPPORTED_FEATURES))
                )
                return call.encode_reply(info)
            hosted = call.group in self._raft.groups
            leader = self._raft.leader_of(call.group) if hosted else 0
            if leader != self._id:
                hint = leader
                raise NotLeader(leader)
            if not self.clock_ok():
                raise NotLeader(0, "this node's clock is off; it does not lead")
            return await self._answer(cast("Call[Any]", call))
        except CmqError as e:
            raise RemoteCallError(self._failure(Failure.of(e))) from None
        except (NotLeader, ProposalDropped, RaftOverloaded) as e:
            if e.outcome_unknown:
                failure = Failure(OutcomeUnknown.code, str(e))
            else:
                failure = Failure(RETRY, str(e), None, hint)  # for the caller's next try
            raise RemoteCallError(self._failure(failure)) from None

    def _failure(self, failure: Failure) -> bytes:
        """``failure`` as this node answers it: packed once every node reads that form."""
        return encode_failure(failure, packed=self._catalog.feature_enabled(PEER_FAILURES))

    def _drop_hint(self, group: int, peer: int) -> None:
        if self._hints.get(group) == peer:
            del self._hints[group]

    def _note_hint(self, group: int, hint: int) -> None:
        if group in self._raft.groups:
            return
        if hint and hint != self._id:
            self._hints[group] = hint
        else:
            self._hints.pop(group, None)

    async def _execute(self, call: Call[R]) -> R:
        if isinstance(call, CatalogCall):
            return cast(R, await self._catalog_command(call.command))
        return await self._ops.execute(call)

    async def _catalog_command(self, command: bytes) -> object:
        """Propose a catalog command here (the meta leader); a `Refused` result is raised."""
        res = await self._ops.propose(META_GROUP, command)
        if isinstance(res, Refused):
            raise error_for(res.code, res.message)
        return res

    async def _answer(self, call: Call[R]) -> bytes:
        return call.encode_reply(await self._execute(call))
