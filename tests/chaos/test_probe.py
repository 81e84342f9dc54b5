"""The probe's judgement of a fault (`tests.chaos.probe`): pure functions over recorded sends,
shown to catch a planted gap and to pass a clean one."""

from __future__ import annotations

import math

from tests.chaos.probe import (
    Episode,
    ProbeSend,
    judge,
    over_bound,
    recovery,
    summarize,
)

QUEUES = ["p0", "p1"]


def sends_every(
    interval: float, until: float, *, gaps: dict[str, tuple[float, float]]
) -> list[ProbeSend]:
    """A send every ``interval`` to each queue, each answered 10 ms later; a queue's sends
    started inside its gap (start, end) are refused, except that those begun in the gap
    succeed once it ends (the cluster serves again)."""
    out = []
    t = 0.0
    while t < until:
        for q in QUEUES:
            lo, hi = gaps.get(q, (math.inf, math.inf))
            if lo <= t < hi:
                out.append(ProbeSend(q, 1, t, t + 0.05, False, "Unavailable: no leader"))
            else:
                out.append(ProbeSend(q, 2, t, t + 0.01, True))
        t += interval
    return out


def kill(at: float, *, nodes: tuple[int, ...] = (1,), overlapped: bool = False) -> Episode:
    return Episode(at, "kill", f"SIGKILL node {nodes[0]}", nodes, overlapped)


def test_a_queue_that_serves_through_the_fault_costs_one_interval() -> None:
    sends = sends_every(0.02, 5.0, gaps={})
    took = recovery(sends, QUEUES, 1.005)
    assert 0.01 < took < 0.04


def test_the_worst_queue_decides_and_a_planted_gap_fails_the_bound() -> None:
    sends = sends_every(0.02, 10.0, gaps={"p1": (2.0, 4.2)})
    [r] = judge([kill(2.0)], sends, QUEUES)
    assert 2.2 <= r.seconds < 2.25, r.seconds
    assert "n1 Unavailable: no leader" in r.refusals
    assert over_bound([r], 1.5) == [r]
    assert over_bound([r], 2.5) == []


def test_only_single_node_faults_alone_in_their_episode_are_bound() -> None:
    sends = sends_every(0.02, 10.0, gaps={"p0": (1.0, 4.0)})
    rs = judge(
        [
            kill(1.0, overlapped=True),
            Episode(1.0, "partition", "isolate leader 1", (1, 2, 3), False),
            Episode(1.0, "power-loss", "power loss of all nodes", (1, 2, 3), False),
            Episode(1.0, "pause", "SIGSTOP node 2", (2,), False),
        ],
        sends,
        QUEUES,
    )
    assert [r.episode.label for r in over_bound(rs, 1.5)] == ["pause"]
    labels = summarize(rs)
    assert set(labels) == {"overlapped", "partition", "power-loss-all", "pause"}
    n, p50, p99, mx = labels["pause"]
    assert n == 1 and p50 == p99 == mx and mx > 2.9


def test_a_queue_that_never_confirms_again_is_infinite() -> None:
    sends = sends_every(0.02, 3.0, gaps={"p0": (1.0, 99.0)})
    [r] = judge([kill(1.0)], sends, QUEUES)
    assert math.isinf(r.seconds)
    assert over_bound([r], 1.5) == [r]
