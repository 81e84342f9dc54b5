"""The performance figures the side-by-side harness does not take, on one fresh local cluster
(3 nodes on loopback started as `cmq dev` starts them, every confirm a majority fsync), all in
one run so that they compare as ratios:

    python bench/perf_extra.py [--seconds 15] [--jobs protocols,large,open-loop] [--json]
                               [--http-workers N] [--signed] [--protocols http,stream]

* ``protocols``: the harness's jobs (1 KiB; J1 = 4 producers x 64 sends in flight, no
  consumers; J1x10 = the same with 10 messages per send; J2 = J1 plus 2 consumers) with
  `cmq bench`, over HTTP and over the streaming protocol, alternated; with the nodes' CPU
  seconds per 1,000 messages (from ``/proc``, HTTP front ends included) and the share of the
  machine's cores the three nodes used (what is left for anything else, a front-end process
  included). ``--protocols`` picks the protocols; ``--signed`` runs the nodes without
  ``--anonymous`` and every request signed (the cluster credential, an admin key).
* ``large``: the disk's own bandwidth when every write is followed by ``fdatasync`` (64 KiB and
  1 MiB writes in the cluster's data directory, before and after), then 64 KiB and 1 MiB
  messages confirmed (4 producers x 4 in flight, streaming protocol), in MB/s. The three
  replicas share this machine's one disk, so the physical ceiling is a third of its bandwidth.
* ``open-loop``: J2 at a fixed rate, half of the rate J2 reached at full speed in this run
  (`cmq bench --rate` is open loop: latency counts from when each send was due), for both
  protocols: confirm and end-to-end p50 / p99 / p99.9.

Prints a table per job (and everything as JSON with ``--json``); the cluster is stopped at the
end. Exit status 1 when a run lost or duplicated a message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from cmq.cli.launch import LocalCluster
from cmq.client import SyncClient

ROOT = Path(__file__).resolve().parent.parent
MiB = 1024 * 1024


def fdatasync_bandwidth(directory: str, block: int, total: int = 64 * MiB) -> float:
    """MB/s of sequential ``block``-byte writes, each followed by ``fdatasync``."""
    path = os.path.join(directory, f"fdatasync-probe-{block}")
    data = os.urandom(block)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        start = time.perf_counter()
        written = 0
        while written < total:
            written += os.write(fd, data)
            os.fdatasync(fd)
        took = time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
    return written / took / 1e6


class Cluster:
    """3 nodes in a temp directory (`cmq.cli.launch`, as `cmq dev` runs them), stopped by
    :meth:`stop`."""

    def __init__(self, http_workers: int = 0, signed: bool = False) -> None:
        """``http_workers``: each node's HTTP front-end processes (``--http-workers``);
        ``signed``: requests must be signed (no ``--anonymous``), and are."""
        self.data = tempfile.mkdtemp(prefix="cmq-perf-extra-")
        self.nodes = LocalCluster(
            Path(self.data) / "nodes", 3, http_workers=http_workers or None, anonymous=not signed
        )
        self.urls = self.nodes.urls
        self.env: dict[str, str] = {}
        """What `cmq bench` runs with (the credential it signs with, when ``signed``)."""
        if signed:
            key_id, secret = self.nodes.credential
            self.env = {"CMQ_ACCESS_KEY_ID": key_id, "CMQ_SECRET_ACCESS_KEY": secret}
        self.nodes.start()
        try:
            asyncio.run(self.nodes.ready(90))
        except TimeoutError as e:
            self.nodes.stop()
            raise SystemExit(str(e)) from None
        time.sleep(2)

    def create_queue(self, name: str, attributes: dict[str, Any]) -> None:
        key = self.nodes.credential if self.env else None
        with SyncClient(self.urls, timeout=30, access_key=key) as client:
            client.create_queue(name, attributes)

    def stop(self) -> None:
        self.nodes.stop(30)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except FileNotFoundError:
        return []


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def node_cpu_seconds(cluster: Cluster) -> list[tuple[float, float]]:
    """Each node's CPU seconds as (its node process, its HTTP front-end processes), from
    ``/proc``: the front ends are the node processes' children."""
    return [
        (_cpu_seconds(node), sum(_cpu_seconds(front) for front in _children(node)))
        for node in cluster.nodes.pids()
    ]


def bench(cluster: Cluster, *args: str) -> dict[str, Any]:
    """One `cmq bench --json` run against ``cluster``; its report, with the nodes' CPU use
    over it (``node_cpu_s``, ``cpu_s_per_1000_msgs_per_node``, ``cores_used_by_nodes``: front
    ends included; ``node_process_cpu_s_per_1000_msgs``: the node processes alone)."""
    cpu0, t0 = node_cpu_seconds(cluster), time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "cmq", "bench", "--url", ",".join(cluster.urls), "--json", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        env={**os.environ, **cluster.env},
    )
    try:
        report: dict[str, Any] = json.loads(out.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"cmq bench {' '.join(args)} failed:\n{out.stderr[-2000:]}") from None
    wall = time.monotonic() - t0
    cpu1 = node_cpu_seconds(cluster)
    own = [b[0] - a[0] for a, b in zip(cpu0, cpu1, strict=True)]
    cpu = [sum(b) - sum(a) for a, b in zip(cpu0, cpu1, strict=True)]
    msgs = max(int(report["confirmed"]), 1)
    report["node_cpu_s"] = [round(c, 2) for c in cpu]
    report["cpu_s_per_1000_msgs_per_node"] = [round(c * 1000 / msgs, 4) for c in cpu]
    # The node processes alone (without their HTTP front ends): the Raft loop's own share.
    report["node_process_cpu_s_per_1000_msgs"] = [round(c * 1000 / msgs, 4) for c in own]
    report["cores_used_by_nodes"] = round(sum(cpu) / wall, 2)
    return report


def _clean(r: dict[str, Any]) -> bool:
    return not r.get("duplicates") and not r.get("missing")


JOBS = {
    "J1": ("--consumers", "0", "--no-drain"),
    "J1x10": ("--consumers", "0", "--no-drain", "--batch", "10"),
    "J2": ("--consumers", "2"),
}


def protocols(
    cluster: Cluster, seconds: int, protos: tuple[str, ...] = ("http", "stream")
) -> dict[str, Any]:
    """The harness's jobs over ``protos``, alternated per job."""
    out: dict[str, Any] = {}
    for job, args in JOBS.items():
        for proto in protos:
            r = bench(cluster, "--seconds", str(seconds), "--protocol", proto, *args)
            out[f"{job} {proto}"] = r
            print(
                f"{job:6} {proto:6} confirmed/s {r['confirmed_msgs_per_s']:>9,.0f}"
                f"  acked/s {r['acked_msgs_per_s']:>9,.0f}"
                f"  confirm p99 {r['confirm_latency_ms'].get('p99', 0):8.1f} ms"
                f"  e2e p99 {r['e2e_latency_ms'].get('p99', 0):8.1f} ms"
                f"  missing {r['missing']} dups {r['duplicates']}"
                f"  node CPU s/1000 msgs {r['cpu_s_per_1000_msgs_per_node']}"
                f"  cores used by nodes {r['cores_used_by_nodes']} of {os.cpu_count()}",
                flush=True,
            )
    return out


def large(cluster: Cluster, seconds: int) -> dict[str, Any]:
    """fdatasync bandwidth of the disk, then large messages confirmed, in MB/s."""
    disk = {
        f"{b // 1024} KiB": [fdatasync_bandwidth(cluster.data, b) for _ in range(2)]
        for b in (64 * 1024, MiB)
    }
    cluster.create_queue("perf-large", {"max_message_size": MiB})
    runs: dict[str, Any] = {}
    for size in (64 * 1024, MiB):
        r = bench(
            cluster,
            *("--queue", "perf-large", "--size", str(size), "--seconds", str(seconds)),
            *("--producers", "4", "--window", "4", "--consumers", "0", "--no-drain"),
            *("--protocol", "stream"),
        )
        runs[f"{size // 1024} KiB"] = r
    for block in (64 * 1024, MiB):
        disk[f"{block // 1024} KiB"].append(fdatasync_bandwidth(cluster.data, block))
    out: dict[str, Any] = {"disk_fdatasync_mb_s": disk, "runs": runs}
    for label, r in runs.items():
        mb_s = r["confirmed_msgs_per_s"] * r["config"]["size"] / 1e6
        ceiling = statistics.median(disk[label]) / 3
        out[f"{label} confirmed_mb_s"] = round(mb_s, 1)
        out[f"{label} share_of_third_of_disk"] = round(mb_s / ceiling, 2)
        print(
            f"{label:8} confirmed {r['confirmed_msgs_per_s']:>7,.1f} msgs/s = {mb_s:6.1f} MB/s;"
            f" disk fdatasync at {label} writes {statistics.median(disk[label]):6.1f} MB/s"
            f" (a third: {ceiling:5.1f}); ratio {mb_s / ceiling:4.2f};"
            f" confirm p50/p99 {r['confirm_latency_ms'].get('p50', 0):.0f}"
            f"/{r['confirm_latency_ms'].get('p99', 0):.0f} ms",
            flush=True,
        )
    return out


def open_loop(cluster: Cluster, seconds: int, full: dict[str, Any]) -> dict[str, Any]:
    """J2 at half the rate J2 reached at full speed (from ``full``, or measured now)."""
    out: dict[str, Any] = {}
    for proto in ("http", "stream"):
        max_run = full.get(f"J2 {proto}") or bench(
            cluster, "--seconds", str(seconds), "--protocol", proto, *JOBS["J2"]
        )
        rate = int(max_run["confirmed_msgs_per_s"] / 2)
        r = bench(
            cluster,
            *("--seconds", str(seconds), "--protocol", proto, "--rate", str(rate)),
            *JOBS["J2"],
        )
        out[proto] = {"max_rate": max_run["confirmed_msgs_per_s"], "rate": rate, "run": r}
        c, e = r["confirm_latency_ms"], r["e2e_latency_ms"]
        print(
            f"open loop {proto:6} at {rate:,}/s (half of {max_run['confirmed_msgs_per_s']:,.0f}):"
            f" confirmed/s {r['confirmed_msgs_per_s']:,.0f}"
            f"  confirm p50/p99/p99.9 {c.get('p50', 0):.1f}/{c.get('p99', 0):.1f}"
            f"/{c.get('p99.9', 0):.1f} ms  e2e {e.get('p50', 0):.1f}/{e.get('p99', 0):.1f}"
            f"/{e.get('p99.9', 0):.1f} ms  worst start late {r.get('schedule_lag_ms')} ms"
            f"  missing {r['missing']} dups {r['duplicates']}",
            flush=True,
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=int, default=15)
    ap.add_argument("--jobs", default="protocols,large,open-loop")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--http-workers",
        type=int,
        default=0,
        help="HTTP front-end processes per node (cmq serve --http-workers; their CPU counts)",
    )
    ap.add_argument("--signed", action="store_true", help="nodes ask for signatures; sign")
    ap.add_argument("--protocols", default="http,stream", help="of the protocols job")
    a = ap.parse_args()
    jobs = [j for j in a.jobs.split(",") if j]
    protos = tuple(p for p in a.protocols.split(",") if p)
    cluster = Cluster(a.http_workers, a.signed)
    result: dict[str, Any] = {}
    try:
        if "protocols" in jobs:
            result["protocols"] = protocols(cluster, a.seconds, protos)
        if "large" in jobs:
            result["large"] = large(cluster, a.seconds)
        if "open-loop" in jobs:
            result["open_loop"] = open_loop(cluster, a.seconds, result.get("protocols", {}))
    finally:
        cluster.stop()
    if a.json:
        print(json.dumps(result, indent=2))
    reports = [
        *result.get("protocols", {}).values(),
        *result.get("large", {}).get("runs", {}).values(),
    ]
    reports += [v["run"] for v in result.get("open_loop", {}).values()]
    return 0 if all(_clean(r) for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
