"""Memory and apply time of the visibility timers with many scheduled messages.

One queue receives ``--messages`` (default 1,000,000) messages in batches of 100, each with a
delay drawn uniformly (fixed seed) from 1 s .. ``--days`` (default 7) days, through
`QueueMachine.execute` (the machine's apply path), into an in-memory segment store with 16-byte
bodies. Reported, as medians of ``--rounds`` runs:

- apply: wall time of the `Produce` commands (all of them) and per message;
- memory: the Python heap (tracemalloc) of the filled machine minus the same machine filled with
  undelayed messages, i.e. what the scheduled state costs (its own run: tracemalloc slows);
- rebuild: `restore` of the machine's snapshot into the same store (the timers rebuilt from the
  segments' per-record visibility times);
- fire: the clock advanced over the whole span in 10,080 steps (one a minute), every timer
  firing once.

    PYTHONPATH=. .venv/bin/python bench/timer_index.py [--messages 1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import random
import statistics
import time
import tracemalloc

from cmq.fsm import (
    CommandFailed,
    CreateQueue,
    MemorySegmentStore,
    NewMessage,
    Produce,
    QueueMachine,
)
from cmq.model import QueueAttributes

NOW = 1_700_000_000_000
QUEUE = "timers"
_FIELDS = {f.name for f in dataclasses.fields(QueueAttributes)}
BATCH = 100


def fill(messages: int, days: float, delayed: bool) -> tuple[QueueMachine, float]:
    """A machine with one queue of ``messages`` messages; returns it and the apply time (s)."""
    m = QueueMachine(MemorySegmentStore(indexes=True))
    # max_delay_seconds: absent before the long_delays feature (no bound in apply then).
    long = {"max_delay_seconds": 604_800} if "max_delay_seconds" in _FIELDS else {}
    m.execute(CreateQueue(QUEUE, QueueAttributes(**long), NOW))
    rng = random.Random(42)
    span = int(days * 86_400_000)
    body = b"x" * 16
    elapsed = 0.0
    for start in range(0, messages, BATCH):
        n = min(BATCH, messages - start)
        batch = tuple(
            NewMessage(
                f"m{start + i}", body, False, (), rng.randint(1000, span) if delayed else 0, None
            )
            for i in range(n)
        )
        cmd = Produce(QUEUE, NOW + start // BATCH, batch)
        t0 = time.perf_counter()
        assert not isinstance(m.execute(cmd), CommandFailed)
        elapsed += time.perf_counter() - t0
    return m, elapsed


def heap_bytes(messages: int, days: float, delayed: bool) -> int:
    gc.collect()
    tracemalloc.start()
    m, _ = fill(messages, days, delayed)
    gc.collect()
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del m
    return size


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--days", type=float, default=7.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-memory", action="store_true", help="skip the tracemalloc runs")
    args = p.parse_args()
    apply_s, rebuild_s, fire_s = [], [], []
    for _ in range(args.rounds):
        m, elapsed = fill(args.messages, args.days, True)
        apply_s.append(elapsed)
        image = m.snapshot()
        t0 = time.perf_counter()
        m.restore(1, image)
        rebuild_s.append(time.perf_counter() - t0)
        q = m._queues[QUEUE]
        steps = 10_080
        end = NOW + int(args.days * 86_400_000) + 60_000
        t0 = time.perf_counter()
        for i in range(1, steps + 1):
            q.advance(NOW + (end - NOW) * i // steps)
        fire_s.append(time.perf_counter() - t0)
        assert len(q.ready) == args.messages, len(q.ready)
        del m, q
        gc.collect()
    n = args.messages
    a = statistics.median(apply_s)
    print(f"messages {n}, delays 1 s .. {args.days:g} days, {args.rounds} rounds (medians)")
    print(f"apply (Produce): {a:.2f} s, {a / n * 1e6:.2f} us/message")
    print(f"restore (timers rebuilt): {statistics.median(rebuild_s):.2f} s")
    print(f"fire (10,080 advances over the span): {statistics.median(fire_s):.2f} s")
    if not args.no_memory:
        delayed = statistics.median(heap_bytes(n, args.days, True) for _ in range(args.rounds))
        plain = statistics.median(heap_bytes(n, args.days, False) for _ in range(args.rounds))
        print(
            f"memory: delayed {delayed / 1e6:.1f} MB, undelayed {plain / 1e6:.1f} MB, "
            f"timers {(delayed - plain) / 1e6:.1f} MB ({(delayed - plain) / n:.1f} B/message)"
        )


if __name__ == "__main__":
    main()
