"""The replica-move simulator (`tests.cmq.movesim`): the real catalog and step rule survive
crashes at every step; a planted bug (the old replica leaves first) is caught."""

from __future__ import annotations

from cmq.catalog.placement import next_step
from tests.cmq.movesim import Sim, remove_first, run_seeds


def test_moves_survive_crashes_at_every_step() -> None:
    assert run_seeds(range(40)) == []


def test_every_run_completes_its_moves() -> None:
    sim = Sim(7, rule=next_step)
    assert sim.run() == []
    cat = sim.catalog
    assert not cat.hosted_by(1) and all(cat.hosted_by(n) for n in (2, 3, 4, 5))
    assert all(len(p.replicas) == 3 and p.moved for p in cat.placements.values())


def test_a_replica_removed_before_its_replacement_votes_is_caught() -> None:
    bad = run_seeds(range(10), remove_first)
    assert any("voters:" in v for v in bad), bad
