"""What the ``cmq`` command prints for people, and for programs.

By default results are aligned tables (rich) on stdout; with ``--json`` they are the JSON
payloads the commands always produced (stable for scripts). An error is one line on stderr,
``error <Code>: <message>`` and a hint when one helps, never a traceback (``--json``: the
server's ``{"error": {"code", "message"}}`` on stdout, as before). `progress` shows a spinner
for a long operation on a terminal, plain lines elsewhere.

Renderers take the JSON payloads, so the two forms cannot disagree about what was returned.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

HINTS: Mapping[str, str] = {
    "QueueNotFound": "`cmq queue list` shows the queues",
    "QueueAlreadyExists": "it exists with other attributes: `cmq queue stats NAME` shows them",
    "InvalidQueueName": "names are 1-80 characters of letters, digits, '-' and '_'",
    "InvalidParameter": "`cmq COMMAND --help` lists the options and their ranges",
    "Unavailable": "no leader for that queue yet, or a majority of its nodes is down: "
    "see `cmq status`",
    "Overloaded": "the node is at capacity: retry later or spread clients over more nodes",
    "OutcomeUnknown": "the change may or may not have been applied: check before retrying",
    "ConnectFailed": "is a node listening at --url? (`cmq dev` runs a local cluster)",
    "ResponseLost": "the node went away mid-request: the change may have been applied",
    "MessageTooLarge": "raise the queue's max_message_size or send smaller bodies",
    "TooManyEntries": "at most 100 entries per request",
}
"""Advice per error code, appended to the one-line error."""

# Piped output is not cut to 80 columns: tables keep whole values for grep and logs.
_out = Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 200)
_err = Console(stderr=True, highlight=False, soft_wrap=True)


def print_json(payload: Any) -> None:
    print(json.dumps(payload, indent=2))


def error_line(code: str, message: str) -> str:
    """``error <code>: <message> (hint: ...)`` on one line (newlines in ``message`` folded)."""
    line = f"error {code}: {' '.join(message.split())}"
    hint = HINTS.get(code)
    return f"{line} (hint: {hint})" if hint else line


def report_error(code: str, message: str, *, as_json: bool) -> None:
    if as_json:
        print_json({"error": {"code": code, "message": message}})
    else:
        _err.print(error_line(code, message), markup=False, style="red")


def render(kind: str, payload: Mapping[str, Any]) -> None:
    """Print ``payload`` (a command's JSON result) as tables; ``kind`` names the command."""
    RENDERERS[kind](payload)


@contextmanager
def progress(text: str) -> Iterator[Callable[[str], None]]:
    """A spinner with ``text`` on stderr while the block runs, when stderr is a terminal;
    otherwise ``text`` once. Yields an ``update(text)`` for the current step."""
    if _err.is_terminal:
        with _err.status(text) as status:
            yield lambda t: status.update(t)  # noqa: PLW0108 - update takes more arguments
    else:
        _err.print(text, markup=False)
        yield lambda t: None


# -- renderers ----------------------------------------------------------------------------------
def _table(*columns: str, title: str | None = None) -> Table:
    t = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False)
    for c in columns:
        numeric = c in _NUMERIC
        t.add_column(c, justify="right" if numeric else "left", no_wrap=not c.startswith("body"))
    return t


_NUMERIC = frozenset(
    {"seq", "depth", "in flight", "delayed", "term", "commit", "applied", "receives", "value"}
)


def _age(ms: int) -> str:
    if not ms:
        return "-"
    s = ms / 1000
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.1f} {unit}"
    return f"{s:.1f} s"


def _kv(title: str, values: Mapping[str, Any]) -> Table:
    t = _table("name", "value", title=title)
    for k, v in values.items():
        t.add_row(k, _value(k, v))
    return t


def _value(key: str, v: Any) -> str:
    if v is None:
        return "-"
    if key == "oldest_age_ms":
        return _age(v)
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


UNKNOWN_RELEASE = "unknown"
"""A node's release column when the answering node has no answer from it (or predates
release reporting itself)."""


def _release_of(info: Mapping[str, Any]) -> str:
    return str(info.get("release") or UNKNOWN_RELEASE)


def _release_key(release: str) -> tuple[int, tuple[int, ...], str]:
    parts = release.split(".")
    if all(x.isdigit() for x in parts):
        return (0, tuple(int(x) for x in parts), release)
    return (1, (), release)  # unknown (or not a version) last


def releases_line(releases: Mapping[int, str]) -> tuple[str, bool]:
    """``releases: 0.1.0 (node 3), 0.2.0 (nodes 1, 2)`` for node id -> release, and whether
    the nodes run more than one release (an unknown one does not count)."""
    by: dict[str, list[int]] = {}
    for n, r in sorted(releases.items()):
        by.setdefault(r, []).append(n)
    parts = []
    for r in sorted(by, key=_release_key):
        ns = by[r]
        parts.append(f"{r} (node{'s' if len(ns) > 1 else ''} {', '.join(map(str, ns))})")
    mixed = len([r for r in by if r != UNKNOWN_RELEASE]) > 1
    return "releases: " + ", ".join(parts), mixed


def _print_releases(releases: Mapping[int, str]) -> None:
    line, mixed = releases_line(releases)
    if mixed:
        _out.print(f"[yellow]mixed releases[/yellow] - {line}", highlight=False)
    else:
        _out.print(line, markup=False, highlight=False)


def _status(p: Mapping[str, Any]) -> None:
    me = p["node"]
    groups = p["groups"]
    leads: dict[int, list[str]] = {}
    for gid, g in groups.items():
        leads.setdefault(g["leader"], []).append(gid)
    nodes = _table("node", "release", "address", "data dirs", "leads groups", title="Nodes")
    releases: dict[int, str] = {}
    for nid, info in p["nodes"].items():
        mark = f"{nid} (this)" if int(nid) == me else nid
        led = ", ".join(leads.get(int(nid), [])) or "-"
        releases[int(nid)] = _release_of(info)
        nodes.add_row(
            mark,
            releases[int(nid)],
            info.get("address", ""),
            ", ".join(info.get("data_dirs", [])),
            led,
        )
    queues_of: dict[str, int] = {}
    for g in p["placement"].values():
        queues_of[str(g)] = queues_of.get(str(g), 0) + 1
    table = _table(
        "group",
        "queues",
        "leader",
        "role here",
        "term",
        "commit",
        "applied",
        "voters",
        "lag",
        title=f"Groups (as node {me} sees them)",
    )
    for gid, g in groups.items():
        lag = ", ".join(f"{peer}: {n}" for peer, n in g["lag"].items()) or (
            "-" if g["role"] == "leader" else f"known on {g['leader'] or '?'}"
        )
        table.add_row(
            "0 (meta)" if gid == "0" else gid,
            "-" if gid == "0" else str(queues_of.get(gid, 0)),
            str(g["leader"]) if g["leader"] else "[red]none[/red]",
            g["role"],
            str(g["term"]),
            f"{g['commit']:,}",
            f"{g['applied']:,}",
            ",".join(str(v) for v in g["voters"]),
            lag,
        )
    leaderless = sum(1 for g in groups.values() if not g["leader"])
    _out.print(nodes)
    _print_releases(releases)
    _out.print(table)
    summary = f"{len(p['nodes'])} nodes, {len(groups)} groups, {p['queues']} queues"
    if leaderless:
        _out.print(f"{summary}; [red]{leaderless} group(s) without a leader[/red]")
    else:
        _out.print(f"{summary}; every group has a leader")


def _queue_list(p: Mapping[str, Any]) -> None:
    if not p["queues"]:
        _out.print("no queues (create one: cmq queue create NAME)")
        return
    t = _table("queue", "depth", "in flight", "delayed", "oldest")
    for q in p["queues"]:
        s = q.get("stats")
        if s is None:
            t.add_row(q["name"], "?", "?", "?", q.get("error", ""))
        else:
            t.add_row(
                q["name"],
                f"{s['visible']:,}",
                f"{s['in_flight']:,}",
                f"{s['delayed']:,}",
                _age(s["oldest_age_ms"]),
            )
    _out.print(t)


def _queue_create(p: Mapping[str, Any]) -> None:
    what = "created" if p["created"] else "already existed with these attributes:"
    _out.print(f"queue {p['name']} {what}", markup=False)
    _out.print(_kv("Attributes", p["attributes"]))


def _queue_set(p: Mapping[str, Any]) -> None:
    _out.print(f"queue {p['name']} updated", markup=False)
    _out.print(_kv("Attributes", p["attributes"]))


def _queue_stats(p: Mapping[str, Any]) -> None:
    _out.print(_kv(f"{p['name']}: stats", p["stats"]))
    _out.print(_kv("Attributes", p["attributes"]))


def _queue_delete(p: Mapping[str, Any]) -> None:
    _out.print(f"queue {p['name']} deleted", markup=False)


def _queue_rewind(p: Mapping[str, Any]) -> None:
    _out.print(
        f"queue {p['name']}: {p['rewound']} acknowledged message(s) delivered again", markup=False
    )


def _send(p: Mapping[str, Any]) -> None:
    messages = p["messages"]
    t = _table("seq", "id")
    for m in messages:
        t.add_row(str(m["seq"]), m["id"])
    _out.print(f"sent {len(messages)} message(s), committed on a majority")
    _out.print(t)


def _receive(p: Mapping[str, Any]) -> None:
    messages = p["messages"]
    if not messages:
        _out.print("no message received")
        return
    t = _table("seq", "receives", "sent", "body", "receipt")
    for m in messages:
        body = m["body"] if "body" in m else f"(base64) {m['body_base64']}"
        receipt = m["receipt"]
        sent = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(m["sent_at"] / 1000))
        t.add_row(str(m["seq"]), str(m["receive_count"]), sent, body, receipt[:12] + "...")
    _out.print(t)
    acked = p.get("acked")
    if acked is not None:
        ok = sum(1 for r in acked["results"] if r["ok"])
        failed = [r for r in acked["results"] if not r["ok"]]
        line = f"acked {ok} of {len(messages)}"
        if failed:
            line += "; failed: " + ", ".join(r.get("error", "?") for r in failed)
        _out.print(line, markup=False)
    else:
        _out.print("leased; ack with the receipts from --json, or receive with --ack")


def _node_list(p: Mapping[str, Any]) -> None:
    t = _table(
        "node",
        "release",
        "state",
        "zone",
        "peer address",
        "http",
        "replicas",
        "incoming",
        "leads",
        "meta",
        "lag",
        title="Nodes",
    )
    releases: dict[int, str] = {}
    for n in p["nodes"]:
        releases[int(n["id"])] = _release_of(n)
        t.add_row(
            str(n["id"]),
            releases[int(n["id"])],
            str(n.get("state", "")),
            str(n.get("zone") or "-"),
            str(n.get("address", "")),
            str(n.get("http") or "-"),
            ", ".join(str(g) for g in n.get("replicas", [])) or "-",
            ", ".join(str(g) for g in n.get("incoming", [])) or "-",
            ", ".join(str(g) for g in n.get("leaders", [])) or "-",
            str(n.get("meta") or "-"),
            _value("lag", n.get("lag")),
        )
    _out.print(t)
    _print_releases(releases)


def _node_change(p: Mapping[str, Any]) -> None:
    _out.print(f"node {p['node']}: {p['state']}", markup=False)


RENDERERS: Mapping[str, Callable[[Mapping[str, Any]], None]] = {
    "node list": _node_list,
    "node change": _node_change,
    "status": _status,
    "queue list": _queue_list,
    "queue create": _queue_create,
    "queue set": _queue_set,
    "queue stats": _queue_stats,
    "queue delete": _queue_delete,
    "queue rewind": _queue_rewind,
    "send": _send,
    "receive": _receive,
}
