"""Load shapes as pure schedules (no Locust import): which user count applies at a run time.

``steps`` raises the user count in equal-length steps (default 10, 20, 40 users); ``soak``
holds one count for the whole run. Both end after ``LOADTEST_SECONDS``, so a run is bounded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

SHAPES = ("steps", "soak", "none")
DEFAULT_SECONDS = 60.0
DEFAULT_STEPS = (10, 20, 40)
DEFAULT_SOAK_USERS = 20
DEFAULT_SPAWN_RATE = 10.0


@dataclass(frozen=True, slots=True)
class Stage:
    """Run ``users`` users (spawned at ``spawn_rate`` per second) until ``until_s`` of run time."""

    until_s: float
    users: int
    spawn_rate: float


def steps_plan(steps: Sequence[int], total_s: float, spawn_rate: float) -> list[Stage]:
    """Equal-length stages, one per entry of ``steps``, together lasting ``total_s``."""
    if not steps or total_s <= 0 or spawn_rate <= 0 or any(u < 1 for u in steps):
        raise ValueError(f"bad steps plan: steps={list(steps)} total={total_s} rate={spawn_rate}")
    step_s = total_s / len(steps)
    return [Stage((i + 1) * step_s, users, spawn_rate) for i, users in enumerate(steps)]


def soak_plan(users: int, total_s: float, spawn_rate: float) -> list[Stage]:
    """One stage of ``users`` users for ``total_s``."""
    return steps_plan([users], total_s, spawn_rate)


def target(plan: Sequence[Stage], run_time_s: float) -> tuple[int, float] | None:
    """``(users, spawn_rate)`` for ``run_time_s``, or ``None`` once the plan is over (stop)."""
    for stage in plan:
        if run_time_s < stage.until_s:
            return stage.users, stage.spawn_rate
    return None


def plan_from_env(env: Mapping[str, str] | None = None) -> list[Stage] | None:
    """The plan chosen by ``LOADTEST_SHAPE`` (``None`` for ``none``: Locust's -u/-r/-t apply).

    Variables: ``LOADTEST_SECONDS`` (60), ``LOADTEST_STEPS`` (``10,20,40``),
    ``LOADTEST_USERS`` (soak, 20), ``LOADTEST_SPAWN_RATE`` (10 users/s).
    """
    env = os.environ if env is None else env
    shape = env.get("LOADTEST_SHAPE", "steps").strip() or "steps"
    if shape not in SHAPES:
        raise ValueError(f"LOADTEST_SHAPE={shape!r}: expected one of {', '.join(SHAPES)}")
    if shape == "none":
        return None
    total_s = float(env.get("LOADTEST_SECONDS", "") or DEFAULT_SECONDS)
    spawn_rate = float(env.get("LOADTEST_SPAWN_RATE", "") or DEFAULT_SPAWN_RATE)
    if shape == "soak":
        users = int(env.get("LOADTEST_USERS", "") or DEFAULT_SOAK_USERS)
        return soak_plan(users, total_s, spawn_rate)
    raw = env.get("LOADTEST_STEPS", "").strip()
    steps = [int(s) for s in raw.split(",") if s.strip()] if raw else list(DEFAULT_STEPS)
    return steps_plan(steps, total_s, spawn_rate)
