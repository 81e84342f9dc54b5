"""When a node drops its replica of a group the catalog no longer places on it
(`cmq.node.membership.Membership._confirmed_gone`).

The whole-node simulator found the bug this guards against (seed 5049 at five nodes): a move
onto node 5 was cancelled by a drain of node 5 after node 5 had been promoted to voter; the
catalog stopped placing the group there at once, the leader's removal of node 5 was lost with
the leader's power, and node 5, asking the catalog, deleted its log while it was still a voter
(``lost entries it had acknowledged``). A replica that has a leader is a member of that
leader's configuration: it keeps its data until it applies its removal, or has had no leader
for `LEADERLESS_BEFORE_DROP` seconds (removed while cut off, it never learns of its removal)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from cmq.node.membership import LEADERLESS_BEFORE_DROP, Identity, Membership
from raftlog.core import ConfState


@dataclass
class _Status:
    conf: ConfState


@dataclass
class _Driver:
    quiesced: bool = False
    wakes: int = 0

    def wake(self) -> None:
        self.quiesced = False
        self.wakes += 1


@dataclass
class _Raft:
    conf: ConfState
    leader: int = 0
    driver: _Driver = field(default_factory=_Driver)

    def status(self, group: int) -> _Status:
        return _Status(self.conf)

    def group(self, group: int) -> _Driver:
        return self.driver

    def leader_of(self, group: int) -> int:
        return self.leader


@dataclass
class _Router:
    hosted: list[int] = field(default_factory=list)
    reads: int = 0

    async def run(self, call: Any) -> list[int]:
        self.reads += 1
        return self.hosted


class _Clock:
    """A `raftlog.runtime.host.Clock` whose monotonic time the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now

    def wall_ms(self) -> int:
        return round(self.now * 1000)


def _membership(raft: _Raft, router: _Router, clock: _Clock) -> Membership:
    async def nothing(*_: object) -> None:
        return None

    return Membership(
        me=Identity(5, "n5:7000", "", ("/d",), ""),
        raft=raft,  # type: ignore[arg-type]
        catalog=None,  # type: ignore[arg-type]
        router=router,  # type: ignore[arg-type]
        open_group=nothing,
        drop_group=nothing,
        founders=(),
        groups=1,
        replication=3,
        meta_voters=3,
        interval=0.2,
        clock=clock,
    )


def test_a_replica_no_longer_in_its_configuration_goes_at_once() -> None:
    raft, router, clock = _Raft(ConfState((1, 2, 3))), _Router(), _Clock()
    assert asyncio.run(_membership(raft, router, clock)._confirmed_gone(1))
    assert router.reads == 0


def test_a_led_replica_keeps_its_data_whatever_the_catalog_says() -> None:
    raft, router, clock = _Raft(ConfState((1, 2, 3, 5)), leader=2), _Router(), _Clock()
    m = _membership(raft, router, clock)

    async def looks() -> list[bool]:
        out = []
        for _ in range(10):
            out.append(await m._confirmed_gone(1))
            clock.now += 2.0
        return out

    assert not any(asyncio.run(looks()))


def test_a_led_replica_of_a_quiesced_group_ticks_again_to_check_its_leader() -> None:
    """Removed while its group was quiesced, a replica hears nothing more and keeps its last
    leader: woken, its election timer runs (it hears that leader again, or loses it)."""
    raft, router, clock = _Raft(ConfState((1, 2, 3, 5)), leader=2), _Router(), _Clock()
    raft.driver.quiesced = True
    m = _membership(raft, router, clock)
    assert not asyncio.run(m._confirmed_gone(1))
    assert raft.driver.wakes == 1 and not raft.driver.quiesced
    assert not asyncio.run(m._confirmed_gone(1))
    assert raft.driver.wakes == 1  # awake: nothing to do
    assert router.reads == 0


def test_a_replica_removed_while_cut_off_goes_once_leaderless_for_a_while() -> None:
    raft, router, clock = _Raft(ConfState((1, 2, 3, 5))), _Router(hosted=[2]), _Clock()
    m = _membership(raft, router, clock)

    async def scenario() -> None:
        assert not await m._confirmed_gone(1)  # leaderless from now
        clock.now += LEADERLESS_BEFORE_DROP / 2
        assert not await m._confirmed_gone(1)
        raft.leader = 3  # an election ended: a member after all
        assert not await m._confirmed_gone(1)
        raft.leader = 0
        clock.now += LEADERLESS_BEFORE_DROP / 2
        assert not await m._confirmed_gone(1)  # the wait starts anew
        clock.now += LEADERLESS_BEFORE_DROP
        assert await m._confirmed_gone(1)  # and the catalog places group 1 elsewhere

    asyncio.run(scenario())


def test_the_catalog_still_placing_the_group_keeps_it() -> None:
    raft, router, clock = _Raft(ConfState((1, 2, 3, 5))), _Router(hosted=[1]), _Clock()
    m = _membership(raft, router, clock)

    async def scenario() -> None:
        assert not await m._confirmed_gone(1)
        clock.now += 2 * LEADERLESS_BEFORE_DROP
        assert not await m._confirmed_gone(1)
        assert router.reads == 1

    asyncio.run(scenario())
