"""Quiescence: idle groups stop ticking and heartbeating; proposals, silent peers and dropped
links wake them (three MultiRaft nodes on loopback, real WALs)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from raftlog.core import Role
from raftlog.runtime import MultiRaft
from raftlog.runtime.applog import AppendLog
from raftlog.runtime.group import GroupDriver
from raftlog.runtime.liveness import PeerLiveness
from tests.raftlog.runtime.nodes import (
    closing,
    make_nodes,
    propose_retrying,
    until,
    wait_applied,
    wait_leader,
)

GROUPS = tuple(range(1, 7))


async def start(tmp: Path, **runtime: int) -> dict[int, MultiRaft]:
    nodes = make_nodes(tmp, runtime=runtime)
    for nd in nodes.values():
        await nd.start()
        for g in GROUPS:
            await nd.open_group(g, AppendLog(), voters=list(nodes))
    for g in GROUPS:
        await wait_leader(nodes, g)
    return nodes


def all_quiet(nodes: dict[int, MultiRaft]) -> bool:
    return all(nd.quiesced() == GROUPS for nd in nodes.values())


def test_peer_liveness_suspects_a_silent_peer_once_and_clears_on_a_frame() -> None:
    lv = PeerLiveness(3)
    assert lv.tick([2, 3]) == {}  # tick 1: both first seen now
    assert lv.tick([2, 3]) == {}
    lv.heard(2)  # at tick 2
    assert lv.tick([2, 3]) == {}
    assert lv.tick([2, 3]) == {3: 3}  # tick 4: node 3 silent for three ticks, suspect now
    assert lv.suspects() == (3,)
    assert lv.tick([2, 3]) == {2: 3}  # tick 5: node 2 (heard at tick 2) turns suspect; 3 not new
    assert lv.suspects() == (2, 3)
    lv.heard(3)
    assert lv.is_live(3) and not lv.is_live(2)
    assert lv.down(3) == 0
    assert not lv.is_live(3)
    with pytest.raises(ValueError):
        PeerLiveness(0)


async def test_idle_groups_quiesce_and_stop_heartbeating(tmp_path: Path) -> None:
    nodes = await start(tmp_path)
    async with closing(nodes):
        assert await until(lambda: all_quiet(nodes), 15), [n.quiesced() for n in nodes.values()]
        terms = {(n, g): nd.status(g).term for n, nd in nodes.items() for g in GROUPS}
        sent = {n: nd.transport.stats() for n, nd in nodes.items()}
        await asyncio.sleep(1.0)
        assert all_quiet(nodes)
        assert {(n, g): nd.status(g).term for n, nd in nodes.items() for g in GROUPS} == terms
        ticks = 1.0 / nodes[1].cfg.tick_interval
        for n, nd in nodes.items():
            for peer, st in nd.transport.stats().items():
                frames = st.frames_sent - sent[n][peer].frames_sent
                # Only the node's liveness frame per tick: no beats, no acks, whatever the
                # number of groups.
                assert frames <= 1.3 * ticks, (n, peer, frames, ticks)


async def test_a_proposal_wakes_a_quiesced_group_which_quiesces_again(tmp_path: Path) -> None:
    nodes = await start(tmp_path)
    async with closing(nodes):
        assert await until(lambda: all_quiet(nodes), 15)
        for i in range(5):
            await propose_retrying(nodes, 3, f"cmd-{i}".encode())
        await wait_applied(nodes, 3, 5)
        assert await until(lambda: all_quiet(nodes), 15)
        leader = await wait_leader(nodes, 3)
        assert nodes[leader].status(3).term == min(nd.status(3).term for nd in nodes.values())


async def test_a_stalled_leader_node_is_suspected_and_replaced_within_a_second(
    tmp_path: Path,
) -> None:
    """The leader's process stops working (its connections stay open, like a paused process):
    followers must not wait on quiesced groups forever."""
    nodes = await start(tmp_path)
    async with closing(nodes):
        assert await until(lambda: all_quiet(nodes), 15)
        leads = {g: await wait_leader(nodes, g) for g in GROUPS}
        victim = max(set(leads.values()), key=lambda n: list(leads.values()).count(n))
        task = nodes[victim].ticker.task
        assert task is not None
        task.cancel()  # no more ticks nor liveness frames from it; its links stay up
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        others = {n: nd for n, nd in nodes.items() if n != victim}
        mine = [g for g, n in leads.items() if n == victim]

        def replaced() -> bool:
            return all(
                any(nd.status(g).role is Role.LEADER for nd in others.values()) for g in mine
            )

        assert await until(replaced, 10)
        elapsed = loop.time() - t0
        # 20 ms ticks: 5 ticks to suspect, then 10-19 ticks of election timeout.
        assert elapsed < 1.0, elapsed
        await propose_retrying(others, mine[0], b"after")


async def test_followers_of_a_silent_leader_campaign_once_it_is_suspect_not_a_timeout_later(
    tmp_path: Path,
) -> None:
    """A leader whose process stops (a pause: its links stay open) is replaced as soon as node
    liveness suspects it, not a randomized election timeout later: its followers campaign
    within a few ticks, in rank order. Counted in the followers' own ticks, so a slow machine
    does not make it pass or fail: with an election timeout of 40-79 ticks and suspicion after
    8, a follower waiting out its timeout needs 40 at least."""
    nodes = await start(tmp_path, election_tick=40, liveness_ticks=8)
    async with closing(nodes):
        leads = {g: await wait_leader(nodes, g) for g in GROUPS}
        victim = leads[1]
        mine = [g for g, n in leads.items() if n == victim]
        others = {n: nd for n, nd in nodes.items() if n != victim}
        task = nodes[victim].ticker.task
        assert task is not None
        task.cancel()  # no more ticks, heartbeats nor liveness frames from it; links stay up
        start_ticks = {n: nd.ticker.ticks for n, nd in others.items()}

        def replaced() -> bool:
            return all(
                any(nd.status(g).role is Role.LEADER for nd in others.values()) for g in mine
            )

        assert await until(replaced, 20)
        waited = max(nd.ticker.ticks - start_ticks[n] for n, nd in others.items())
        # Suspect after 8 silent ticks (the last frame may have come a tick or two before the
        # stop), then 1-4 ticks by rank, a pre-vote and a vote.
        assert waited <= 20, waited
        await propose_retrying(others, mine[0], b"after")


async def test_a_closed_leader_node_is_replaced_and_groups_quiesce_without_it_only_later(
    tmp_path: Path,
) -> None:
    nodes = await start(tmp_path)
    async with closing(nodes):
        assert await until(lambda: all_quiet(nodes), 15)
        leads = {g: await wait_leader(nodes, g) for g in GROUPS}
        victim = leads[1]
        await nodes[victim].close()
        others = {n: nd for n, nd in nodes.items() if n != victim}
        for g in GROUPS:
            await wait_leader(others, g)
        await asyncio.sleep(0.5)
        # A group with a replica on a dead node never quiesces (it must keep trying it).
        assert all(nd.quiesced() == () for nd in others.values())


async def test_quiesced_groups_leave_the_tick_walk_and_each_wake_up_puts_them_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = await start(tmp_path)
    async with closing(nodes):

        def walks_nothing() -> bool:
            return all_quiet(nodes) and all(nd.ticker.awake == 0 for nd in nodes.values())

        assert await until(walks_nothing, 15), [nd.ticker.awake for nd in nodes.values()]
        ticks = dict.fromkeys(nodes, 0)
        woke = dict.fromkeys(nodes, 0)
        for n, nd in nodes.items():
            g = nd.groups[3]

            def counting(n: int = n, tick: Callable[[], None] = g.tick) -> None:
                ticks[n] += 1
                tick()

            assert g.on_wake is not None  # the ticker tracks every group opened

            def waking(
                d: GroupDriver, n: int = n, on_wake: Callable[[GroupDriver], None] = g.on_wake
            ) -> None:
                woke[n] += 1
                on_wake(d)

            monkeypatch.setattr(g, "tick", counting)
            monkeypatch.setattr(g, "on_wake", waking)

        # A proposal puts the leader's group back on the walk at once (it is ticked until it
        # quiesces again); the append it sends wakes the followers' replicas (a message from a
        # peer), which are back on their walks.
        leader = await wait_leader(nodes, 3)
        fut = nodes[leader].groups[3].propose(b"wake")
        assert nodes[leader].ticker.awake == 1 and woke[leader] == 1
        await fut
        assert await until(lambda: all(woke.values()) and ticks[leader] > 0, 5), (woke, ticks)
        assert await until(walks_nothing, 15)

        # A suspect or lost peer (liveness) wakes every group of the node onto the walk.
        follower = next(n for n in nodes if n != leader)
        before = ticks[follower]
        nodes[follower].ticker.wake_all(0)
        assert nodes[follower].ticker.awake == len(GROUPS)
        nodes[follower].ticker.tick()
        assert ticks[follower] == before + 1
        assert await until(walks_nothing, 15)

        # A dropped group leaves the walk for good, even when woken.
        g = nodes[follower].groups[3]
        await nodes[follower].drop_group(3)
        before = ticks[follower]
        g.wake()
        nodes[follower].ticker.tick()
        assert 3 not in nodes[follower].groups and ticks[follower] == before
        assert nodes[follower].ticker.awake == 0
