"""Times `QueueMachine.snapshot()`: its in-memory part (`encode_image`, event-loop time) and its
flush part (fsync of the dirty segment files), plus `restore`.

Default: 1,000 queues x 1,000 messages (1,000,000), 100-byte bodies, in segment files under a
temporary directory; per queue 10% of the messages acked and 10% leased (in flight).

    .venv/bin/python bench/fsm_snapshot_bench.py [--queues 1000] [--messages 1000] [--dedup]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from cmq.fsm import Ack, CreateQueue, FileSegmentStore, Lease, NewMessage, Produce, QueueMachine
from cmq.fsm.commands import Leased
from cmq.model import QueueAttributes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--queues", type=int, default=1000)
    p.add_argument("--messages", type=int, default=1000, help="per queue")
    p.add_argument("--body", type=int, default=100)
    p.add_argument("--dedup", action="store_true", help="give every message a dedup id")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="cmq-fsm-bench-") as d:
        store = FileSegmentStore(d)
        m = QueueMachine(store)
        now = 1_700_000_000_000
        body = b"x" * args.body
        t0 = time.perf_counter()
        for qi in range(args.queues):
            name = f"queue-{qi:05d}"
            m.execute(CreateQueue(name, QueueAttributes(), now))
            for start in range(0, args.messages, 100):
                batch = tuple(
                    NewMessage(
                        f"{qi}-{i}",
                        body,
                        False,
                        (),
                        None,
                        f"d-{qi}-{i}" if args.dedup else None,
                    )
                    for i in range(start, min(args.messages, start + 100))
                )
                m.execute(Produce(name, now, batch))
            tenth = args.messages // 10
            acked = m.execute(Lease(name, now, tenth, None))
            assert isinstance(acked, Leased)
            m.execute(Ack(name, now, tuple((x.seq, x.lease_id) for x in acked.messages)))
            m.execute(Lease(name, now, tenth, None))
        fill = time.perf_counter() - t0
        total = args.queues * args.messages
        print(f"filled {args.queues} queues / {total} messages in {fill:.1f} s")

        t0 = time.perf_counter()
        store.flush()
        print(
            f"first flush (all {total} appended records): {(time.perf_counter() - t0) * 1e3:.1f} ms"
        )

        for label, reuse in (("all queues re-encoded", False), ("no queue changed", True)):
            encode_ms = []
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                image = m.encode_image(reuse=reuse)
                encode_ms.append((time.perf_counter() - t0) * 1e3)
            print(
                f"snapshot in-memory part (encode_image, {label}): "
                f"median {statistics.median(encode_ms):.2f} ms, min {min(encode_ms):.2f} ms, "
                f"image {len(image) / 1e6:.2f} MB"
            )

        # The flush part after a typical interval: one more small batch per queue.
        for qi in range(args.queues):
            m.execute(
                Produce(f"queue-{qi:05d}", now + 1, (NewMessage("n", body, False, (), None, None),))
            )
        t0 = time.perf_counter()
        m.encode_image()
        print(
            f"snapshot in-memory part after 1 append to each queue: "
            f"{(time.perf_counter() - t0) * 1e3:.2f} ms"
        )
        t0 = time.perf_counter()
        store.flush()
        print(
            f"snapshot flush part after 1 append to each of {args.queues} segments: "
            f"{(time.perf_counter() - t0) * 1e3:.1f} ms"
        )
        t0 = time.perf_counter()
        image = m.snapshot()
        print(f"snapshot() with nothing to flush: {(time.perf_counter() - t0) * 1e3:.2f} ms")

        store.close()
        fresh = QueueMachine(FileSegmentStore(d))
        t0 = time.perf_counter()
        fresh.restore(1, image)
        print(f"restore (reads {total} record headers back): {(time.perf_counter() - t0):.2f} s")
        assert fresh.encode_image() == image


if __name__ == "__main__":
    main()
