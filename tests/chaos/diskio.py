"""The ``io`` fault kind: a node's disk fails its I/O while the cluster runs (`iofaults`).

On a node whose data directory is a LazyFS mount (``--lazyfs one|all``), one of:

- **fsync EIO** on its WAL: the WAL stops (a failed fsync is never retried as if the data were
  safe), the directory's groups stop, the node leads and votes nothing there;
- **disk full** (ENOSPC on every write): the same for the WAL; sends through the node are
  refused;
- **slow fsync** (2-3 s each): the node hands the leadership of its groups away.

Heal: the failed kinds are a process restart after the disk was "replaced" — the node is
killed, what it had not fsynced is dropped (the pages a failed fsync lost are gone, as on Linux),
the faults cleared, and it restarts on its data and must catch up by itself; the slow kind is
cleared in place. Category ``disk``: it overlaps other faults only within the quorum's spare
(`tests.chaos.faults.disk_overlap_ok`), like the file faults.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

from tests.chaos.cluster import ChaosCluster
from tests.chaos.faults import DISK, Injected, _minority_ok, mounts_unavailable, settle_node
from tests.chaos.iofaults import Fault

_WAL = "/wal-*"


@dataclass
class IoFault:
    name: str = "io"
    exclusive: bool = False
    category: str = DISK
    weight: int = 2

    def unavailable(self, cluster: ChaosCluster) -> str | None:
        return mounts_unavailable(cluster)

    async def inject(self, cluster: ChaosCluster, rng: random.Random) -> Injected | None:
        mounted = [n for n in sorted(cluster.mounts) if n in cluster.running()]
        if not mounted or not _minority_ok(cluster, 1):
            return None
        nid = rng.choice(mounted)
        fs = cluster.mounts[nid]
        shape = rng.choice(["fsync-eio", "disk-full", "slow-fsync"])
        if shape == "fsync-eio":
            fault = Fault("fsync", "eio", glob=_WAL)
        elif shape == "disk-full":
            fault = Fault("write", "enospc")
        else:
            fault = Fault("fsync", "delay", glob=_WAL, seconds=rng.uniform(2.0, 3.0))
        cluster.damaged.add(nid)
        await asyncio.to_thread(fs.inject, fault)

        async def heal() -> str:
            try:
                if shape == "slow-fsync":
                    await asyncio.to_thread(fs.clear_faults)
                    return await settle_node(cluster, nid)
                cluster.kill(nid)
                await asyncio.to_thread(fs.drop_unsynced)
                await asyncio.to_thread(fs.clear_faults)
                cluster.start_node(nid)
                return await settle_node(cluster, nid)
            finally:
                cluster.damaged.discard(nid)

        return Injected(
            self.name, f"{shape} on node {nid}", [nid], rng.uniform(2.0, 5.0), heal, DISK
        )
