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

from cmq.node.membership import (
    LEADERLESS_BEFORE_DROP,
    SILENT_LEADER_TIMEOUTS,
    Identity,
    Membership,
)
from raftlog.core import ConfState


@dataclass
class _Status:
    conf: ConfState


@dataclass
class _CoreConfig:
    election_tick: int = 10


@dataclass
class _Core:
    """What `Membership._leader_silent` reads of the Raft core."""

    lead: int = 0
    election_elapsed: int = 0
    cfg: _CoreConfig = field(default_factory=_CoreConfig)


@dataclass
class _RawNode:
    raft: _Core = field(default_factory=_Core)


@dataclass
class _Driver:
    quiesced: bool = False
    wakes: int = 0
    raw: _RawNode = field(default_factory=_RawNode)

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
        self.driver.raw.raft.lead = self.leader
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


def test_a_leader_unheard_for_long_is_only_a_memory() -> None:
    """Seed 26113 (docs/chaos.md): restarted mid-move, a replica heard the new leader once and
    was removed before it caught up; recovery kept it out of elections (its log below its peers'
    floor), so it never campaigned and never forgot that leader, which never spoke to it
    again. Ticking and unheard for `SILENT_LEADER_TIMEOUTS` election timeouts, the leader it
    knows counts as none: the leaderless wait runs and the catalog confirms the drop."""
    raft, router, clock = _Raft(ConfState((1, 4, 5)), leader=1), _Router(hosted=[1]), _Clock()
    core = raft.driver.raw.raft
    m = _membership(raft, router, clock)

    async def scenario() -> None:
        core.election_elapsed = SILENT_LEADER_TIMEOUTS * core.cfg.election_tick - 1
        assert not await m._confirmed_gone(2)  # heard recently enough: led
        clock.now += 2 * LEADERLESS_BEFORE_DROP
        assert not await m._confirmed_gone(2)
        assert router.reads == 0
        core.election_elapsed += 1  # silent: leaderless from now
        assert not await m._confirmed_gone(2)
        clock.now += LEADERLESS_BEFORE_DROP / 2
        core.election_elapsed = 0  # its leader speaks again: a member after all
        assert not await m._confirmed_gone(2)
        core.election_elapsed = 100
        assert not await m._confirmed_gone(2)  # the wait starts anew
        clock.now += LEADERLESS_BEFORE_DROP
        assert await m._confirmed_gone(2)  # and the catalog places only group 1 here
        assert router.reads == 1

    asyncio.run(scenario())


def test_a_quiesced_replica_is_woken_not_taken_for_leaderless() -> None:
    """A quiesced replica does not tick, so its count of ticks says nothing: it is woken
    (its election timer runs again) and keeps its data meanwhile."""
    raft, router, clock = _Raft(ConfState((1, 2, 3, 5)), leader=2), _Router(), _Clock()
    raft.driver.quiesced = True
    raft.driver.raw.raft.election_elapsed = 1000
    m = _membership(raft, router, clock)
    assert not asyncio.run(m._confirmed_gone(1))
    assert raft.driver.wakes == 1 and router.reads == 0


def test_a_leader_of_the_group_is_never_silent() -> None:
    """This replica leads the group (the catalog moved it away; it hands leadership over
    first): it keeps its data whatever its counters say."""
    raft, router, clock = _Raft(ConfState((1, 2, 5)), leader=5), _Router(), _Clock()
    raft.driver.raw.raft.election_elapsed = 1000
    m = _membership(raft, router, clock)
    clock.now += 2 * LEADERLESS_BEFORE_DROP
    assert not asyncio.run(m._confirmed_gone(1))
    assert router.reads == 0


@dataclass
class _Catalog:
    """What one membership round reads of the catalog: initialized, hosting nothing here,
    this node not registered yet."""

    initialized: bool = True
    nodes: dict[int, Any] = field(default_factory=dict)
    placements: dict[int, Any] = field(default_factory=dict)

    def node_info(self, node: int) -> None:
        return None

    def hosted_by(self, node: int) -> tuple[int, ...]:
        return ()

    def moving(self) -> tuple[int, ...]:
        return ()

    def preferred_leaders(self) -> dict[int, int]:
        return {}


def test_a_failing_registration_does_not_keep_the_round_from_dropping() -> None:
    """A round runs registration and founding before the drop: one of them failing (e.g. the
    catalog's leader did not answer a registration in time) still lets the drop run, and the
    round reports the failure afterwards."""
    raft, clock = _Raft(ConfState((1, 2, 3))), _Clock()  # no longer in its configuration
    raft.groups = {0: None, 1: None}  # type: ignore[attr-defined]
    raft.peers = lambda: ()  # type: ignore[attr-defined]
    raft.leader_of = lambda group: 2 if group == 0 else 0  # type: ignore[method-assign]
    dropped: list[int] = []

    class _FailingRouter:
        async def run(self, call: Any) -> None:
            raise TimeoutError("no answer from the catalog's leader")

    async def drop(g: int) -> None:
        dropped.append(g)

    m = _membership(raft, _Router(), clock)
    m._catalog = _Catalog()  # type: ignore[assignment]
    m._router = _FailingRouter()  # type: ignore[assignment]
    m._drop = drop

    async def round_() -> None:
        try:
            await m.tick()
        except TimeoutError:
            return
        raise AssertionError("the registration's failure was not reported")

    asyncio.run(round_())
    assert dropped == [1]
