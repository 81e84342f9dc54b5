"""`cmq.node.host`: the node's files, real and in memory, behave alike; a node on a memory host
writes nothing to the file system and keeps its flag markers in its `MemoryFiles`."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from cmq.model import OutgoingMessage, QueueAttributes
from cmq.node.config import NodeConfig
from cmq.node.feature_marker import MARKER
from cmq.node.host import OS_FILES, PRODUCTION, MemoryFiles, NodeFiles, NodeHost
from cmq.node.queue_node import QueueNode
from cmq.upgrade.release import PEER_PROTOCOL_MAX, PEER_PROTOCOL_MIN
from raftlog.runtime.host import LoopClock, inline
from raftlog.sim.vloop import VirtualTimeLoop
from raftlog.storage.memory import MemoryDisks
from raftlog.transport.memory import MemoryNetwork
from raftlog.transport.peer import Address
from raftlog.transport.protocol import ProtocolRange


@pytest.fixture(params=["os", "memory"])
def files(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[NodeFiles, str]:
    if request.param == "os":
        return OS_FILES, str(tmp_path)
    return MemoryFiles(), "/mem"


def test_files_read_write_and_remove(files: tuple[NodeFiles, str]) -> None:
    f, root = files
    if f is OS_FILES:
        (Path(root) / "d" / "seg").mkdir(parents=True)
    assert f.read(f"{root}/d/x.json") is None
    f.write_durably(f"{root}/d/x.json", b"one")
    f.write_durably(f"{root}/d/x.json", b"two")
    f.write_durably(f"{root}/d/seg/y", b"three")
    assert f.read(f"{root}/d/x.json") == b"two"
    f.remove_tree(f"{root}/d/seg")
    assert f.read(f"{root}/d/seg/y") is None
    assert f.read(f"{root}/d/x.json") == b"two"
    f.remove_tree(f"{root}/nothing-here")


def test_memory_segment_stores_outlive_hosts_and_lose_unflushed_writes() -> None:
    files = MemoryFiles()
    store = files.segment_store("/n1/d0/segments/g1", durable_root="/n1/d0")
    assert files.segment_store("/n1/d0/segments/g1", durable_root="/n1/d0") is store
    assert files.segment_store("/n1/d0/segments/g2", durable_root="/n1/d0") is not store
    files.remove_tree("/n1/d0/segments/g1")
    assert files.segment_store("/n1/d0/segments/g1", durable_root="/n1/d0") is not store


def test_the_default_host_is_the_real_io() -> None:
    assert PRODUCTION.transport is None and PRODUCTION.disks is None
    assert PRODUCTION.files is OS_FILES
    assert PRODUCTION.offload is asyncio.to_thread


def test_a_node_on_a_memory_host_keeps_its_files_in_memory(tmp_path: Path) -> None:
    loop = VirtualTimeLoop()
    rng = random.Random(1)
    net = MemoryNetwork(loop, rng)
    disks = MemoryDisks(loop, rng)
    files = MemoryFiles()
    data_dir = str(tmp_path / "never-written")
    cfg = NodeConfig(
        node_id=1,
        peer=Address("n1", 7000),
        peers={1: Address("n1", 7000)},
        data_dirs=(data_dir,),
        secret=b"a-test-secret-of-32-bytes-000000",
        groups=1,
        replication=1,
    )
    host = NodeHost(
        transport=net.transport(
            1, (), protocols=ProtocolRange(PEER_PROTOCOL_MIN, PEER_PROTOCOL_MAX)
        ),
        disks=disks,
        clock=LoopClock(loop, 1_700_000_000_000),
        offload=inline,
        segments=files.segment_store,
        files=files,
        seed=7,
    )
    node = QueueNode(cfg, host)

    async def scenario() -> None:
        await node.start()
        try:
            for _ in range(200):
                if node.is_ready():
                    break
                await asyncio.sleep(0.05)
            assert node.is_ready()
            await node.create_queue("q", QueueAttributes())
            sent = await node.send("q", [OutgoingMessage(b"hi")])
            assert len(sent) == 1
        finally:
            await node.close()

    loop.run_until_complete(scenario())
    loop.close()
    assert not Path(data_dir).exists()
    assert files.read(f"{data_dir}/{MARKER}") is not None  # the flags the cluster formed with
    assert any(name.startswith(f"{data_dir}/segments/g") for name in files.stores)
