"""One J2 run over the stream protocol on a fresh 3-node local cluster, with each node's CPU
per message; the code under test is whatever ``cmq`` this process imports (the nodes inherit
its environment), so an A/B of two source trees alternates invocations:

    PYTHONPATH=/path/to/tree python bench/batch_receipts_j2.py --label off [--seconds 15]

`bench/stream_consumers.py`'s J2 (4 producers, 2 consumers with a prefetch of 64, batches of
at most 32, credit back as the ack is sent), then per node ``process_cpu_seconds_total``
before and after over the messages acked (the queue's leader leases, mints, verifies and
proposes). Prints one JSON line: the label, sent/s, acked/s, e2e p50/p99, missing, dups, and
the leader's and the whole cluster's CPU µs per acked message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import uuid
from pathlib import Path

from leader_direct import cpu_seconds, leader_url  # this script's neighbours in bench/
from stream_consumers import figures, j2

from cmq.cli.launch import LocalCluster
from cmq.client import SyncClient


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--label", required=True)
    ap.add_argument("--seconds", type=float, default=15)
    a = ap.parse_args()
    cluster = LocalCluster(Path(tempfile.mkdtemp(prefix="cmq-batch-j2-")) / "nodes", 3)
    cluster.start()
    try:
        asyncio.run(cluster.ready(90))
        time.sleep(2)
        queue = "br-" + uuid.uuid4().hex[:8]
        with SyncClient(cluster.urls, timeout=30) as client:
            client.create_queue(queue, {})
        lead = leader_url(cluster.urls, queue)
        cpu0 = {u: cpu_seconds(u) for u in cluster.urls}
        st = asyncio.run(j2(cluster.urls, queue, a.seconds, "send", 64))
        cpu1 = {u: cpu_seconds(u) for u in cluster.urls}
    finally:
        cluster.stop(30)
    f = figures(st)
    acked = max(1, len(st.received))
    out = {
        "label": a.label,
        **{k: f[k] for k in ("sent_s", "acked_s", "e2e_p50_ms", "e2e_p99_ms", "missing", "dups")},
        "leader_cpu_us_per_msg": round((cpu1[lead] - cpu0[lead]) * 1e6 / acked, 1),
        "cluster_cpu_us_per_msg": round(
            sum(cpu1[u] - cpu0[u] for u in cluster.urls) * 1e6 / acked, 1
        ),
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
