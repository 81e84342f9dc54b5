"""`raftlog.buggify`: inert outside a simulation, seeded and per-site inside one."""

from __future__ import annotations

import random

import pytest

from raftlog import buggify


def test_fault_points_are_off_outside_a_simulation() -> None:
    assert buggify.current() is None
    assert not any(buggify.buggify("router.forward_delay") for _ in range(10_000))
    assert buggify.uniform(0.5, 9.0) == 0.5


def test_a_run_arms_some_sites_and_fires_them_rarely() -> None:
    with buggify.enabled(random.Random(1), site_chance=0.5, fire_chance=0.1) as bugs:
        fired = {
            f"site{i}": sum(buggify.buggify(f"site{i}") for _ in range(2_000)) for i in range(40)
        }
    assert buggify.current() is None
    armed = {s for s, on in bugs.armed.items() if on}
    assert 8 < len(armed) < 32
    for site, n in fired.items():
        if site in armed:
            assert 120 < n < 300, (site, n)
        else:
            assert n == 0
    assert dict(bugs.fired) == {s: n for s, n in fired.items() if n}


def test_the_same_seed_fires_the_same_points() -> None:
    def run(seed: int) -> list[bool]:
        with buggify.enabled(random.Random(seed)):
            return [buggify.buggify(f"s{i % 7}") for i in range(3_000)]

    assert run(3) == run(3)
    assert run(3) != run(4)


def test_one_simulation_at_a_time() -> None:
    with (
        buggify.enabled(random.Random(0)),
        pytest.raises(RuntimeError, match="already"),
        buggify.enabled(random.Random(1)),
    ):
        pass
    assert buggify.current() is None
