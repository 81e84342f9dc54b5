"""Fault points on rare paths, in the style of FoundationDB's ``BUGGIFY``.

``if buggify("router.forward_delay"): ...`` marks a place where the code may take a rare but
legal path (a slow hop, a dropped frame, a retry at once). Outside a simulation `buggify` is
False after one global check: production never takes those paths. A deterministic simulation
turns the points on for one run with `enabled` and a seeded generator: each named site is
*armed* for the run with chance ``site_chance`` when first reached, and an armed site then fires
with chance ``fire_chance`` each time it is reached. Rare paths so get exercised often in some
runs and never in others, and the same seed fires the same sites at the same moments.

Sites (name: where, and the rare path taken when it fires):

=========================  ====================================================================
``router.forward_delay``   `cmq.routing.router.Router`: a forwarded attempt waits up to 0.3 s
                           before it is sent (a slow hop: it may land after a leader change)
``router.retry_at_once``   `cmq.routing.router.Router`: a retry skips its backoff
``router.forget_hint``     `cmq.routing.router.Router`: the leader hint of a group not hosted
                           here is forgotten after an answer (the next call asks a replica)
``disk.slow_fsync``        the whole-node simulator's log disks (`tests.nodesim.faults`): a
                           write's completion reaches the node up to 0.2 s late (in order)
``net.drop_frame``         the whole-node simulator's transport: a frame is lost, unnoticed
``raft.early_snapshot``    the whole-node simulator: a group is asked to snapshot now
``client.abandon``         the whole-node simulator's clients: a call's client goes away
                           mid-call (its outcome is unknown; the node carries on)
=========================  ====================================================================

Nothing here reads a clock or the operating system's randomness; the generator is the caller's.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["Buggify", "buggify", "current", "enabled", "uniform"]

SITE_CHANCE = 0.25
"""Chance that a site is armed for a run (FoundationDB's is 25 %)."""
FIRE_CHANCE = 0.05
"""Chance that an armed site fires each time it is reached (FoundationDB's is 5 %)."""


@dataclass(slots=True)
class Buggify:
    """The fault points of one simulated run (see the module docstring)."""

    rng: random.Random
    site_chance: float = SITE_CHANCE
    fire_chance: float = FIRE_CHANCE
    armed: dict[str, bool] = field(default_factory=dict)
    """Each site reached so far: armed for this run or not."""
    fired: Counter[str] = field(default_factory=Counter)
    """How often each site fired."""

    def __call__(self, site: str) -> bool:
        armed = self.armed.get(site)
        if armed is None:
            armed = self.armed[site] = self.rng.random() < self.site_chance
        if not armed or self.rng.random() >= self.fire_chance:
            return False
        self.fired[site] += 1
        return True


class _Slot:
    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active: Buggify | None = None


_slot = _Slot()


def buggify(site: str) -> bool:
    """Whether the fault point ``site`` fires now: always False unless a simulation enabled
    the points (`enabled`)."""
    active = _slot.active
    if active is None:
        return False
    return active(site)


def uniform(lo: float, hi: float) -> float:
    """A draw from the run's generator for a fault's size (how long a delay is); ``lo`` outside
    a simulation."""
    active = _slot.active
    return lo if active is None else active.rng.uniform(lo, hi)


def current() -> Buggify | None:
    """The run's fault points, while a simulation has them enabled."""
    return _slot.active


@contextmanager
def enabled(
    rng: random.Random, *, site_chance: float = SITE_CHANCE, fire_chance: float = FIRE_CHANCE
) -> Iterator[Buggify]:
    """Turn the fault points on for the ``with`` block, drawing from ``rng`` (one simulated
    run at a time per process)."""
    if _slot.active is not None:
        raise RuntimeError("buggify is already enabled (one simulated run at a time)")
    active = _slot.active = Buggify(rng, site_chance, fire_chance)
    try:
        yield active
    finally:
        _slot.active = None
