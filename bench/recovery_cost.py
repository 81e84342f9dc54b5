"""What the rollback guard costs an ordinary restart (docs/chaos.md, raftlog/core/recovery.py).

Three `QueueNode`s in one process on loopback (one data group, 20 ms ticks). Each trial stops
node 3 (the largest id: its peers dial it, so it also waits for their redial backoff), keeps it
down for 0.5x to 1.5x ``--down`` seconds (at random), starts it again on the same data, and
records from its start: when it knew a leader in every group, and when it had finished recovery
in every group (it may vote again; `QueueNode.is_ready`). The guard's extra wait is the
difference.

    python bench/recovery_cost.py [--trials 10] [--down 3]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from cmq.node.queue_node import QueueNode  # noqa: E402
from raftlog.transport.peer import TransportConfig  # noqa: E402
from tests.cmq.helpers import configs, wait_until  # noqa: E402


async def trials(n: int, down: float) -> list[tuple[float, float]]:
    root = Path(tempfile.mkdtemp(prefix="cmq-recovery-cost-"))
    cfgs = configs(root)
    nodes = {nid: QueueNode(cfg) for nid, cfg in cfgs.items()}
    for node in nodes.values():
        await node.start()
    out = []
    rng = random.Random(1)
    try:
        await wait_until(lambda: all(x.is_ready() for x in nodes.values()), 60)
        for _ in range(n):
            await nodes[3].close()
            await asyncio.sleep(rng.uniform(down / 2, down * 1.5))
            nodes[3] = node = QueueNode(cfgs[3])
            start = time.monotonic()
            await node.start()
            groups = sorted(node.raft.groups)
            led = recovered = 0.0
            while not recovered:
                now = time.monotonic() - start
                if not led and all(node.raft.leader_of(g) for g in groups):
                    led = now
                if led and not any(node.raft.recovering(g) for g in groups):
                    recovered = now
                await asyncio.sleep(0.005)
            out.append((led, recovered))
            print(f"leader known {led * 1000:6.0f} ms, may vote {recovered * 1000:6.0f} ms")
            await wait_until(node.is_ready, 30)
    finally:
        for node in nodes.values():
            await node.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--down", type=float, default=3.0)
    a = ap.parse_args()
    got = asyncio.run(trials(a.trials, a.down))
    led = [x[0] for x in got]
    extra = [x[1] - x[0] for x in got]
    print(
        f"redial backoff max {TransportConfig().backoff_max}s, down ~{a.down}s,"
        f" {a.trials} restarts: leader known"
        f" p50 {statistics.median(led) * 1000:.0f} ms max {max(led) * 1000:.0f} ms; recovery's"
        f" extra wait p50 {statistics.median(extra) * 1000:.0f} ms"
        f" max {max(extra) * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
