"""What a data group's restart costs with a backlog: `QueueMachine.restore` from its snapshot,
with segment indexes (the ``segment_index`` feature flag) and without (docs/operations.md).

The state is built directly on the state machine (no cluster, no Raft log): one queue, large
`Produce` batches of ``--size``-byte bodies into a `FileSegmentStore` under ``--dir`` (default:
a temporary directory), with a `QueueMachine.snapshot` (the segments fsynced, each index
written) before the last `ACTIVE_INDEX_RECORDS` - 1 messages and one after them: the worst case
for the active segment, whose index then lacks that many records (a restore scans them).
Default segment limits (64 MiB). Each restore is a new store and machine on the same files,
timed from the call to `restore` to its return (page cache warm: the files were just written
or read). First ``--runs`` restores with the indexes, then the index files are moved aside and
``--runs`` with the flag off (every record of every segment scanned); the median of each is
reported, with the segments counted each way. Each ``--messages`` value is a separate build,
removed afterwards.

    python bench/restart_time.py [--messages 1000000 10000000] [--size 100] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from cmq.fsm.commands import CreateQueue, NewMessage, Produce
from cmq.fsm.framed import ACTIVE_INDEX_RECORDS
from cmq.fsm.machine import QueueMachine
from cmq.fsm.segments import FileSegmentStore
from cmq.model import QueueAttributes

T0 = 1_700_000_000_000
BATCH = 2_000
INDEX = 1_000


def build(root: Path, messages: int, size: int) -> tuple[bytes, float]:
    """Fill one queue with ``messages`` messages under ``root``; the snapshot image and the
    seconds it took."""
    start = time.monotonic()
    store = FileSegmentStore(root, indexes=True)
    m = QueueMachine(store)
    m.execute(CreateQueue("backlog", QueueAttributes(message_retention_seconds=1_209_600), T0))
    body = b"x" * size
    sent = 0
    now = T0
    first_snapshot = max(0, messages - (ACTIVE_INDEX_RECORDS - 1))
    while sent < messages:
        if sent == first_snapshot:
            m.snapshot()
        n = min(BATCH, messages - sent, first_snapshot - sent if sent < first_snapshot else BATCH)
        batch = tuple(
            NewMessage(f"m-{sent + i:012d}", body, False, (), None, None) for i in range(n)
        )
        m.execute(Produce("backlog", now, batch))
        m.end_batch()
        sent += n
        now += 1
    image = m.snapshot()
    store.close()
    return image, time.monotonic() - start


def restore_once(root: Path, image: bytes, indexes: bool) -> tuple[float, int, int, int]:
    """Seconds of one restore on a fresh store, and how many segments came wholly from an
    index, from an index then a scan of the records after it, and from a scan."""
    store = FileSegmentStore(root, indexes=indexes)
    m = QueueMachine(store)
    start = time.monotonic()
    m.restore(INDEX, image)
    took = time.monotonic() - start
    counts = store.last_recovery
    store.close()
    return took, counts.indexed, counts.partly, counts.scanned


def disk_bytes(root: Path, suffix: str) -> int:
    return sum(p.stat().st_size for p in root.rglob(f"*{suffix}"))


def run(messages: int, size: int, runs: int, parent: str | None) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="cmq-restart-time-", dir=parent))
    try:
        image, build_s = build(root, messages, size)
        seg_bytes, idx_bytes = disk_bytes(root, ".seg"), disk_bytes(root, ".idx")
        with_index = [restore_once(root, image, True) for _ in range(runs)]
        for p in root.rglob("*.idx"):
            os.replace(p, p.with_suffix(".idx-aside"))
        without = [restore_once(root, image, False) for _ in range(runs)]
        return {
            "messages": messages,
            "body_bytes": size,
            "segments": sum(with_index[0][1:]),
            "segment_mib": round(seg_bytes / 2**20, 1),
            "index_mib": round(idx_bytes / 2**20, 1),
            "build_seconds": round(build_s, 1),
            "restore_seconds_indexed": round(statistics.median(r[0] for r in with_index), 3),
            "indexed_partly_scanned": with_index[0][1:],
            "restore_seconds_scanned": round(statistics.median(r[0] for r in without), 3),
            "scanned_runs": without[0][1:],
            "runs": runs,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to build (default: the temp directory)")
    args = ap.parse_args()
    for n in args.messages:
        print(json.dumps(run(n, args.size, args.runs, args.dir)), flush=True)


if __name__ == "__main__":
    main()
