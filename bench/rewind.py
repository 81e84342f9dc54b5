"""Apply cost of a rewind (`cmq.fsm.rewind`).

One queue keeping acknowledged messages (``retain_acked_seconds``) receives ``--messages``
(default 100,000) messages of 64-byte bodies in batches of 100, every one leased and acked,
through `QueueMachine.execute` (the machine's apply path) into an in-memory segment store
(64 MiB segments, as the default). Then one rewind of all of them, proposed in parts of
`REWIND_MAX` (1,024) messages as the leader does. Reported, as medians of ``--rounds`` runs:

- rewind: wall time of every part together, per message, and the slowest part (the longest a
  group's apply loop is held by one command);
- ack: the wall time of the acks of the same messages, for scale (an ack is what a rewound
  message costs next);
- image: the snapshot image's size after the rewind against before it.

    PYTHONPATH=. .venv/bin/python bench/rewind.py [--messages 100000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

from cmq.fsm import (
    Ack,
    CommandFailed,
    CreateQueue,
    Lease,
    Leased,
    MemorySegmentStore,
    NewMessage,
    Produce,
    QueueMachine,
    Rewind,
    Rewound,
)
from cmq.fsm.rewind import REWIND_MAX
from cmq.model import QueueAttributes

NOW = 1_700_000_000_000
QUEUE = "kept"


def run(n: int) -> dict[str, float]:
    m = QueueMachine(MemorySegmentStore())
    m.execute(CreateQueue(QUEUE, QueueAttributes(retain_acked_seconds=86_400), NOW))
    body = b"x" * 64
    acked = 0.0
    for i in range(0, n, 100):
        msgs = tuple(
            NewMessage(f"m{i + j}", body, False, (), None, None) for j in range(min(100, n - i))
        )
        assert not isinstance(m.execute(Produce(QUEUE, NOW, msgs)), CommandFailed)
        got = m.execute(Lease(QUEUE, NOW, 100, 30_000))
        assert isinstance(got, Leased)
        t = time.perf_counter()
        m.execute(Ack(QUEUE, NOW, tuple((x.seq, x.lease_id) for x in got.messages)))
        acked += time.perf_counter() - t
    m.store.write_out()
    before = len(m.encode_image(reuse=False))
    parts: list[float] = []
    start, total = 0, 0
    while True:
        t = time.perf_counter()
        res = m.execute(Rewind(QUEUE, NOW + 1, NOW, start, REWIND_MAX))
        parts.append(time.perf_counter() - t)
        assert isinstance(res, Rewound)
        total += res.count
        if not res.next_seq:
            break
        start = res.next_seq
    assert total == n, total
    m.store.write_out()
    after = len(m.encode_image(reuse=False))
    return {
        "rewind_s": sum(parts),
        "rewind_us_per_msg": sum(parts) / n * 1e6,
        "slowest_part_ms": max(parts) * 1e3,
        "ack_us_per_msg": acked / n * 1e6,
        "image_before_kb": before / 1024,
        "image_after_kb": after / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    runs = [run(args.messages) for _ in range(args.rounds)]
    for key in runs[0]:
        print(f"{key}: {statistics.median(r[key] for r in runs):.2f}")


if __name__ == "__main__":
    main()
