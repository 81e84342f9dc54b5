"""A failure at a group's leader as the node the client called receives it: two `Router`s, the
caller's forwarding to the leader's `Router.serve` (no sockets between them). The leader answers
in the form the flag ``peer_failures`` allows (`cmq.routing.rpc.encode_failure`): before it is
enabled, the JSON every release reads, which loses a leader's ``retry_after``; once it is, the
front-end socket's `cmq.failure.Failure`, which carries it."""

from __future__ import annotations

from typing import Any, cast

import pytest

from cmq.catalog.meta import CatalogMachine
from cmq.errors import Overloaded, QueueNotFound
from cmq.routing.ops import LeaderOps
from cmq.routing.router import Router
from cmq.routing.rpc import PurgeCall
from cmq.upgrade.features import PEER_FAILURES
from raftlog.runtime import MultiRaft
from raftlog.runtime.config import RemoteCallError
from raftlog.runtime.host import SYSTEM_CLOCK

GROUP = 1
LEADER = 3


class _Placement:
    def hosts(self) -> tuple[int, ...]:
        return (1, 2, LEADER)


class _Catalog:
    def __init__(self, enabled: set[str]) -> None:
        self.enabled = enabled

    def placement(self, group: int) -> _Placement:
        return _Placement()

    def feature_enabled(self, name: str) -> bool:
        return name in self.enabled


class _Ops:
    """The leader's operations: every call raises ``error``."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def execute(self, call: Any) -> Any:
        raise self.error


class _Raft:
    """A node's runtime: ``groups`` it hosts (with their leader); ``call`` hands the payload to
    the leader's router, as the peer connection would."""

    def __init__(self, groups: dict[int, int], serve: Router | None = None) -> None:
        self.groups = groups
        self.serve = serve
        self.answers: list[bytes] = []

    def leader_of(self, group: int) -> int:
        return self.groups[group]

    def silent_for(self, peer: int) -> float:
        return 0.0

    async def call(self, peer: int, payload: bytes, timeout: float, **_: Any) -> bytes:
        assert peer == LEADER and self.serve is not None
        try:
            return await self.serve.serve(4, payload)
        except RemoteCallError as e:
            self.answers.append(e.payload)
            raise


def _router(node: int, raft: _Raft, catalog: _Catalog, ops: _Ops | None = None) -> Router:
    return Router(
        node,
        cast(MultiRaft, raft),
        cast(CatalogMachine, catalog),
        cast(LeaderOps, ops),
        2.0,
        clock=SYSTEM_CLOCK,
    )


def _pair(error: Exception, enabled: set[str]) -> tuple[Router, _Raft]:
    catalog = _Catalog(enabled)
    leader = _router(LEADER, _Raft({GROUP: LEADER}), catalog, _Ops(error))
    raft = _Raft({}, serve=leader)
    caller = _router(4, raft, catalog)
    caller._hints[GROUP] = LEADER  # a replica named it: every attempt goes there
    return caller, raft


@pytest.mark.parametrize("packed", [False, True], ids=["json", "packed"])
async def test_a_leaders_retry_after_reaches_the_caller_once_the_flag_is_enabled(
    packed: bool,
) -> None:
    busy = Overloaded("the group's proposal queue is full")
    busy.retry_after = 2.5
    caller, raft = _pair(busy, {PEER_FAILURES} if packed else set())
    with pytest.raises(Overloaded, match="proposal queue is full") as got:
        await caller.run(PurgeCall(GROUP, "q"))
    (answer,) = raft.answers
    assert answer.startswith(b"{") is not packed  # JSON until the flag, MessagePack after
    # The JSON form drops the leader's advice: the caller falls back on the class's own.
    assert got.value.retry_after == (2.5 if packed else Overloaded.retry_after)


@pytest.mark.parametrize("packed", [False, True], ids=["json", "packed"])
async def test_a_leaders_refusal_arrives_as_its_own_class(packed: bool) -> None:
    caller, _ = _pair(
        QueueNotFound("queue 'q' does not exist"), {PEER_FAILURES} if packed else set()
    )
    with pytest.raises(QueueNotFound, match="queue 'q' does not exist"):
        await caller.run(PurgeCall(GROUP, "q"))
