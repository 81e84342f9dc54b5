"""``cmq top``: a live terminal view of the queues, deepest first, refreshed every
``--interval`` seconds: messages visible, in flight and delayed, the oldest message's age, and
send and ack rates per second.

The rates are the difference of the queue's counters (``sent_total``, ``acked_total``) between
two polls divided by the time between them (`table_rows`, pure); a queue seen once, or whose
counters went back (deleted and created again), shows no rate. ``--once`` polls twice,
``--interval`` apart, prints one table (or, with ``--json``, the rows) and exits: for scripts.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.table import Table

    from cmq.client import SyncClient

DEFAULT_INTERVAL = 2.0
DEFAULT_LIMIT = 500


@dataclass(frozen=True, slots=True)
class Sample:
    """One queue's counts at one poll."""

    name: str
    visible: int
    in_flight: int
    delayed: int
    oldest_age_ms: int
    sent_total: int
    acked_total: int


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the view; a rate is None when it cannot be told yet."""

    name: str
    depth: int
    visible: int
    in_flight: int
    delayed: int
    oldest_age_s: float
    send_rate: float | None
    ack_rate: float | None


def rate(before: int | None, after: int, seconds: float) -> float | None:
    """Per second, from two readings of a counter ``seconds`` apart; None without an earlier
    reading, a non-positive interval, or a counter that went back."""
    if before is None or seconds <= 0 or after < before:
        return None
    return (after - before) / seconds


def table_rows(
    before: Mapping[str, Sample], after: Mapping[str, Sample], seconds: float
) -> list[Row]:
    """The rows for the queues of ``after`` (``before``: the previous poll, ``seconds``
    earlier), deepest first (visible + in flight + delayed), then by name."""
    rows = []
    for s in after.values():
        prev = before.get(s.name)
        rows.append(
            Row(
                name=s.name,
                depth=s.visible + s.in_flight + s.delayed,
                visible=s.visible,
                in_flight=s.in_flight,
                delayed=s.delayed,
                oldest_age_s=s.oldest_age_ms / 1000,
                send_rate=rate(prev.sent_total if prev else None, s.sent_total, seconds),
                ack_rate=rate(prev.acked_total if prev else None, s.acked_total, seconds),
            )
        )
    rows.sort(key=lambda r: (-r.depth, r.name))
    return rows


def poll(client: SyncClient, limit: int) -> dict[str, Sample]:
    """Every queue's counts (the first ``limit`` names); a queue gone meanwhile is left out."""
    from cmq.errors import QueueNotFound

    out: dict[str, Sample] = {}
    for name in client.list_queues()[:limit]:
        try:
            st = client.get_queue(name).stats
        except QueueNotFound:
            continue
        out[name] = Sample(
            name,
            st.visible,
            st.in_flight,
            st.delayed,
            st.oldest_age_ms,
            st.sent_total,
            st.acked_total,
        )
    return out


def _age(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def render(rows: list[Row], url: str, interval: float) -> Table:
    """The rows as a rich table."""
    from rich.table import Table

    title = f"cmq top - {url} - {len(rows)} queues - every {interval:g}s"
    table = Table(title=title, title_justify="left")
    table.add_column("queue", no_wrap=True)
    for header in ("depth", "visible", "in flight", "delayed", "oldest", "sent/s", "acked/s"):
        table.add_column(header, justify="right")
    for r in rows:
        table.add_row(
            r.name,
            f"{r.depth:,}",
            f"{r.visible:,}",
            f"{r.in_flight:,}",
            f"{r.delayed:,}",
            _age(r.oldest_age_s) if r.visible else "-",
            _rate(r.send_rate),
            _rate(r.ack_rate),
        )
    return table


def add_top_command(sub: Any, default_url: str) -> None:
    """``cmq top [--url] [--interval S] [--once] [--limit N] [--json]``."""
    t = sub.add_parser(
        "top",
        help="live view of the queues by depth, with send and ack rates",
        description="A live view of the queues, deepest first: messages visible, in flight "
        "and delayed, the oldest message's age, sends and acks per second (Ctrl-C quits).",
    )
    t.add_argument("--url", default=default_url)
    t.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_INTERVAL,
        help=f"seconds between polls (default {DEFAULT_INTERVAL:g})",
    )
    t.add_argument(
        "--once",
        action="store_true",
        help="poll twice, --interval apart, print one table and exit",
    )
    t.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_LIMIT,
        help=f"queues polled at most (default {DEFAULT_LIMIT})",
    )
    t.add_argument("--json", action="store_true", help="with --once: the rows as JSON")
    t.set_defaults(func=_top)


def _top(args: argparse.Namespace) -> int:
    from rich.console import Console

    from cmq.client import SyncClient

    if args.interval <= 0 or args.limit < 1:
        raise SystemExit("--interval must be > 0 and --limit at least 1")
    console = Console(width=None if sys.stdout.isatty() else 160)
    with SyncClient(args.url) as client:
        before, at = poll(client, args.limit), time.monotonic()
        if args.once:
            time.sleep(args.interval)
            after, now = poll(client, args.limit), time.monotonic()
            rows = table_rows(before, after, now - at)
            if args.json:
                from cmq.cli.output import print_json

                print_json({"queues": [asdict(r) for r in rows]})
            else:
                console.print(render(rows, args.url, args.interval))
            return 0
        return _live(client, console, args, before, at)


def _live(
    client: SyncClient,
    console: Any,
    args: argparse.Namespace,
    before: dict[str, Sample],
    at: float,
) -> int:
    """Redraw the table after every poll until Ctrl-C."""
    from rich.live import Live

    rows = table_rows({}, before, 0.0)
    with Live(render(rows, args.url, args.interval), console=console, auto_refresh=False) as live:
        try:
            while True:
                time.sleep(args.interval)
                after, now = poll(client, args.limit), time.monotonic()
                rows = table_rows(before, after, now - at)
                live.update(render(rows, args.url, args.interval), refresh=True)
                before, at = after, now
        except KeyboardInterrupt:
            return 0
