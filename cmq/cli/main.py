# PYTHON_ARGCOMPLETE_OK
"""The ``cmq`` command: run nodes, run a local cluster, administer queues, send and receive,
generate load.

    cmq serve --node-id 1 --http 127.0.0.1:8080 --peer 127.0.0.1:9080 \\
              --peers 1=127.0.0.1:9080,2=127.0.0.1:9081,3=127.0.0.1:9082 --data-dir ./d1
    cmq dev [--nodes 3] [--data-dir ./data/dev] [--http-port 8080]
    cmq queue create|set|list|stats|delete ... [--max-delay S] [--retry INITIAL,MULT,MAX]
    cmq send [--delay S | --deliver-at RFC3339] [--ttl S] ...     cmq receive [--ack] ...
    cmq status                                  (nodes, their releases, groups, leaders, lag)
    cmq --version                               (cmq 0.2.0 (peer protocol 1-1))
    cmq bench [--producers 4] [--consumers 2] [--size 1024] [--batch 1] [--rate 0] ...
    cmq archive --url URL[,URL...] --out DIR [--queue NAME ...]   (cmq/archive/main.py)

``serve`` and its settings are `cmq.cli.serve`'s; the other commands are here or in the
`cmq.cli` module each ``add_*`` comes from.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from cmq.cli.backup import add_backup_commands
from cmq.cli.cluster import add_cluster_commands
from cmq.cli.completion import add_completion_command, complete
from cmq.cli.dev import add_dev_command
from cmq.cli.keys import (
    add_key_commands,
    add_security_options,
    apply_security_options,
)
from cmq.cli.launch import DEFAULT_HTTP_PORT
from cmq.cli.nodes import add_node_commands
from cmq.cli.serve import add_serve_command
from cmq.cli.top import add_top_command
from cmq.upgrade.release import version_line

if TYPE_CHECKING:
    from cmq.client import EntryResult, QueueAttributes, ReceivedMessage, SyncClient

DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_HTTP_PORT}"


# -- client commands -------------------------------------------------------------------------------
def _client_command(args: argparse.Namespace, call: Callable[[SyncClient], Any], kind: str) -> int:
    """Run ``call`` with a client of ``--url``; print its result as tables (``kind`` names the
    renderer, `cmq.cli.output`) or, with ``--json``, as JSON; an error as one line (``--json``:
    ``{"error": {"code", "message"}}`` as the server renders it). 0 on success, 1 on an error."""
    from cmq.cli import output as cli_output
    from cmq.client import SyncClient
    from cmq.errors import CmqError

    with SyncClient(args.url) as client:
        try:
            payload = call(client)
        except CmqError as e:
            cli_output.report_error(e.code, e.message, as_json=args.json)
            return 1
    if args.json:
        cli_output.print_json(payload)
    else:
        cli_output.render(kind, payload)
    return 0


def _attributes(a: QueueAttributes) -> dict[str, Any]:
    return dataclasses.asdict(a)


def _received(m: ReceivedMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"id": m.id, "seq": m.seq}
    if isinstance(m.body, str):
        out["body"] = m.body
    else:
        out["body_base64"] = base64.b64encode(m.body).decode("ascii")
    out.update(
        receipt=m.receipt,
        receive_count=m.receive_count,
        sent_at=m.sent_at_ms,
        attributes=dict(m.attributes),
    )
    if m.priority:
        out["priority"] = m.priority
    return out


def _results(results: list[EntryResult]) -> dict[str, Any]:
    return {
        "results": [
            {"receipt": r.receipt, "ok": r.ok} | ({"error": r.error} if r.error else {})
            for r in results
        ]
    }


def _list_queues(c: SyncClient, *, with_stats: bool) -> dict[str, Any]:
    """``{"queues": [{"name"}]}``; for the table also each queue's stats (the first 500)."""
    from cmq.errors import CmqError

    names = c.list_queues()
    if not with_stats:
        return {"queues": [{"name": n} for n in names]}
    out: list[dict[str, Any]] = []
    for n in names[:500]:
        try:
            out.append({"name": n, "stats": dataclasses.asdict(c.get_queue(n).stats)})
        except CmqError as e:
            out.append({"name": n, "error": e.code})
    return {"queues": out}


def _queue(args: argparse.Namespace) -> int:
    if args.action == "list":
        return _client_command(
            args, lambda c: _list_queues(c, with_stats=not args.json), "queue list"
        )
    if not args.name:
        raise SystemExit("a queue name is required")
    name = args.name
    if args.action in ("create", "set"):
        from cmq.cli.schedule import queue_attributes

        attrs = queue_attributes(args.attribute or [], args.max_delay, args.retry)
        if args.priorities is not None:
            attrs["priorities"] = args.priorities
    if args.action == "create":

        def create(c: SyncClient) -> dict[str, Any]:
            got = c.create_queue(name, attrs)
            return {
                "name": got.name,
                "created": got.created,
                "attributes": _attributes(got.attributes),
            }

        return _client_command(args, create, "queue create")
    if args.action == "set":
        if not attrs:
            raise SystemExit("queue set needs --attribute, --max-delay, --retry or --priorities")

        def update(c: SyncClient) -> dict[str, Any]:
            got = c.set_attributes(name, attrs)
            return {"name": name, "attributes": _attributes(got)}

        return _client_command(args, update, "queue set")
    if args.action == "stats":

        def stats(c: SyncClient) -> dict[str, Any]:
            info = c.get_queue(name)
            return {
                "name": info.name,
                "attributes": _attributes(info.attributes),
                "stats": dataclasses.asdict(info.stats),
            }

        return _client_command(args, stats, "queue stats")

    if args.action == "rewind":
        if not args.since:
            raise SystemExit("queue rewind needs --since TIME (e.g. 2026-11-26T10:00Z)")
        return _client_command(
            args,
            lambda c: {"name": name, "rewound": c.rewind(name, args.since)},
            "queue rewind",
        )

    def delete(c: SyncClient) -> dict[str, Any]:
        c.delete_queue(name)
        return {"name": name, "deleted": True}

    return _client_command(args, delete, "queue delete")


def _send(args: argparse.Namespace) -> int:
    from cmq.cli.schedule import outgoing

    bodies = args.body or [line.rstrip("\n") for line in sys.stdin]
    messages = outgoing(
        bodies,
        delay=args.delay,
        deliver_at=args.deliver_at,
        ttl=args.ttl,
        priority=args.priority,
    )
    return _client_command(
        args,
        lambda c: {"messages": [{"id": m.id, "seq": m.seq} for m in c.send(args.queue, messages)]},
        "send",
    )


def _receive(args: argparse.Namespace) -> int:
    def receive(c: SyncClient) -> dict[str, Any]:
        got = c.receive(args.queue, args.max, wait_seconds=args.wait)
        out: dict[str, Any] = {"messages": [_received(m) for m in got]}
        if args.ack and got:
            out["acked"] = _results(c.ack(args.queue, [m.receipt for m in got]))
        return out

    return _client_command(args, receive, "receive")


def _status(args: argparse.Namespace) -> int:
    return _client_command(args, lambda c: c.status(), "status")


def _bench(args: argparse.Namespace) -> int:
    from cmq.cli.bench import main_from_args

    return main_from_args(args)


def archive_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of ``cmq archive``'s child: ``environ`` without ``CMQ_SECRET``; when it
    has the cluster secret but no access key (``CMQ_ACCESS_KEY_ID`` and
    ``CMQ_SECRET_ACCESS_KEY``, or ``CMQ_KEY_FILE``), the credential derived from the secret
    instead (the one the chart's hooks sign with), so the secret itself never reaches Spark."""
    from cmq.catalog.keys import cluster_credential

    env = dict(environ)
    secret = env.pop("CMQ_SECRET", "")
    has_key = env.get("CMQ_ACCESS_KEY_ID") and env.get("CMQ_SECRET_ACCESS_KEY")
    if secret and not (has_key or env.get("CMQ_KEY_FILE")):
        key_id, key_secret = cluster_credential(secret.encode())
        env |= {"CMQ_ACCESS_KEY_ID": key_id, "CMQ_SECRET_ACCESS_KEY": key_secret}
    return env


def _archive(argv: list[str]) -> int:
    """``cmq archive ...`` = ``python -m cmq.archive ...`` executed in this process's place (its
    environment: `archive_env`): the archive job (and Spark) is never imported by the ``cmq``
    command (contract archive-outside-server), and signals reach the job itself (``--follow``
    stops cleanly on SIGTERM/SIGINT), its exit status the command's."""
    cmd = [sys.executable, "-m", "cmq.archive", *argv]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, cmd, archive_env(os.environ))


DESCRIPTION = (
    "The cmq command: run nodes or a local cluster, administer queues, keys and nodes, send "
    "and receive messages, watch the queues, generate load."
)
"""The top-level help's description (plain text: ``--help`` shows it as it is)."""

CLIENT_HELP = {
    "queue": "create, change (set), list, show the stats of, delete or rewind queues",
    "send": "send messages to a queue (the arguments, or lines of stdin)",
    "receive": "receive messages from a queue (and acknowledge them with --ack)",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["archive"]:
        return _archive(argv[1:])
    p = build_parser()
    complete(p)  # a shell's completion request: answered, and the process exits
    args = p.parse_args(argv)
    apply_security_options(args)
    return _run(args)


def build_parser() -> argparse.ArgumentParser:
    """The ``cmq`` command line: every subcommand (`main` runs it)."""
    p = argparse.ArgumentParser(prog="cmq", description=DESCRIPTION)
    p.add_argument("--version", action="version", version=version_line())
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser(
        "archive",
        add_help=False,
        help="archive released segments as Parquet with Spark (cmq archive --help)",
    )

    add_serve_command(sub)

    add_dev_command(sub)

    for name, func in (("queue", _queue), ("send", _send), ("receive", _receive)):
        c = sub.add_parser(name, help=CLIENT_HELP[name], description=CLIENT_HELP[name])
        c.add_argument("--url", default=DEFAULT_URL)
        c.add_argument("--json", action="store_true", help="machine-readable output")
        if name == "queue":
            from cmq.cli.schedule import add_queue_schedule_arguments

            c.add_argument("action", choices=("create", "set", "list", "stats", "delete", "rewind"))
            c.add_argument("name", nargs="?")
            c.add_argument(
                "--attribute",
                "-a",
                action="append",
                help="NAME=VALUE (integers, true/false, null, or text)",
            )
            add_queue_schedule_arguments(c)
            c.add_argument(
                "--priorities",
                type=int,
                help="priority levels its messages may take (1-32; default 1: none)",
            )
            c.add_argument(
                "--since",
                help="rewind: deliver again the acknowledged messages sent at or after this "
                "time (ISO 8601 with a zone, e.g. 2026-11-26T10:00Z) that the queue retains",
            )
        elif name == "send":
            from cmq.cli.schedule import add_send_schedule_arguments

            c.add_argument("queue")
            c.add_argument("body", nargs="*", help="message bodies (default: lines of stdin)")
            add_send_schedule_arguments(c)
            c.add_argument(
                "--priority",
                type=int,
                default=0,
                help="priority level of every message sent (0, the lowest, .. the queue's "
                "priorities - 1)",
            )
        else:
            c.add_argument("queue")
            c.add_argument("--max", type=int, default=1)
            c.add_argument("--wait", type=int, default=0)
            c.add_argument("--ack", action="store_true", help="acknowledge what was received")
        c.set_defaults(func=func)
    add_node_commands(sub)
    add_key_commands(sub)
    add_cluster_commands(sub)
    add_backup_commands(sub)
    st = sub.add_parser("status", help="groups, leaders, terms, commit/applied, lag")
    st.add_argument("--url", default=DEFAULT_URL)
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=_status)

    b = sub.add_parser(
        "bench",
        help="load generator: msgs/s, MiB/s, confirm and end-to-end latency percentiles",
    )
    b.add_argument("--url", default=DEFAULT_URL, help="URL[,URL...]: clients spread over them")
    b.add_argument("--queue", help="queue to use (default: a fresh bench-<tag>, deleted after)")
    b.add_argument("--producers", type=int, default=4)
    b.add_argument("--consumers", type=int, default=2)
    b.add_argument("--size", type=int, default=1024, help="message body bytes (>= 49, the header)")
    b.add_argument("--window", type=int, default=64, help="send requests in flight per producer")
    b.add_argument("--batch", type=int, default=1, help="messages per send request (1..100)")
    b.add_argument("--recv-batch", type=int, default=32, help="max messages per receive")
    b.add_argument("--recv-window", type=int, default=4, help="receive loops per consumer")
    b.add_argument("--rate", type=float, default=0.0, help="msgs/s over all producers; 0 = max")
    b.add_argument("--messages", type=int, default=0, help="stop producing after N messages")
    b.add_argument(
        "--seconds", type=float, help="stop producing after S seconds (default 20 w/o --messages)"
    )
    b.add_argument("--no-drain", action="store_true", help="do not drain after producing")
    b.add_argument("--drain-timeout", type=float, default=60.0)
    b.add_argument("--keep-queue", action="store_true", help="keep a queue this run created")
    b.add_argument(
        "--protocol",
        choices=("http", "stream"),
        default="http",
        help="http: a request per call; stream: a WebSocket per client (docs/api.md)",
    )
    b.add_argument(
        "--no-leader-direct",
        action="store_true",
        help="http: send to each client's own node (forwarded), not to the queue's leader",
    )
    b.add_argument("--json", action="store_true", help="machine-readable report")
    b.set_defaults(func=_bench)

    add_top_command(sub, DEFAULT_URL)
    add_completion_command(sub)
    add_security_options(p)
    return p


def _run(args: argparse.Namespace) -> int:
    """``args.func(args)``, with any failure as one line on stderr (code and hint), never a
    traceback (``CMQ_DEBUG=1`` shows it); Ctrl-C exits 130."""
    from cmq.cli import output as cli_output
    from cmq.errors import CmqError

    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except CmqError as e:
        cli_output.report_error(e.code, e.message, as_json=bool(getattr(args, "json", False)))
        return 1
    except Exception as e:
        if os.environ.get("CMQ_DEBUG"):
            raise
        cli_output.report_error(type(e).__name__, str(e) or repr(e), as_json=False)
        return 1
