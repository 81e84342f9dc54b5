"""A standalone raftlog node hosting `AppendLog` groups, with a small HTTP control API.

A test harness, not part of the library: used by the multi-process tests and the benchmark (the
queue service has its own entry point). Run from the repository root::

    python -m tests.raftlog.harness.node --id 1 --listen 127.0.0.1:7001 --http 127.0.0.1:8001 \
        --peers 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003 --data-dir /tmp/n1 --groups 4

The cluster secret comes from ``RAFTLOG_SECRET`` (required). HTTP endpoints:

- ``POST /propose/{group}`` body = the command → ``{"pos": n}`` once applied on this leader;
  ``421 {"error": "NotLeader", "leader": id}``, ``503 {"error": "Overloaded"|...}`` otherwise.
- ``GET /status`` → every group's role, term, leader, commit, applied, per-peer progress.
- ``GET /applied/{group}`` → ``{"commands": [base64...], "indexes": [...]}``.
- ``GET /stats`` → WAL counters (fsyncs, records per fsync, latency buckets) and group counters.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import logging
import os
import signal
from dataclasses import asdict

import orjson
from aiohttp import web

from raftlog.errors import NotLeader, RaftError
from raftlog.runtime.applog import AppendLog, Checksum
from raftlog.runtime.config import RuntimeConfig, new_event_loop
from raftlog.runtime.multiraft import MultiRaft
from raftlog.transport.peer import Address, parse_peers


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def make_app(node: MultiRaft) -> web.Application:
    """The control API over ``node``."""

    async def propose(request: web.Request) -> web.Response:
        group = int(request.match_info["group"])
        body = await request.read()
        try:
            pos = await node.propose(group, body, timeout=10)
        except NotLeader as e:
            return _json({"error": e.code, "leader": e.leader_hint}, 421)
        except RaftError as e:
            return _json({"error": e.code, "message": str(e)}, 503)
        except (TimeoutError, KeyError, ValueError) as e:
            return _json({"error": type(e).__name__, "message": str(e)}, 503)
        return _json({"pos": pos})

    async def status(_: web.Request) -> web.Response:
        out = {}
        for gid, g in sorted(node.groups.items()):
            st = g.status()
            out[str(gid)] = {
                "role": st.role.name,
                "term": st.term,
                "leader": st.leader,
                "commit": st.commit,
                "applied": st.applied,
                "last_index": st.last_index,
                "voters": list(st.conf.voters),
                "learners": list(st.conf.learners),
                "peers": {
                    str(p): {"match": ps.match, "state": ps.state.name}
                    for p, ps in st.peers.items()
                },
                "stopped": None if g.stopped is None else str(g.stopped),
            }
        return _json({"node": node.id, "groups": out})

    async def applied(request: web.Request) -> web.Response:
        group = int(request.match_info["group"])
        sm = node.group(group).sm
        if not isinstance(sm, AppendLog):
            return _json({"error": "NotAvailable", "message": "started without applog"}, 404)
        return _json(
            {
                "commands": [base64.b64encode(c).decode() for c in sm.commands],
                "indexes": sm.indexes,
            }
        )

    async def stats(_: web.Request) -> web.Response:
        snap = node.stats()
        wal = [asdict(w) | {"records_per_fsync": w.records_per_fsync} for w in snap.wals]
        groups = {str(g.group): asdict(g) for g in snap.groups}
        peers = {str(p.peer): asdict(p) for p in snap.peers}
        return _json({"wal": wal, "groups": groups, "peers": peers, "sent": asdict(snap.sent)})

    async def bench(request: web.Request) -> web.Response:
        """Drive proposals from inside this process (no HTTP per proposal) to the groups this
        node leads: ``{"groups": [..], "concurrency": n, "seconds": s, "size": bytes}``."""
        spec = orjson.loads(await request.read())
        result = await run_local_load(
            node,
            [int(g) for g in spec["groups"]],
            concurrency=int(spec.get("concurrency", 64)),
            seconds=float(spec.get("seconds", 5.0)),
            size=int(spec.get("size", 1024)),
        )
        return _json(result)

    app = web.Application(client_max_size=8 << 20)
    app.router.add_post("/bench", bench)
    app.router.add_post("/propose/{group}", propose)
    app.router.add_get("/status", status)
    app.router.add_get("/applied/{group}", applied)
    app.router.add_get("/stats", stats)
    return app


async def run_local_load(
    node: MultiRaft, groups: list[int], *, concurrency: int, seconds: float, size: int
) -> dict[str, object]:
    """``concurrency`` proposers per group, each proposing ``size``-byte commands back to back
    for ``seconds``; returns committed count and latency samples (seconds, sorted)."""
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    errors: dict[str, int] = {}
    deadline = loop.time() + seconds
    payload = b"x" * size

    async def worker(group: int) -> None:
        while loop.time() < deadline:
            t0 = loop.time()
            try:
                await node.propose(group, payload, timeout=30)
            except (RaftError, TimeoutError) as e:
                name = type(e).__name__
                errors[name] = errors.get(name, 0) + 1
                await asyncio.sleep(0.01)
                continue
            latencies.append(loop.time() - t0)

    started = loop.time()
    await asyncio.gather(*(worker(g) for g in groups for _ in range(concurrency)))
    elapsed = loop.time() - started
    latencies.sort()
    return {
        "committed": len(latencies),
        "seconds": elapsed,
        "errors": errors,
        "p50": latencies[len(latencies) // 2] if latencies else None,
        "p99": latencies[int(len(latencies) * 0.99)] if latencies else None,
    }


async def serve(args: argparse.Namespace) -> None:
    secret = os.environ.get("RAFTLOG_SECRET", "").encode()
    if not secret:
        raise SystemExit("RAFTLOG_SECRET must be set (the cluster's shared secret)")
    peers = parse_peers(args.peers)
    os.makedirs(args.data_dir, exist_ok=True)
    cfg = RuntimeConfig(
        node_id=args.id,
        listen=Address.parse(args.listen),
        peers=peers,
        secret=secret,
        data_dirs=(args.data_dir,),
        tick_interval=args.tick,
    )
    node = MultiRaft(cfg)
    await node.start()
    for gid in range(1, args.groups + 1):
        sm = AppendLog() if args.state_machine == "applog" else Checksum()
        await node.open_group(gid, sm, voters=sorted(peers))
    runner = web.AppRunner(make_app(node), access_log=None)
    await runner.setup()
    http = Address.parse(args.http)
    await web.TCPSite(runner, http.host, http.port, reuse_address=True).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    print(f"raftlog node {args.id} ready http={args.http}", flush=True)
    await stop.wait()
    await runner.cleanup()
    await node.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.raftlog.harness.node", description=__doc__)
    p.add_argument("--id", type=int, required=True)
    p.add_argument("--listen", required=True, help="HOST:PORT for peer traffic")
    p.add_argument("--http", required=True, help="HOST:PORT for the control API")
    p.add_argument("--peers", required=True, help="ID=HOST:PORT,... for every node")
    p.add_argument("--data-dir", required=True)
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--tick", type=float, default=0.05, help="seconds per Raft tick")
    p.add_argument(
        "--state-machine",
        choices=("applog", "checksum"),
        default="applog",
        help="applog keeps every command (for checking); checksum is constant-size (benchmarks)",
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    loop = new_event_loop()
    with contextlib.closing(loop):
        loop.run_until_complete(serve(args))


if __name__ == "__main__":
    main()
