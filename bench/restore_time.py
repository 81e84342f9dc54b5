"""How long ``cmq restore`` takes (docs/backup.md).

A three-node cluster of real ``cmq serve`` processes on loopback (two data groups) is loaded
with ``--messages`` messages of ``--size`` bytes (one message attribute each) spread over
``--queues`` queues, backed up (`cmq.backup.dump.backup`), stopped; a fresh three-node cluster
is started and the backup restored into it (`cmq.backup.load.restore`, the code behind
``cmq restore``), timed from the call to its return (every message committed on a majority,
fsynced); then each queue's visible count is checked against the backup.

    python bench/restore_time.py [--messages 100000] [--size 100] [--queues 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from cmq.backup.dump import backup
from cmq.backup.load import restore
from cmq.cli.launch import LocalCluster
from cmq.client import Client
from cmq.client.types import Message


async def _load(client: Client, queues: list[str], messages: int, size: int) -> float:
    start = time.monotonic()
    per = messages // len(queues)
    gate = asyncio.Semaphore(16)
    body = "x" * size

    async def batch(queue: str, first: int, n: int) -> None:
        async with gate:
            await client.send(
                queue, [Message(body, attributes={"n": str(first + i)}) for i in range(n)]
            )

    jobs = [batch(q, i, min(100, per - i)) for q in queues for i in range(0, per, 100)]
    await asyncio.gather(*jobs)
    return time.monotonic() - start


async def main(messages: int, size: int, queues: int) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="cmq-restore-time-"))
    names = [f"bench-{i}" for i in range(queues)]
    source = LocalCluster(root / "a", 3, groups=2)
    try:
        source.start()
        await source.ready()
        async with Client(source.urls) as a:
            for name in names:
                await a.create_queue(name)
            load_s = await _load(a, names, messages, size)
            wrote = await backup(a, root / "backup")
    finally:
        await asyncio.to_thread(source.stop)
    target = LocalCluster(root / "b", 3, groups=2)
    try:
        target.start()
        await target.ready()
        async with Client(target.urls) as b:
            start = time.monotonic()
            report = await restore(b, root / "backup")
            restore_s = time.monotonic() - start
            visible = sum([(await b.get_queue(n)).stats.visible for n in names])
    finally:
        await asyncio.to_thread(target.stop)
    imported = sum(report.messages.values())
    assert imported == wrote.messages == visible, (imported, wrote.messages, visible)
    return {
        "messages": imported,
        "queues": queues,
        "body_bytes": size,
        "load_seconds": round(load_s, 2),
        "backup_seconds": round(wrote.seconds, 2),
        "restore_seconds": round(restore_s, 2),
        "restore_msgs_per_s": round(imported / restore_s),
        "backup_bytes": sum(f.stat().st_size for f in (root / "backup").rglob("*") if f.is_file()),
    }


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=100_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--queues", type=int, default=1)
    args = p.parse_args()
    print(json.dumps(asyncio.run(main(args.messages, args.size, args.queues)), indent=2))
