"""A chaos run's fault schedule (`nemesis`): a sequence of *episodes* drawn from the seed, each
one fault (sometimes two of different categories at once; a disk fault only within the quorum's
spare: `tests.chaos.diskfaults.disk_overlap_ok`), held for a while, then healed in reverse order
(the network first), then a short quiet gap. Every fault is a nemesis operation of the history;
`tests.chaos.runner.run_once` runs the schedule under the workload.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from tests.chaos.cluster import ChaosCluster
from tests.chaos.diskfaults import DISK, OPERATOR_NEEDED, disk_overlap_ok
from tests.chaos.faults import RESTART_FAILED, FaultKind, Injected
from tests.chaos.history import History
from tests.chaos.probe import Episode

Say = Callable[[str], None]

OVERLAP = "overlap:"
"""Fault counts of episodes that ran two faults at once, keyed ``overlap:<kind>+<kind>``."""


async def nemesis(
    cluster: ChaosCluster,
    kinds: list[FaultKind],
    rng: random.Random,
    *,
    duration: float,
    history: History,
    overlap: float,
    say: Say,
    episodes: list[Episode] | None = None,
) -> tuple[Counter[str], list[str], list[str]]:
    """Inject faults for ``duration`` seconds; every fault is healed before returning. Each
    fault injected is appended to ``episodes`` (when given), with its injection time."""
    counts: Counter[str] = Counter()
    errors: list[str] = []
    restart_failures: list[str] = []
    end = time.monotonic() + duration
    while kinds and time.monotonic() < end:
        await asyncio.sleep(rng.uniform(0.5, 2.0))
        first = rng.choices(kinds, [k.weight for k in kinds])[0]
        episode = [first]
        if not first.exclusive and rng.random() < overlap:
            others = [
                k
                for k in kinds
                if not k.exclusive
                and k.category != first.category
                and disk_overlap_ok(first, k, cluster.n)
            ]
            if others:
                episode.append(rng.choice(others))
                # A disk fault goes first: the other then knows which node is damaged.
                episode.sort(key=lambda k: k.category != DISK)
        active: list[tuple[Any, Injected]] = []
        injected_at: list[float] = []
        for kind in episode:
            op = history.invoke("nemesis", "fault", "", 0, time.monotonic())
            try:
                inj = await kind.inject(cluster, rng)
            except Exception as e:
                errors.append(f"{kind.name}: {type(e).__name__}: {e}")
                history.complete(op, time.monotonic(), "failed", errors[-1])
                say(f"fault {kind.name} failed to inject: {e!r}")
                continue
            if inj is None:
                history.complete(op, time.monotonic(), "failed", f"{kind.name}: no target")
                continue
            op.node = inj.nodes[0] if inj.nodes else 0
            injected_at.append(inj.at or time.monotonic())
            counts[kind.name] += 1
            if inj.kind != kind.name:  # a variant (clock-jump, clock-drift): counted as well
                counts[inj.kind] += 1
            active.append((op, inj))
            say(f"inject {inj.description}; hold {inj.hold:.1f}s")
        if len(active) > 1:
            counts[OVERLAP + "+".join(inj.kind for _, inj in active)] += 1
        if episodes is not None:
            for at, (_, inj) in zip(injected_at, active, strict=True):
                episodes.append(
                    Episode(at, inj.kind, inj.description, tuple(inj.nodes), len(active) > 1)
                )
        if active:
            hold = max(inj.hold for _, inj in active)
            await asyncio.sleep(min(hold, max(0.5, end - time.monotonic())))
        # The network first (a node restarted behind a partition could not become ready), then
        # in reverse order: a process fault on a damaged node heals before its disk fault.
        order = [*active[::-1]]
        for op, inj in sorted(order, key=lambda a: a[1].category != "network"):
            try:
                extra = await inj.heal()
            except Exception as e:
                extra = f"heal failed: {type(e).__name__}: {e}"
                errors.append(f"{inj.kind}: {extra}")
            history.complete(
                op, time.monotonic(), "ok", inj.description + (f"; {extra}" if extra else "")
            )
            if RESTART_FAILED in extra or OPERATOR_NEEDED in extra:
                restart_failures.append(f"after {inj.description}: {extra}")
            say(f"heal {inj.description}{'; ' + extra if extra else ''}")
    return counts, errors, restart_failures
