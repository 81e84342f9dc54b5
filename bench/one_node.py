"""The one-node cluster the in-process benchmarks run a `QueueNode` on (``batch_receipts``,
``stream_path``, ``tracing_cost``): one data group, a free loopback peer port, 10 ms ticks."""

from __future__ import annotations

from pathlib import Path

from cmq.cli.launch import free_ports
from cmq.node.queue_node import NodeConfig
from raftlog.transport.peer import Address


def one_node_config(root: Path, secret: bytes = b"in-process-bench-secret-01234567") -> NodeConfig:
    """A single node (id 1) with its data under ``root``."""
    addr = Address("127.0.0.1", free_ports(1)[0])
    return NodeConfig(
        node_id=1,
        peer=addr,
        peers={1: addr},
        data_dirs=(str(root),),
        secret=secret,
        groups=1,
        tick_interval=0.01,
    )
