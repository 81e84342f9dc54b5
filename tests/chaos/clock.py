"""The ``clock`` fault: a node's wall clock jumps forward or back by seconds.

The node is killed and restarted on its data with ``CMQ_CLOCK_OFFSET_MS`` set (its clock source,
`cmq.ops.now_ms`, adds the offset), held, then killed and restarted with offset 0: two jumps,
one away and one back, each seen by the rest of the cluster as a skewed peer. Half of the time
the target is a group leader. Offsets are 1-10 s forward or back. Exclusive: no other fault
runs meanwhile.

What must hold whatever the clocks say: nothing acknowledged is lost and no message is
delivered again after its ack was confirmed (the checker's `lost` and `redelivered_after_ack`).
Lease windows are measured by the runner's clock while leaders stamp leases with their own:
with seconds of skew a lease may expire early in real time, so a run with clock faults
reports lease overlaps without failing on them (`RunResult.failures`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from tests.chaos.cluster import ChaosCluster
from tests.chaos.faults import Injected, pick_target, restart_checked


@dataclass
class ClockJump:
    name: str = "clock"
    exclusive: bool = True
    """Alone: a restart behind a partition could not become ready."""
    category: str = "process"
    weight: int = 2

    def unavailable(self, cluster: ChaosCluster) -> str | None:
        return None

    async def inject(self, cluster: ChaosCluster, rng: random.Random) -> Injected | None:
        nid = await pick_target(cluster, rng)
        if nid is None or len(cluster.running()) - 1 <= cluster.n // 2:
            return None
        offset = rng.choice([-1, 1]) * rng.randint(1, 10) * 1000
        cluster.kill(nid)
        cluster.clock_offset_ms[nid] = offset
        started = await restart_checked(cluster, [nid])

        async def heal() -> str:
            cluster.kill(nid)
            cluster.clock_offset_ms.pop(nid, None)
            return "; ".join(x for x in (started, await restart_checked(cluster, [nid])) if x)

        what = f"clock of node {nid} jumps {offset / 1000:+.0f}s (and back on heal)"
        return Injected(self.name, what, [nid], rng.uniform(2.0, 6.0), heal)
