"""The command line's node administration and the scale-out settings of ``cmq serve``.

    cmq serve --node-id 4 --join http://10.0.0.1:8080 --zone b ...   join a running cluster
    cmq serve ... --replication 3                                    replicas per data group
    cmq node list [--url URL]          nodes, releases, zones, state, replicas, leaders, lag
    cmq node drain N [--wait S]        move every replica and leadership off node N
    cmq node activate N [--url URL]    undo a drain
    cmq node remove N [--url URL]      forget node N (refused while it holds replicas)

Each node command prints a table or a line (`cmq.cli.output`), or with ``--json`` its JSON
result; an error is one line on stderr with its code and a hint (with ``--json``, the server's
``{"error": {"code", "message"}}`` on stdout); exit status 1 on an error or a drain that did not
finish within ``--wait``.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from cmq.errors import CmqError

DEFAULT_URL = "http://127.0.0.1:8080"


def add_serve_arguments(s: argparse.ArgumentParser) -> None:
    """``cmq serve``'s ``--join`` (its ``--zone`` and ``--replication`` are value settings:
    `cmq.cli.settings`)."""
    s.add_argument(
        "--join",
        help="URL[,URL...] of running nodes: join that cluster (no --peers needed)",
    )


def serve_settings(
    args: argparse.Namespace, conf: dict[str, Any], http: str, node_id: int
) -> dict[str, Any]:
    """`cmq.node.config.NodeConfig`'s ``join`` (from ``--join``, then ``CMQ_JOIN``, then the
    TOML file's ``join``) and ``http``; exits with a message on a bad node id."""
    join = args.join if args.join is not None else os.environ.get("CMQ_JOIN", conf.get("join"))
    urls: tuple[str, ...] = ()
    if join:
        urls = tuple(u.strip() for u in str(join).split(",") if u.strip())
    if node_id <= 0:
        raise SystemExit("--node-id must be a positive integer")
    return {"join": urls, "http": http}


def add_node_commands(sub: Any) -> None:
    """``cmq node list|drain|activate|remove``."""
    n = sub.add_parser("node", help="list, drain or remove cluster nodes")
    nsub = n.add_subparsers(dest="node_cmd", required=True)
    ls = nsub.add_parser("list", help="nodes, zones, state, replicas, leaders, lag")
    dr = nsub.add_parser("drain", help="move every replica and leadership off a node")
    dr.add_argument("node", type=int)
    dr.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="wait up to SECONDS (showing progress) until the node holds no replica, incoming "
        "move, leadership or catalog vote",
    )
    ac = nsub.add_parser("activate", help="undo a drain: the node takes replicas again")
    ac.add_argument("node", type=int)
    rm = nsub.add_parser("remove", help="forget a drained node")
    rm.add_argument("node", type=int)
    for c in (ls, dr, ac, rm):
        c.add_argument("--url", default=DEFAULT_URL)
        c.add_argument("--json", action="store_true", help="print the JSON result")
    n.set_defaults(func=_node)


def _holds(row: dict[str, Any]) -> bool:
    return bool(
        row.get("replicas")
        or row.get("incoming")
        or row.get("leaders")
        or row.get("meta") == "voter"
    )


def _node(args: argparse.Namespace) -> int:
    from cmq.cli import (
        output as cli_output,  # imported late, like the client: ``cmq serve`` needs neither
    )
    from cmq.client import SyncClient

    try:
        with SyncClient(args.url) as client:
            if args.node_cmd == "list":
                result: Any = {"nodes": with_releases(client.list_nodes(), client)}
            elif args.node_cmd == "drain":
                client.drain_node(args.node)
                result = {"node": args.node, "state": "draining"}
                if args.wait > 0:
                    result["state"] = _wait_drained(client, args.node, args.wait, cli_output)
            elif args.node_cmd == "activate":
                client.activate_node(args.node)
                result = {"node": args.node, "state": "active"}
            else:
                client.remove_node(args.node)
                result = {"node": args.node, "state": "removed"}
    except CmqError as e:
        cli_output.report_error(e.code, e.message, as_json=args.json)
        return 1
    if args.json:
        cli_output.print_json(result)
    else:
        cli_output.render("node list" if args.node_cmd == "list" else "node change", result)
    return 0 if result.get("state") != "draining (timed out)" else 1


def with_releases(rows: list[dict[str, Any]], client: Any) -> list[dict[str, Any]]:
    """``rows`` of ``/v1/nodes`` with each node's ``release`` from the answering node's
    ``/v1/status`` (`cmq.admin.peer_releases`: what each node last reported); rows stay as they
    are when the status cannot be read (an older node: no releases, or no access)."""
    try:
        nodes = client.status().get("nodes", {})
    except CmqError:
        return rows
    out = []
    for r in rows:
        release = nodes.get(str(r.get("id")), {}).get("release")
        out.append(r | {"release": release} if release else r)
    return out


def _wait_drained(client: Any, node: int, seconds: float, out: Any) -> str:
    """Poll the node list until ``node`` holds nothing, showing progress; the final state."""
    deadline = time.monotonic() + seconds
    with out.progress(f"draining node {node}") as update:
        while True:
            row = next((r for r in client.list_nodes() if r.get("id") == node), None)
            if row is None or not _holds(row):
                return "drained"
            if time.monotonic() > deadline:
                return "draining (timed out)"
            update(
                f"draining node {node}: replicas {row.get('replicas') or '-'}, "
                f"incoming {row.get('incoming') or '-'}, leads {row.get('leaders') or '-'}"
            )
            time.sleep(0.5)
