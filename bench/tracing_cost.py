"""What server tracing costs in CPU (docs/operations.md, cmq/node/tracing.py): a same-hour A/B.

One `QueueNode` in this process (one data group, a real data directory, so every send, lease
and ack is an fsynced Raft commit). Each round moves ``--messages`` messages through its
`QueueService` in batches of ``--batch``: send, receive, ack. Every message carries a
``traceparent`` as a traced producer's would: one per batch (``--contexts batch``: a batch
sent from one span) or one per message (``message``: the worst case).

Arm A serves them with tracing off (the node as it is: no wrapper, no span). Arm B serves them
through `cmq.node.tracing.traced`, with an SDK tracer provider whose batching span processor
hands the spans to an exporter that drops them (``--exporter drop``: spans made, batched and
handed over, nothing serialized) or keeps them (``memory``). The arms alternate within each
round (the order flips every round). Each arm's figure is CPU seconds (``time.process_time``:
every thread of the process, the exporter's included) per 1,000 messages; the report gives
the medians over ``--rounds`` and their ratio.

    python bench/tracing_cost.py [--rounds 7] [--messages 2000] [--batch 10] [--exporter drop]
                                 [--contexts batch]
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from one_node import one_node_config  # this script's neighbour in bench/
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from cmq.model import OutgoingMessage, QueueAttributes
from cmq.node.queue_node import QueueNode
from cmq.node.tracing import TRACER_NAME, traced
from cmq.service import QueueService


class Dropping(SpanExporter):
    """An exporter that takes every batch and keeps nothing."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def traceparent() -> str:
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


async def one_arm(
    service: QueueService, queue: str, messages: int, batch: int, per_message: bool
) -> float:
    """CPU seconds per 1,000 messages sent, received and acked through ``service``."""
    start = time.process_time()
    moved = 0
    while moved < messages:
        shared = traceparent()
        out = [
            OutgoingMessage(
                f"m{moved + i}".encode(),
                attributes=(("traceparent", traceparent() if per_message else shared),),
            )
            for i in range(batch)
        ]
        await service.send(queue, out)
        got: list[str] = []
        while len(got) < batch:
            received = await service.receive(queue, batch - len(got), 30, 1)
            got.extend(m.receipt for m in received)
        results = await service.ack(queue, got)
        assert all(r.ok for r in results), results
        moved += batch
    return (time.process_time() - start) * 1000 / messages


async def run(
    rounds: int, messages: int, batch: int, exporter_name: str, per_message: bool
) -> None:
    root = Path(tempfile.mkdtemp(prefix="cmq-tracing-cost-"))
    node = QueueNode(one_node_config(root, b"tracing-cost-secret-0123456789ab"))
    await node.start()
    try:
        deadline = time.monotonic() + 30
        while not node.is_ready():
            if time.monotonic() > deadline:
                raise TimeoutError("the node did not get ready")
            await asyncio.sleep(0.05)
        exporter: SpanExporter = Dropping() if exporter_name == "drop" else InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter))
        arms: dict[str, QueueService] = {
            "off": node,
            "on": traced(node, provider.get_tracer(TRACER_NAME)),
        }
        await node.create_queue("cost", QueueAttributes())
        for service in arms.values():  # warm-up
            await one_arm(service, "cost", min(messages, 200), batch, per_message)
        figures: dict[str, list[float]] = {"off": [], "on": []}
        for r in range(rounds):
            order = ("off", "on") if r % 2 == 0 else ("on", "off")
            for arm in order:
                figures[arm].append(await one_arm(arms[arm], "cost", messages, batch, per_message))
            print(
                f"round {r + 1}: off {figures['off'][-1]:.4f}  on {figures['on'][-1]:.4f} "
                "CPU s / 1,000 messages",
                flush=True,
            )
        provider.shutdown()
    finally:
        await node.close()
    off = statistics.median(figures["off"])
    on = statistics.median(figures["on"])
    print(
        f"tracing off: {off:.4f} CPU s / 1,000 messages (median of {rounds})\n"
        f"tracing on ({exporter_name} exporter): {on:.4f} CPU s / 1,000 messages\n"
        f"ratio on/off: {on / off:.3f}  ({messages} messages per arm per round, batches of "
        f"{batch}: send + receive + ack; a trace context per "
        f"{'message' if per_message else 'batch'})"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--messages", type=int, default=2000)
    p.add_argument("--batch", type=int, default=10)
    p.add_argument("--exporter", choices=("drop", "memory"), default="drop")
    p.add_argument("--contexts", choices=("batch", "message"), default="batch")
    args = p.parse_args()
    per_message = args.contexts == "message"
    asyncio.run(run(args.rounds, args.messages, args.batch, args.exporter, per_message))


if __name__ == "__main__":
    main()
