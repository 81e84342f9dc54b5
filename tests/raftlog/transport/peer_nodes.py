"""Loopback peers for the TCP and TLS transport tests: `Node` (a `Transport` that records the
frames it receives), `addresses` (free loopback ports), `running` (start transports, close
them at the end) and `exchange_all` (every node sends every other one a frame)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from raftlog.transport.codec import FrameKind
from raftlog.transport.peer import Address, Transport, TransportConfig
from tests.ports import free_ports


class Node:
    """Node ``nid`` of ``addrs``: its transport (``t``) and the frames it received (``got``)."""

    def __init__(
        self,
        nid: int,
        addrs: dict[int, Address],
        secret: bytes = b"s3cret",
        cfg: TransportConfig | None = None,
    ) -> None:
        self.got: list[tuple[int, FrameKind, bytes]] = []
        self.arrived = asyncio.Event()
        self.t = Transport(nid, addrs[nid], addrs, secret, self.on_frame, cfg=cfg)

    def on_frame(self, peer: int, kind: FrameKind, body: bytes) -> None:
        self.got.append((peer, kind, body))
        self.arrived.set()

    async def wait_for(self, n: int, timeout: float = 5.0) -> None:
        async def loop() -> None:
            while len(self.got) < n:
                self.arrived.clear()
                await self.arrived.wait()

        await asyncio.wait_for(loop(), timeout)


def addresses(n: int) -> dict[int, Address]:
    """Nodes 1..n on free loopback ports."""
    return {i + 1: Address("127.0.0.1", p) for i, p in enumerate(free_ports(n))}


async def exchange_all(nodes: dict[int, Node]) -> None:
    """Each node sends every other one a frame (``b"i->j"``); each receives exactly those sent
    to it."""
    for i, nd in nodes.items():
        for j in nodes:
            if j != i:
                assert nd.t.send(j, FrameKind.RAFT, b"%d->%d" % (i, j))
    for nd in nodes.values():
        await nd.wait_for(len(nodes) - 1)
    for i, nd in nodes.items():
        assert sorted(body for _, _, body in nd.got) == sorted(
            b"%d->%d" % (j, i) for j in nodes if j != i
        )


@asynccontextmanager
async def running(*nodes: Node) -> AsyncIterator[None]:
    """Start the nodes' transports in order; close them, last started first, on the way out."""
    for nd in nodes:
        await nd.t.start()
    try:
        yield
    finally:
        for nd in reversed(nodes):
            await nd.t.close()
