"""Running seeds: one seed through chaos and heal (`run_seed`), many in a row (`run_seeds`)."""

from __future__ import annotations

import traceback
from collections.abc import Iterable
from dataclasses import dataclass

from raftlog.errors import InvariantViolation
from raftlog.sim.checker import SafetyViolation
from raftlog.sim.outcome import SimConfig, SimResult, Violation
from raftlog.sim.simulation import TICK, Simulation


def run_seed(seed: int, config: SimConfig) -> SimResult:
    """Run one seed to completion (chaos, then heal) and report what happened."""
    sim = Simulation(seed, config)
    heal_steps = 0
    violation: Violation | None = None
    try:
        for _ in range(config.steps):
            sim.step()
        sim.heal()
        healed_at = sim.now
        deadline = sim.now + sim.heal_bound * TICK
        next_check = sim.now
        while True:
            if sim.now >= next_check:
                if sim.liveness_done():
                    sim.stats["heal_ticks"] = (sim.now - healed_at) // TICK
                    sim.stats["heal_bound"] = sim.heal_bound
                    break
                next_check = sim.now + TICK
            if sim.now > deadline:
                raise SafetyViolation(
                    "liveness",
                    f"not converged {sim.heal_bound} ticks after healing "
                    f"({config.heal_timeouts} election timeouts + catch-up "
                    f"{max(c.ticks for c in sim.catch_ups.values())}): "
                    f"{sim.liveness_report()}",
                )
            sim.step()
            heal_steps += 1
    except SafetyViolation as exc:
        violation = _violation(sim, exc.check, exc.detail)
    except InvariantViolation as exc:
        violation = _violation(sim, "core-invariant", str(exc))
    except Exception as exc:  # a core bug must be reported with its seed, never lost
        where = traceback.extract_tb(exc.__traceback__)[-1]
        violation = _violation(
            sim,
            "exception",
            f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno} in {where.name})",
        )
    stats = dict(sim.stats)
    stats.update({f"net_{k}": v for k, v in sim.net.stats.items()})
    stats["elections"] = len(sim.checker.leaders())
    return SimResult(
        seed=seed,
        steps=min(sim.step_no, config.steps),
        heal_steps=heal_steps,
        violation=violation,
        trace_digest=sim.trace_digest(),
        state_digest=sim.state_digest(),
        stats=tuple(sorted(stats.items())),
    )


def _violation(sim: Simulation, check: str, detail: str) -> Violation:
    return Violation(sim.seed, check, detail, sim.step_no, tuple(sim.trace))


@dataclass(frozen=True, slots=True)
class Summary:
    """The outcome of many seeds."""

    seeds: int
    steps: int
    total_steps: int
    violations: tuple[Violation, ...]

    def line(self) -> str:
        """``seeds=… steps=… violations=…`` (steps: chaos steps per seed)."""
        return (
            f"seeds={self.seeds} steps={self.steps} violations={len(self.violations)} "
            f"total_steps={self.total_steps}"
        )


def run_seeds(seeds: Iterable[int], config: SimConfig, *, stop_at_first: bool = False) -> Summary:
    """Run every seed in ``seeds`` (in order) with ``config``; collect the violations."""
    violations: list[Violation] = []
    count = 0
    total = 0
    for seed in seeds:
        result = run_seed(seed, config)
        count += 1
        total += result.steps + result.heal_steps
        if result.violation is not None:
            violations.append(result.violation)
            if stop_at_first:
                break
    return Summary(count, config.steps, total, tuple(violations))
