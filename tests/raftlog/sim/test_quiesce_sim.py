"""Quiescence under the runtime simulator: idle groups stop ticking and wake through crashes,
partitions, loss and reordering; planted bugs (suspect peers wake nothing; a replica still
recovering from a restart accepts quiescence) are caught."""

from __future__ import annotations

import os

import pytest

from raftlog.sim.quiesce_sim import PlantedNoWake, PlantedQuiesceRecovering, QuiescentSim
from raftlog.sim.runtime_sim import RuntimeSim, RuntimeSimConfig
from tests.seeds import rotating_seeds

SEEDS = int(os.environ.get("QUIESCE_SIM_SEEDS", "4"))
pytestmark = pytest.mark.usefixtures("quiet_logging")


def run(sim_class: type[RuntimeSim], seed: int, cfg: RuntimeSimConfig) -> RuntimeSim:
    sim = sim_class(seed, cfg)
    try:
        sim.loop.run_until_complete(sim.main())
    finally:
        sim.loop.close()
    return sim


@pytest.mark.slow
@pytest.mark.parametrize("nodes", [3, 5])
def test_quiescence_survives_faults(nodes: int) -> None:
    cfg = RuntimeSimConfig(nodes=nodes, groups=3, seconds=20.0)
    quiesces = wakes = acked = 0
    for seed in rotating_seeds(f"quiesce-{nodes}", SEEDS // 2):
        sim = run(QuiescentSim, seed, cfg)
        assert isinstance(sim, QuiescentSim)
        r = sim.result
        assert not r.violations, (r.seed, r.violations[:3], r.trace[-15:])
        quiesces += sim.quiesces
        wakes += sim.wakes
        acked += r.acked
    # Not vacuous: groups went idle and were woken by suspect peers, and the load ran.
    assert quiesces > 10 and wakes > 0 and acked > 500, (quiesces, wakes, acked)


def test_a_seed_with_quiescence_replays_exactly() -> None:
    cfg = RuntimeSimConfig(groups=2, seconds=8.0)
    a, b = (run(QuiescentSim, 11, cfg) for _ in range(2))
    assert (a.result.digest, a.result.acked, a.result.trace) == (
        b.result.digest,
        b.result.acked,
        b.result.trace,
    )


@pytest.mark.slow
def test_suspect_peers_that_wake_nothing_are_caught() -> None:
    cfg = RuntimeSimConfig(groups=3, seconds=20.0)
    caught = next(
        (
            s
            for s in range(7100, 7110)
            if any("stayed quiesced" in v for v in run(PlantedNoWake, s, cfg).result.violations)
        ),
        None,
    )
    assert caught is not None, "quiesced groups under a dead leader went unnoticed in 10 seeds"


@pytest.mark.slow
def test_a_recovering_replica_that_accepts_quiescence_is_caught() -> None:
    # The bug the failover runner found: a restarted replica whose first recovery answers were
    # lost while its links came up quiesced and stopped asking, so it stayed out of elections
    # and the loss of the leader left the group without a quorum.
    cfg = RuntimeSimConfig(groups=3, seconds=20.0)
    caught = next(
        (
            s
            for s in range(7100, 7110)
            if any(
                "while recovering" in v
                for v in run(PlantedQuiesceRecovering, s, cfg).result.violations
            )
        ),
        None,
    )
    assert caught is not None, "a quiesced recovering replica went unnoticed in 10 seeds"
