"""Helpers the chart boot test runs inside its client network namespace (where the pods' DNS
names resolve), as ``python -m tests.deploy.scale_load COMMAND URL [URL...]``:

* ``load URL...``: create a queue and run `tests.cmq.cluster.Load` (producers and consumers
  through the given nodes, with fail-over) until a line arrives on stdin; then stop producing,
  drain the queue, print the outcome as JSON on the last line and exit 0 only if
  `assert_safe` holds (nothing confirmed lost, nothing unexpected, nothing redelivered after
  its ack was confirmed).
* ``wait-joined N URL...``: poll ``GET /v1/nodes`` until every node above N holds replicas
  and no move is in flight (at most 75 s); print the node table.
* ``nodes N URL...``: poll ``GET /v1/nodes`` until the registered nodes are 1..N (at most 20 s:
  the answering node's catalog may be a moment behind); print their ids as JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from types import SimpleNamespace
from typing import Any

from cmq.client import Client
from cmq.errors import CmqError
from tests.cmq.cluster import Load, assert_safe, unique_queue

WAIT_JOINED_SECONDS = 75.0


async def _retry(what: str, call: Any, seconds: float = 30.0) -> Any:
    deadline = time.monotonic() + seconds
    while True:
        try:
            return await call()
        except CmqError as e:
            if time.monotonic() > deadline:
                raise SystemExit(f"{what}: {e}") from None
            await asyncio.sleep(0.3)


async def load(urls: list[str]) -> int:
    queue = unique_queue("scale")
    async with Client(urls, timeout=10) as c:
        await _retry("create queue", lambda: c.create_queue(queue, {"visibility_timeout": 10}))
    cluster = SimpleNamespace(urls=urls, procs={}, http={i + 1: u for i, u in enumerate(urls)})
    work = Load(cluster, queue)  # type: ignore[arg-type]  # the parts of a cluster Load uses
    await work.start(producers=2, consumers=2)
    print(f"load started on {queue}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    out = await work.drain(timeout=45)
    print(json.dumps(out.summary()), flush=True)
    assert_safe(out, "load while scaling 3 -> 5 -> 3", confirmed_at_least=50)
    return 0


def _settled(rows: list[dict[str, Any]], keep: int) -> bool:
    joined = [r for r in rows if r["id"] > keep]
    return (
        bool(joined) and all(r["replicas"] for r in joined) and not any(r["incoming"] for r in rows)
    )


async def wait_joined(keep: int, urls: list[str]) -> int:
    deadline = time.monotonic() + WAIT_JOINED_SECONDS
    rows: list[dict[str, Any]] = []
    async with Client(urls, timeout=5) as c:
        while time.monotonic() < deadline:
            try:
                rows = await c.list_nodes()
            except CmqError:
                rows = []
            if _settled(rows, keep):
                break
            await asyncio.sleep(0.5)
    for r in rows:
        print(
            f"node {r['id']} {r['address']} {r['state']} replicas={r['replicas']} "
            f"incoming={r['incoming']} leaders={r['leaders']} meta={r['meta']}"
        )
        print(f"node {r['id']} zone={r['zone']} ")
    return 0 if _settled(rows, keep) else 1


async def nodes(count: int, urls: list[str]) -> int:
    deadline = time.monotonic() + 20
    ids: list[int] = []
    async with Client(urls, timeout=5) as c:
        while time.monotonic() < deadline:
            with contextlib.suppress(CmqError):
                ids = sorted(r["id"] for r in await c.list_nodes())
            if ids == list(range(1, count + 1)):
                break
            await asyncio.sleep(0.3)
    print(json.dumps(ids))
    return 0 if ids == list(range(1, count + 1)) else 1


def main(argv: list[str]) -> int:
    cmd, *rest = argv
    if cmd == "load":
        return asyncio.run(load(rest))
    if cmd == "wait-joined":
        return asyncio.run(wait_joined(int(rest[0]), rest[1:]))
    if cmd == "nodes":
        return asyncio.run(nodes(int(rest[0]), rest[1:]))
    raise SystemExit(f"unknown command {cmd}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
