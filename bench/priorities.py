"""Apply time of sends and receives with and without message priorities.

One standard queue receives ``--messages`` (default 200,000) messages in batches of 100
through `QueueMachine.execute` (the machine's apply path, an in-memory segment store, 16-byte
bodies), then every one is leased by `Lease` commands of 10 and acked in the same batches.
Scenarios:

- ``plain``: a queue with ``priorities`` 1 (every message at level 0): the path every queue
  without priorities takes. Run against an older tree (PYTHONPATH) it measures that tree, so
  the cost of the priority index on queues that do not use it is a ratio of two runs;
- ``levels``: ``priorities`` 4, each message at a level drawn uniformly (fixed seed) from 0..3;
- ``restore``: the ``levels`` machine's snapshot restored (levels read from the image).

Reported as medians of ``--rounds`` runs, per phase: total CPU seconds of the process (not wall
time: the figures hold on a machine shared with other work) and microseconds per message.

    PYTHONPATH=. .venv/bin/python bench/priorities.py [--messages 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import random
import statistics
import time

from cmq.fsm import Ack, CreateQueue, Lease, MemorySegmentStore, NewMessage, Produce, QueueMachine
from cmq.fsm.commands import Leased
from cmq.model import QueueAttributes

NOW = 1_700_000_000_000
QUEUE = "bench"
BATCH = 100
LEASE = 10
_HAS_PRIORITIES = "priorities" in {f.name for f in dataclasses.fields(QueueAttributes)}


def run(messages: int, levels: int) -> dict[str, float]:
    """Seconds spent in the sends, the leases and the acks (and a restore with levels)."""
    m = QueueMachine(MemorySegmentStore(indexes=True))
    attrs = QueueAttributes(priorities=levels) if _HAS_PRIORITIES else QueueAttributes()
    m.execute(CreateQueue(QUEUE, attrs, NOW))
    rng = random.Random(7)
    body = b"x" * 16
    batches = []
    for start in range(0, messages, BATCH):
        if levels > 1:
            batch = tuple(
                NewMessage(
                    f"m{start + i}", body, False, (), None, None, None, None, rng.randrange(levels)
                )
                for i in range(BATCH)
            )
        else:
            batch = tuple(
                NewMessage(f"m{start + i}", body, False, (), None, None) for i in range(BATCH)
            )
        batches.append(batch)
    gc.collect()
    t0 = time.process_time()
    for batch in batches:
        m.execute(Produce(QUEUE, NOW, batch))
    sent = time.process_time() - t0
    leased: list[tuple[int, int]] = []
    t0 = time.process_time()
    while True:
        got = m.execute(Lease(QUEUE, NOW + 1, LEASE, 600_000))
        assert isinstance(got, Leased)
        if not got.messages:
            break
        leased.extend((x.seq, x.lease_id) for x in got.messages)
    lease = time.process_time() - t0
    assert len(leased) == messages, len(leased)
    t0 = time.process_time()
    for i in range(0, messages, LEASE):
        m.execute(Ack(QUEUE, NOW + 2, tuple(leased[i : i + LEASE])))
    ack = time.process_time() - t0
    out = {"send": sent, "lease": lease, "ack": ack}
    if levels > 1:
        full = QueueMachine(MemorySegmentStore(indexes=True))
        full.execute(CreateQueue(QUEUE, attrs, NOW))
        for batch in batches:
            full.execute(Produce(QUEUE, NOW, batch))
        snap = full.snapshot()
        t0 = time.process_time()
        full.restore(2, snap)
        out["restore"] = time.process_time() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    scenarios = [("plain", 1)] + ([("levels", 4)] if _HAS_PRIORITIES else [])
    for name, levels in scenarios:
        runs = [run(args.messages, levels) for _ in range(args.rounds)]
        for phase in runs[0]:
            s = statistics.median(r[phase] for r in runs)
            print(f"{name:7} {phase:8} {s:7.3f} s  {s / args.messages * 1e6:6.2f} us/message")


if __name__ == "__main__":
    main()
