"""Failover time: from SIGKILL / SIGSTOP of a queue's group leader to the first confirmed send
on that queue that was *issued after* the fault.

A prober starts a new send every ``interval`` seconds (each to a random surviving node, each
with its own generous timeout, many in flight at once), so the figure has that resolution and
measures when the cluster serves again, not when one unlucky request gives up. After each trial
the victim is restarted (or resumed) and must catch up before the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import random
import shutil
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from cmq.client import NO_RETRY, Client
from cmq.errors import CmqError
from tests.chaos.cluster import ChaosCluster, snapshot_code
from tests.chaos.probe import percentile
from tests.chaos.runner import create_queues

__all__ = ["failover_trials", "percentile"]

QUEUE = "failover"


async def _probe_until_confirmed(
    client: Client,
    urls: list[str],
    t_fault: float,
    *,
    rng: random.Random,
    interval: float,
    limit: float,
    errors: Counter[str] | None = None,
) -> float:
    """Seconds from ``t_fault`` to the first ok send started at or after it (inf: none).

    Failed probes are counted by error in ``errors`` (when given), for the report of a trial
    that does not recover."""
    done = asyncio.Event()
    first: list[float] = []
    counter = itertools.count()

    async def one() -> None:
        n = next(counter)
        node = client.derive([rng.choice(urls)], timeout=limit, retry=NO_RETRY)
        try:
            await node.send(QUEUE, [f"probe-{t_fault:.3f}-{n}"])
        except CmqError as e:
            if errors is not None:
                errors[f"{node.urls[0]} {type(e).__name__}: {str(e)[:80]}"] += 1
            return
        if not done.is_set():
            first.append(time.monotonic() - t_fault)
            done.set()

    tasks: set[asyncio.Task[None]] = set()
    deadline = t_fault + limit
    while not done.is_set() and time.monotonic() < deadline:
        if len(tasks) < 64:
            t = asyncio.create_task(one())
            tasks.add(t)
            t.add_done_callback(tasks.discard)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), interval)
    for t in list(tasks):
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return first[0] if first else math.inf


def _keep_logs(cluster: ChaosCluster, root: Path, label: str) -> Path:
    """Copy every node's log beside ``root`` (which is removed at the end) and return where."""
    dest = root.parent / f"{root.name}-kept-{label}"
    dest.mkdir(parents=True, exist_ok=True)
    for nid in cluster.ids:
        src = cluster.log_path(nid)
        if src.exists():
            shutil.copy2(src, dest / src.name)
    return dest


async def failover_trials(
    root: Path,
    nodes: int,
    kinds: list[str],
    trials: int,
    *,
    say: Callable[[str], None] = print,
    interval: float = 0.02,
    limit: float = 30.0,
) -> dict[str, list[float]]:
    """``trials`` measurements per kind (``kill``, ``pause``), alternating kinds."""
    shutil.rmtree(root, ignore_errors=True)
    cluster = ChaosCluster(root, nodes, groups=1, code=snapshot_code(root / "code"))
    rng = random.Random(7)
    out: dict[str, list[float]] = {k: [] for k in kinds}
    try:
        await cluster.start()
        await create_queues(cluster, (QUEUE,))
        assert cluster.client is not None
        for trial in range(trials):
            for kind in kinds:
                await cluster.wait_ready(120)
                victim = await cluster.leader_of_queue(QUEUE)
                urls = [cluster.http[n] for n in cluster.ids if n != victim]
                # The queue works before the fault (and the leader is settled).
                probe = await _probe_until_confirmed(
                    cluster.client, urls, time.monotonic(), rng=rng, interval=0.2, limit=60
                )
                if math.isinf(probe):
                    raise TimeoutError("the queue does not accept sends before the fault")
                t_fault = time.monotonic()
                if kind == "kill":
                    cluster.kill(victim)
                else:
                    cluster.pause(victim)
                errors: Counter[str] = Counter()
                took = await _probe_until_confirmed(
                    cluster.client,
                    urls,
                    t_fault,
                    rng=rng,
                    interval=interval,
                    limit=limit,
                    errors=errors,
                )
                out[kind].append(took)
                say(f"failover {kind} trial {trial + 1}/{trials}: leader {victim}, {took:.3f}s")
                if math.isinf(took):
                    kept = _keep_logs(cluster, root, f"{kind}-{trial + 1}")
                    say(f"  no recovery: node logs kept in {kept}; probe errors:")
                    for what, n in errors.most_common(12):
                        say(f"    {n:5d} x {what}")
                if kind == "kill":
                    cluster.start_node(victim)
                else:
                    cluster.resume(victim)
                await cluster.wait_ready(120)
                await cluster.caught_up(victim, 60)
    finally:
        await cluster.stop()
    shutil.rmtree(root, ignore_errors=True)
    return out
