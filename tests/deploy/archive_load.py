"""What the chart boot test runs inside its client network namespace around the archive
CronJob, as ``python -m tests.deploy.archive_load COMMAND QUEUE URL [URL...]`` (signed with the
key of the environment):

* ``fill QUEUE URL...``: create QUEUE with ``archive=true``, send messages of 512 KiB until
  one segment is full (the node's default segment size, 64 MiB), receive and ack every one,
  and wait until a segment is released; print JSON on the last line: the released segments
  (first seq, count) and each message's id -> SHA-256 of its body.
* ``released QUEUE URL...``: print the queue's released segments as JSON.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import sys
import time
from typing import Any

from cmq.client import Client, SyncClient

BODY_BYTES = 512 * 1024  # as text: base64 of 384 KiB of random bytes
MESSAGES = 140  # 70 MiB: more than one segment of 64 MiB
RELEASE_SECONDS = 60.0


def _body() -> str:
    return base64.b64encode(os.urandom(BODY_BYTES * 3 // 4)).decode()


def released(urls: list[str], queue: str) -> list[dict[str, Any]]:
    with SyncClient(urls, timeout=30) as c:
        raw = c.request("GET", f"/v1/queues/{queue}/segments?state=released")
    segs: list[dict[str, Any]] = raw.payload["segments"]
    return [{"first_seq": s["first_seq"], "count": s["count"]} for s in segs]


async def send_and_ack(urls: list[str], queue: str) -> dict[str, str]:
    """Create ``queue``, send `MESSAGES` bodies, ack every one; message id -> body digest."""
    digests: dict[str, str] = {}
    async with Client(urls, timeout=60) as c:
        await c.create_queue(queue, {"archive": True})
        for _ in range(0, MESSAGES, 4):
            bodies = [_body() for _ in range(4)]
            for b, sent in zip(bodies, await c.send(queue, bodies), strict=True):
                digests[sent.id] = hashlib.sha256(b.encode()).hexdigest()
        acked = 0
        deadline = time.monotonic() + 120
        while acked < len(digests):
            if time.monotonic() > deadline:
                raise SystemExit(f"acked {acked} of {len(digests)}")
            msgs = await c.receive(queue, 10, wait_seconds=1, visibility_timeout=120)
            if msgs:
                await c.ack(queue, [m.receipt for m in msgs])
                acked += len(msgs)
    return digests


def fill(urls: list[str], queue: str) -> dict[str, Any]:
    digests = asyncio.run(send_and_ack(urls, queue))
    deadline = time.monotonic() + RELEASE_SECONDS
    while not (segs := released(urls, queue)):
        if time.monotonic() > deadline:
            raise SystemExit(f"no segment of {queue} released in {RELEASE_SECONDS} s")
        time.sleep(0.5)
    return {"queue": queue, "released": segs, "digests": digests}


def main(argv: list[str]) -> int:
    command, queue, *urls = argv
    if command == "fill":
        out = fill(urls, queue)
    elif command == "released":
        out = {"queue": queue, "released": released(urls, queue)}
    else:
        raise SystemExit(f"unknown command {command}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
