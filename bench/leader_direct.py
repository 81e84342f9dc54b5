"""Leader-direct HTTP clients, A/B: J1 (one producer, 64 sends of one 1 KiB message in flight)
and J1x10 (the same, ten messages per send) against a running 3-node cluster, with the client
following the ``Cmq-Leader`` hint (``cmq bench``, the default) and without it
(``--no-leader-direct``: every send goes to the producer's own node, which forwards it).

    python bench/leader_direct.py --url URL,URL,URL [--seconds 15] [--rounds 3]

Each run gets a fresh queue, created before the run; the URLs are then ordered so that the
producer's own node is a follower of the queue's group (the case leader-direct changes: a
producer on the leader is direct either way). Runs alternate (on/off, then off/on the next
round) so both modes see the same machine. Per run: confirmed msgs/s, and CPU microseconds per
confirmed message on the leader's node and on all three nodes together (each node's
``process_cpu_seconds_total`` before and after). Prints every run and the medians as JSON and
as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import urllib.request
import uuid
from typing import Any


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return bytes(resp.read())


def call(method: str, url: str) -> None:
    req = urllib.request.Request(url, method=method, data=b"{}")
    with urllib.request.urlopen(req, timeout=30):
        pass


def cpu_seconds(url: str) -> float:
    for line in get(f"{url}/metrics").decode().splitlines():
        if line.startswith("process_cpu_seconds_total "):
            return float(line.split()[1])
    raise RuntimeError(f"{url}/metrics has no process_cpu_seconds_total")


def leader_url(urls: list[str], queue: str) -> str:
    """The URL (of ``urls``) of the node leading ``queue``'s group, per the first node."""
    status = json.loads(get(f"{urls[0]}/v1/status"))
    group = str(status["placement"][queue])
    lead = str(status["groups"][group]["leader"])
    http = status["nodes"][lead]["http"]
    return next(u for u in urls if u.endswith(f"//{http}"))


def run(urls: list[str], seconds: float, batch: int, direct: bool) -> dict[str, Any]:
    queue = f"ld-{uuid.uuid4().hex[:8]}"
    call("PUT", f"{urls[0]}/v1/queues/{queue}")
    lead = leader_url(urls, queue)
    order = [u for u in urls if u != lead] + [lead]  # the producer's node: a follower
    cpu0 = {u: cpu_seconds(u) for u in urls}
    argv = [sys.executable, "-m", "cmq", "bench", "--url", ",".join(order), "--queue", queue]
    argv += ["--producers", "1", "--consumers", "0", "--size", "1024", "--window", "64"]
    argv += ["--batch", str(batch), "--seconds", str(seconds), "--json"]
    if not direct:
        argv.append("--no-leader-direct")
    out = subprocess.run(argv, capture_output=True, check=True, text=True).stdout
    cpu1 = {u: cpu_seconds(u) for u in urls}
    call("DELETE", f"{urls[0]}/v1/queues/{queue}")
    report = json.loads(out)
    confirmed = max(1, int(report["confirmed"]))
    return {
        "job": "J1" if batch == 1 else f"J1x{batch}",
        "leader_direct": direct,
        "confirmed_per_s": report["confirmed_msgs_per_s"],
        "p50_ms": report["confirm_latency_ms"].get("p50"),
        "leader_cpu_us_per_msg": round((cpu1[lead] - cpu0[lead]) * 1e6 / confirmed, 1),
        "cluster_cpu_us_per_msg": round(sum(cpu1[u] - cpu0[u] for u in urls) * 1e6 / confirmed, 1),
        "errors": report["errors"],
        "failed": report["failed"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True, help="URL,URL,URL of a running 3-node cluster")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    urls = [u.strip().rstrip("/") for u in a.url.split(",") if u.strip()]
    runs: list[dict[str, Any]] = []
    for r in range(a.rounds):
        for batch in (1, 10):
            for direct in (True, False) if r % 2 == 0 else (False, True):
                one = run(urls, a.seconds, batch, direct)
                print(json.dumps(one), flush=True)
                runs.append(one)
    print(
        "\n| job | leader-direct | confirmed/s | p50 ms | leader CPU µs/msg | cluster CPU µs/msg |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for job in ("J1", "J1x10"):
        for direct in (False, True):
            mine = [x for x in runs if x["job"] == job and x["leader_direct"] is direct]

            def med(key: str, rows: list[dict[str, Any]] = mine) -> float:
                return statistics.median(float(x[key] or 0) for x in rows)

            rates = " / ".join(f"{x['confirmed_per_s']:,.0f}" for x in mine)
            print(
                f"| {job} | {'on' if direct else 'off'} | **{med('confirmed_per_s'):,.0f}** "
                f"({rates}) | {med('p50_ms'):.1f} | {med('leader_cpu_us_per_msg'):.0f} "
                f"| {med('cluster_cpu_us_per_msg'):.0f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
