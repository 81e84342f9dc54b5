"""Per-batch receipts and acks as runs (flag ``batch_receipts``) against per-message receipts
and acks as pairs, on the node that mints and verifies them:

    python bench/batch_receipts.py [--messages 20000] [--rounds 3] [--batch 32] [--consumers 2]

One `QueueNode` in this process (one group, a real data directory: every lease and ack is an
fdatasync'd Raft commit, on one node instead of a majority), a preloaded queue of 1 KiB
messages drained through the service (`QueueNode.receive` of at most ``--batch`` messages,
then `QueueNode.ack` of the batch) by ``--consumers`` concurrent loops. Variants alternate
inside each round, each on a fresh queue: ``off`` (layout-1 receipts, one HMAC per message;
acks as pairs) and ``on`` (layout-2 receipts, one HMAC per run; acks as runs). The flag is
switched in this process's catalog between variants (a cluster cannot disable a flag; nothing
of the product is changed). Per variant: drained msgs/s and the process's CPU per message
(µs, `time.process_time`: the node's whole path, lease, render, mint, verify, propose, WAL,
apply), medians over the rounds, and their ratio on/off.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from one_node import one_node_config  # this script's neighbour in bench/

from cmq.model import OutgoingMessage, QueueAttributes
from cmq.node.queue_node import QueueNode
from cmq.upgrade.features import BATCH_RECEIPTS

BODY = b"x" * 1024


async def drain(node: QueueNode, queue: str, messages: int, batch: int, consumers: int) -> int:
    """Receive and ack until ``messages`` were acked; how many receipts had layout 2."""
    left = [messages]
    runs = [0]

    async def consumer() -> None:
        while left[0] > 0:
            got = await node.receive(queue, batch, 30, 0)
            if not got:
                await asyncio.sleep(0.001)
                continue
            runs[0] += sum(len(m.receipt) == 59 for m in got)
            res = await node.ack(queue, [m.receipt for m in got])
            assert all(r.ok for r in res), res
            left[0] -= len(got)

    await asyncio.gather(*(consumer() for _ in range(consumers)))
    return runs[0]


async def run(messages: int, rounds: int, batch: int, consumers: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="cmq-batch-receipts-"))
    node = QueueNode(one_node_config(root, b"batch-receipts-bench-secret-0123"))
    await node.start()
    try:
        while not node.is_ready():
            await asyncio.sleep(0.05)
        enabled_at = node.catalog.features[BATCH_RECEIPTS]
        rows: dict[str, list[tuple[float, float]]] = {"off": [], "on": []}
        for r in range(rounds):
            for variant in ("off", "on") if r % 2 == 0 else ("on", "off"):
                if variant == "on":
                    node.catalog.features[BATCH_RECEIPTS] = enabled_at
                else:
                    node.catalog.features.pop(BATCH_RECEIPTS, None)
                queue = f"receipts-{variant}-{r}"
                await node.create_queue(queue, QueueAttributes())
                for _ in range(0, messages, 100):
                    await node.send(queue, [OutgoingMessage(BODY) for _m in range(100)])
                c0, t0 = time.process_time(), time.perf_counter()
                runs = await drain(node, queue, messages, batch, consumers)
                took, cpu = time.perf_counter() - t0, time.process_time() - c0
                assert (runs == messages) if variant == "on" else runs == 0
                rows[variant].append((messages / took, cpu / messages * 1e6))
                print(
                    f"round {r + 1} {variant}: {messages / took:,.0f} msgs/s, "
                    f"{cpu / messages * 1e6:.1f} us CPU per message",
                    flush=True,
                )
        node.catalog.features[BATCH_RECEIPTS] = enabled_at
        med = {
            v: tuple(statistics.median(x[i] for x in rs) for i in (0, 1)) for v, rs in rows.items()
        }
        for v, (rate, cpu) in med.items():
            print(f"median {v}: {rate:,.0f} msgs/s, {cpu:.1f} us CPU per message")
        print(
            f"on/off: throughput x{med['on'][0] / med['off'][0]:.2f}, "
            f"CPU per message x{med['on'][1] / med['off'][1]:.2f}"
        )
    finally:
        await node.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--consumers", type=int, default=2)
    a = ap.parse_args()
    asyncio.run(run(a.messages, a.rounds, a.batch, a.consumers))


if __name__ == "__main__":
    main()
