"""A follower restarted from an empty disk catches up by snapshot + shipped segment files."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

from cmq.model import OutgoingMessage, QueueAttributes
from cmq.node.queue_node import QueueNode
from tests.cmq.helpers import configs, wait_until


async def test_wiped_follower_catches_up_with_segments(tmp_path: Path) -> None:
    cfgs = configs(tmp_path)
    nodes = {nid: QueueNode(cfg) for nid, cfg in cfgs.items()}
    for n in nodes.values():
        await n.start()
    try:
        await wait_until(lambda: all(n.is_ready() for n in nodes.values()))
        entry = nodes[1]
        await entry.create_queue("catchup", QueueAttributes())
        bodies = []
        for k in range(60):
            # 16 KiB bodies: the shipped snapshot (~5 MB) is sent in several transport chunks.
            batch = [b"m%d-%d-" % (k, j) + b"x" * 16_000 for j in range(5)]
            bodies += batch
            await entry.send("catchup", [OutgoingMessage(body=b) for b in batch])
        got = await entry.receive("catchup", 10, 60, 0)
        await entry.ack("catchup", [m.receipt for m in got])
        leader = next(n for n in nodes.values() if n.raft.status(1).leader == n.id)
        assert leader.raft.group(1).counters.snapshots >= 1
        assert leader.raft.group(1).store.first_index() > 2  # compacted: a snapshot is needed

        victim = next(nid for nid in nodes if nid != leader.id)
        await nodes[victim].close()
        shutil.rmtree(cfgs[victim].data_dirs[0])
        nodes[victim] = QueueNode(replace(cfgs[victim], rejoin=True))
        await nodes[victim].start()

        def caught_up() -> bool:
            m = nodes[victim].machines.get(1)  # opened once its catalog names the group
            st = m.stats("catchup", 0) if m is not None else None
            return st is not None and st.sent_total == len(bodies) and st.acked_total == 10

        await wait_until(caught_up)
        await wait_until(lambda: not nodes[victim].raft.group(1).raw.raft.rejoining)
        # The snapshot (with its ~5 MB of segments) went in 4 MiB chunks.
        assert leader.raft.transport.stats()[victim].chunked_transfers >= 1
        machine = nodes[victim].machines[1]
        assert nodes[victim].raft.group(1).stopped is None
        stored = machine.read("catchup", list(range(1, len(bodies) + 1)))
        assert [m.body for m in stored] == bodies[10:]  # the first 10 were acked
        # Its own view survives a restart too (the shipped snapshot is stored locally).
        await nodes[victim].close()
        nodes[victim] = QueueNode(cfgs[victim])
        await nodes[victim].start()
        await wait_until(caught_up)
    finally:
        for n in nodes.values():
            await n.close()
