"""`Router` behind a paused leader (the 5-node paused-minority stall of docs/chaos.md): over a
fake `MultiRaft` whose node 1 stops talking (paused: it never answers), node 2 is a live replica
that does not lead (answers ``Retry`` naming node 3) and node 3 leads. The forwarded calls run
through the runtime's own `CallWatchdog`, so the abandon checks are the production ones."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import msgspec
import orjson
import pytest

from cmq.catalog.meta import CatalogMachine
from cmq.errors import OutcomeUnknown
from cmq.routing.ops import LeaderOps
from cmq.routing.router import Router
from cmq.routing.rpc import RETRY, ProduceCall, PurgeCall
from raftlog.errors import PeerUnavailable
from raftlog.runtime import MultiRaft
from raftlog.runtime.config import RemoteCallError
from raftlog.runtime.host import SYSTEM_CLOCK
from raftlog.runtime.peerwatch import CallWatchdog

GROUP = 1


class _Placement:
    def hosts(self) -> tuple[int, ...]:
        return (1, 2, 3)


class _Catalog:
    def placement(self, group: int) -> _Placement:
        return _Placement()


class FakeRaft:
    """Node 4's view: ``hosted`` maps the groups it hosts to the leader it knows."""

    def __init__(self, hosted: dict[int, int] | None = None) -> None:
        self.leaders = dict(hosted or {})
        self.groups = dict.fromkeys(self.leaders)
        self.paused_at: dict[int, float] = {}
        self.delay: dict[int, float] = {}  # peer -> seconds it takes to answer (talking meanwhile)
        self.calls: list[int] = []
        self.leader = 3

    def leader_of(self, group: int) -> int:
        return self.leaders[group]

    def pause(self, peer: int) -> None:
        self.paused_at[peer] = time.monotonic()

    def silent_for(self, peer: int) -> float:
        at = self.paused_at.get(peer)
        return 0.0 if at is None else time.monotonic() - at

    async def call(
        self,
        peer: int,
        payload: bytes,
        timeout: float,
        *,
        abandon: Any = None,
        check_every: float = 0.2,
    ) -> bytes:
        self.calls.append(peer)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bytes] = loop.create_future()
        dog = CallWatchdog(fut, peer, abandon, check_every) if abandon else None
        expiry = loop.call_later(
            timeout, lambda: fut.done() or fut.set_exception(PeerUnavailable("timed out"))
        )
        if peer not in self.paused_at:
            loop.call_later(self.delay.get(peer, 0.005), self._answer, fut, peer)
        try:
            return await fut
        finally:
            expiry.cancel()
            if dog is not None:
                dog.cancel()

    def _answer(self, fut: asyncio.Future[bytes], peer: int) -> None:
        if fut.done():
            return
        if peer == self.leader:
            fut.set_result(msgspec.msgpack.encode(7))
        else:
            body = {"error": RETRY, "message": "not the leader", "leader": self.leader}
            fut.set_exception(RemoteCallError(orjson.dumps(body)))


class ProduceFake(FakeRaft):
    def _answer(self, fut: asyncio.Future[bytes], peer: int) -> None:
        if not fut.done() and peer == self.leader:
            fut.set_result(msgspec.msgpack.encode([]))
        else:
            super()._answer(fut, peer)


def _router(raft: FakeRaft, node_id: int = 4, timeout: float = 10.0) -> Router:
    return Router(
        node_id,
        cast(MultiRaft, raft),
        cast(CatalogMachine, _Catalog()),
        cast(LeaderOps, None),
        timeout,
        clock=SYSTEM_CLOCK,
        election_timeout=0.5,
    )


async def test_stale_hint_to_a_paused_leader_costs_at_most_its_silence() -> None:
    raft = FakeRaft()
    router = _router(raft)
    router._hints[GROUP] = 1  # the leader a replica named before node 1 was cut off
    raft.pause(1)
    start = time.monotonic()
    assert await router.run(PurgeCall(GROUP, "q")) == 7
    first = time.monotonic() - start
    assert first < 1.5, f"stalled {first:.2f} s behind the paused node"
    assert raft.calls[0] == 1 and raft.calls[-1] == 3
    # The next request goes straight to the leader: node 1 is silent, the hint names node 3.
    raft.calls.clear()
    start = time.monotonic()
    assert await router.run(PurgeCall(GROUP, "q")) == 7
    assert time.monotonic() - start < 0.3 and raft.calls == [3]


async def test_without_a_hint_no_attempt_goes_to_a_silent_replica() -> None:
    raft = FakeRaft()
    router = _router(raft)
    raft.paused_at[1] = time.monotonic() - 5  # paused long ago
    for _ in range(6):
        assert await router.run(PurgeCall(GROUP, "q")) == 7
        router._hints.clear()  # a fresh node each time: round robin over the replicas
    assert 1 not in raft.calls
    assert set(raft.calls) <= {2, 3}


@pytest.mark.parametrize("dedup", [False, True])
async def test_hosted_group_abandons_the_attempt_once_another_leader_is_known(
    dedup: bool,
) -> None:
    raft = ProduceFake(hosted={GROUP: 1})
    router = _router(raft, node_id=2)
    raft.pause(1)

    def elected() -> None:  # the local replica learns the new leader
        raft.leaders[GROUP] = 3

    asyncio.get_running_loop().call_later(0.6, elected)
    start = time.monotonic()
    call = ProduceCall(GROUP, b"produce", dedup_only=dedup)
    if dedup:  # a repeat is harmless: retried at the new leader
        assert await router.run(call) == []
        assert raft.calls == [1, 3]
    else:  # might have been stored by node 1: reported, never repeated
        with pytest.raises(OutcomeUnknown):
            await router.run(call)
        assert raft.calls == [1]
    assert time.monotonic() - start < 1.2


async def test_a_slow_leader_that_keeps_talking_is_waited_for_not_retried() -> None:
    """Backpressure: the leader holds the send for 2.5 s (longer than two election timeouts)
    while its heartbeats keep coming; the send is answered once, never repeated."""
    raft = ProduceFake(hosted={GROUP: 3})
    raft.delay[3] = 2.5
    router = _router(raft, node_id=2)
    assert await router.run(ProduceCall(GROUP, b"produce")) == []
    assert raft.calls == [3]


async def test_a_cancelled_attempt_drops_its_hint() -> None:
    raft = FakeRaft()
    raft.delay[1] = 30.0  # node 1 still talks but never answers this call
    router = _router(raft)
    router._hints[GROUP] = 1
    task = asyncio.ensure_future(router.run(PurgeCall(GROUP, "q")))
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert GROUP not in router._hints
