"""``cmq dev``: a local cluster in the foreground, on `cmq.cli.launch`.

    cmq dev [--nodes 3] [--data-dir ./data/dev] [--http-port 8080] [--peer-port P] [--groups 4]

Node ``i`` serves HTTP on ``--http-port + i - 1`` and peer traffic on ``--peer-port + i - 1``
(by default the HTTP port + 1000, so two dev clusters on different HTTP ports never collide),
keeps its data in ``<data-dir>/node<i>`` and its log in ``<data-dir>/node<i>.log``; the cluster
secret is made once in ``<data-dir>/secret``, so a restart reuses the data. Requests are
anonymous. SIGINT, SIGTERM and SIGHUP stop every node (`DEV_STOP_SECONDS` for all of them
together, then SIGKILL); a node that exits stops the others.
"""

from __future__ import annotations

import argparse
import secrets
import signal
import time
from pathlib import Path
from typing import Any

from cmq.cli.launch import (
    DEFAULT_HTTP_PORT,
    DEFAULT_PEER_PORT,
    NodeProcesses,
    founders,
    wait_ready,
)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DEV_STOP_SECONDS = 5.0
"""How long `cmq dev` waits for its nodes to exit after a stop before killing them."""
READY_SECONDS = 30.0


class _Stopped(Exception):
    """A stop signal reached `cmq dev`."""


def _stop_on_signal(signum: int, _frame: object) -> None:
    raise _Stopped(signal.Signals(signum).name)


def add_dev_command(sub: Any) -> None:
    d = sub.add_parser("dev", help="run a local cluster in the foreground")
    d.add_argument("--nodes", type=int, default=3)
    d.add_argument("--data-dir", default="./data/dev")
    d.add_argument("--http-port", type=int, default=DEFAULT_HTTP_PORT)
    d.add_argument(
        "--peer-port",
        type=int,
        help="first peer port (default: --http-port + "
        f"{DEFAULT_PEER_PORT - DEFAULT_HTTP_PORT}, so {DEFAULT_PEER_PORT} for {DEFAULT_HTTP_PORT})",
    )
    d.add_argument("--groups", type=int, default=4)
    d.set_defaults(func=dev)


def _secret(root: Path) -> str:
    path = root / "secret"
    if not path.exists():
        path.write_text(secrets.token_hex(32))
        path.chmod(0o600)
    return path.read_text().strip()


def dev(args: argparse.Namespace) -> int:
    # INT, TERM and HUP all stop every node started here (the `finally` below).
    for sig in STOP_SIGNALS:
        signal.signal(sig, _stop_on_signal)
    root = Path(args.data_dir)
    root.mkdir(parents=True, exist_ok=True)
    n = args.nodes
    peer_base = args.peer_port
    if peer_base is None:
        peer_base = args.http_port + DEFAULT_PEER_PORT - DEFAULT_HTTP_PORT
    if max(args.http_port, peer_base) + n - 1 > 65535:
        raise SystemExit("--http-port/--peer-port leave no room for the nodes' ports")
    nodes = founders(
        n,
        root,
        http_ports=[args.http_port + i for i in range(n)],
        peer_ports=[peer_base + i for i in range(n)],
        groups=args.groups,
        anonymous=True,
    )
    # The whole cluster stops at once: no node can take a leadership handed to it.
    procs = NodeProcesses(root, _secret(root), env={"CMQ_HANDOFF_SECONDS": "0"})
    try:
        for settings in nodes.values():
            procs.start(settings)
        urls = [s.url for s in nodes.values()]
        from cmq.cli.output import progress

        with progress(f"starting {n} nodes (logs in {root}/node*.log)"):
            ready = wait_ready(urls, READY_SECONDS)
        if not ready:
            print("the cluster did not become ready; see the node logs in", root)
            return 1
        _banner(root, urls)
        while len(procs.running()) == n:
            time.sleep(0.5)
        print("a node exited; stopping the cluster (see its log)")
        return 1
    except (_Stopped, KeyboardInterrupt) as e:
        print(f"\n{e or 'SIGINT'}: stopping the cluster", flush=True)
        return 0
    finally:
        # Further stop signals are ignored while the nodes stop.
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        procs.stop_all(DEV_STOP_SECONDS)


def _banner(root: Path, urls: list[str]) -> None:
    print(f"cmq dev cluster: {len(urls)} nodes, data in {root}, logs in {root}/node*.log")
    print("cmq dev: ANONYMOUS access (--anonymous): requests are not authenticated")
    for i, u in enumerate(urls):
        print(f"  node {i + 1}: {u}")
    u = urls[0]
    print(
        "try:\n"
        f"  curl -X PUT {u}/v1/queues/demo\n"
        f"  curl -X POST {u}/v1/queues/demo/messages "
        '-d \'{"messages":[{"body":"hello"}]}\'\n'
        f"  curl -X POST {u}/v1/queues/demo/messages/receive -d '{{}}'\n"
        "Ctrl-C stops the cluster (a restart reuses the data).",
        flush=True,
    )
