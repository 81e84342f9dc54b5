"""The serving entry point: one node process (`cmq serve`) is a `QueueNode` behind the HTTP app.

This is the one module of the queue package that imports `api` (the declared exception of the
``queue-below-http`` import contract): it composes the node with the HTTP surface and its
metrics, binds the HTTP port, and runs until SIGINT or SIGTERM. Everything it composes is built
and tested on its own; this module only wires and runs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal

from aiohttp import web
from prometheus_client import CollectorRegistry

from api.app import make_app
from cmq.metrics import register_node_metrics
from cmq.node import NodeConfig, QueueNode, now_ms
from raftlog.runtime import new_event_loop
from raftlog.transport.peer import Address


async def serve(cfg: NodeConfig, http: Address, stop: asyncio.Event) -> None:
    """Start the node (recovery, groups, peers), serve HTTP on ``http`` until ``stop`` is set,
    then stop accepting requests and close the node. A start that fails closes what it started
    and raises (`QueueNode.start`)."""
    node = QueueNode(cfg)
    await node.start()
    try:
        registry = CollectorRegistry()
        register_node_metrics(registry, node.raft, node.machines, now_ms)
        app = make_app(node, registry=registry)
        # Cancel a handler whose client went away: an abandoned long poll must not lease.
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await runner.setup()
        try:
            await web.TCPSite(runner, http.host, http.port, reuse_address=True).start()
            print(f"cmq node {cfg.node_id} serving http://{http.host}:{http.port}", flush=True)
            await stop.wait()
        finally:
            await runner.cleanup()
    finally:
        await node.close()


def run(cfg: NodeConfig, http: Address) -> int:
    """Run one node in the foreground on a fresh event loop (uvloop when installed) until
    SIGINT or SIGTERM; returns the process exit status. ``CMQ_LOG_LEVEL`` sets the log level
    (default WARNING)."""
    logging.basicConfig(
        level=os.environ.get("CMQ_LOG_LEVEL", "WARNING"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(cfg, http, stop)

    loop = new_event_loop()
    with contextlib.closing(loop):
        loop.run_until_complete(main())
    return 0
