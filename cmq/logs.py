"""The node's log lines: text for humans (the default) or one JSON object per line for log
pipelines (``cmq serve --log-format json``, ``CMQ_LOG_FORMAT=json``), and the registry of the
stable ``event`` names that errors an operator must act on carry.

A JSON line holds ``time`` (RFC 3339, UTC, milliseconds), ``level``, ``logger``, ``node`` (the
node id given to `configure`), ``group`` and ``queue`` when known, ``message``, ``event`` when
the record has one, and ``exception`` (the formatted traceback) when it carries one. A text
line is ``<time> <LEVEL> <logger>: <message>``, followed by `` [event=<name>]`` when it has an
event.

Where ``group`` and ``queue`` come from: a record's own ``extra={"group": g, "queue": q}``
first, then the `LOG_SCOPE` context variable, which the code working on one queue sets for the
duration of that work (`cmq.routing.ops.LeaderOps.execute` at the group's leader,
`cmq.node.queue_node.QueueNode` while it sends to a queue): a record logged inside it carries the
queue without naming it. Entering and leaving a scope is two `contextvars.ContextVar.set` calls.

An event is attached as ``extra={"event": "disk_full"}``; every name used must be a key of
`EVENTS` (with its meaning) and be listed in the "Logs" section of docs/operations.md
(``tests/cmq/test_logs.py`` checks both). Names are stable: alerting rules match on them.
raftlog, which never imports cmq, uses the same names as string literals.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final, Literal, TextIO

import orjson

LogFormat = Literal["text", "json"]
FORMATS: Final[tuple[LogFormat, ...]] = ("text", "json")

TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""The text line (what ``cmq serve`` has always written), before its ``[event=...]``."""

LOG_SCOPE: ContextVar[tuple[int | None, str | None]] = ContextVar(
    "cmq_log_scope", default=(None, None)
)
"""``(group, queue)`` the current task works on (None: not known), read by both formatters'
records: set it for a piece of work with `log_scope`."""


@contextmanager
def log_scope(group: int | None, queue: str | None) -> Iterator[None]:
    """Within the block, what is logged names ``group`` and ``queue``; the previous scope is
    put back after it. Restores by value, not with `ContextVar.reset`: a coroutine stepped
    from another context (a simulator's scheduler, a callback) must not fail on the way out."""
    prev = LOG_SCOPE.get()
    LOG_SCOPE.set((group, queue))
    try:
        yield
    finally:
        LOG_SCOPE.set(prev)


EVENTS: Final[Mapping[str, str]] = {
    # data directories (cmq.node.diskwatch, raftlog.storage.wal)
    "disk_failed": "a data directory failed (I/O error): its groups stopped; fix the disk, "
    "restart the node",
    "disk_full": "a data directory's free space fell below the reserve: sends to the groups "
    "led there are refused (DiskFull) until space is freed",
    "disk_slow": "a data directory's fsync is slow: the groups led there hand off leadership",
    "disk_check_failed": "the periodic disk check itself failed (a bug: report it)",
    "wal_failed": "a WAL stopped for good after an I/O error: its groups stopped",
    "wal_tail_cut": "recovery cut a torn or damaged tail off a WAL (after a crash: expected "
    "once; repeatedly: suspect the disk)",
    "wal_damaged": "recovery found damage inside a WAL: the groups there are repaired from "
    "their replicas",
    # clocks (cmq.node.clockguard, cmq.node.housekeeping)
    "clock_unsafe": "this node's clock is off its peers' median by more than the bound: it "
    "stops leading until the clock is back; fix time sync",
    "clock_recovered": "this node's clock is back within the bound: it may lead again",
    "clock_unconfirmed": "this node's clock is not yet confirmed by its peers: it does not "
    "lead or stamp",
    "clock_stepped": "this node's wall clock jumped against its monotonic clock: it stamps "
    "nothing and does not lead until its peers agree",
    "queue_time_ahead": "a queue's time stands ahead of its leader's clock (a stamp from a "
    "clock far ahead got in); it runs on and slews back",
    "queue_time_ahead_blocked": "a queue's time stands ahead of the leader's clock and the "
    "feature flag that lets it resume is off: enable the named flag",
    # storage damage and repair (raftlog.runtime, cmq.node.scrubber)
    "replica_damaged": "the scrubber found damaged stored data of a group on this node",
    "repair_started": "a group's stored state on this node is damaged: it is being repaired "
    "from its replicas",
    "repair_completed": "a group on this node was repaired from its replicas",
    "repair_failed": "a repair failed: the group stays marked and a restart resumes it",
    "group_halted": "a group stopped on this node (disk failure, damage or a bug): it leads, "
    "votes and answers nothing until the node restarts",
    "acknowledged_entries_lost": "this node lacks Raft entries it acknowledged (wiped or "
    "restored disk): start it with --rejoin",
    "snapshot_export_failed": "a leader could not export a snapshot for a follower that fell "
    "behind",
    "snapshot_too_large": "a snapshot is over the transfer limit: the follower cannot catch up "
    "by snapshot",
    # membership and peers (cmq.node.membership, cmq.admin, raftlog.transport)
    "membership_deferred": "membership rounds (group placement, replica moves) have been "
    "deferred for a long time: the meta group is unreachable or refuses",
    "membership_round_failed": "a membership round failed unexpectedly (a bug: report it)",
    "peer_bad_address": "a node registered an address that does not parse",
    "peer_handshake_failed": "the peer handshake with a node failed (wrong secret, TLS, or "
    "an incompatible release)",
    "peer_connection_refused": "this node refused an incoming peer connection",
    "peer_call_failed": "a call forwarded by a peer failed unexpectedly (a bug: report it)",
    "release_poll_failed": "asking the nodes for their releases failed unexpectedly",
    "join_deferred": "a joining node's registration was refused or not answered; retrying",
    # keys and access (cmq.admin.key_admin, cmq.cli.server)
    "access_key_unsealed_failed": "a stored access key does not open with this node's "
    "cluster secret: the nodes' secrets differ",
    "admin_key_written": "the bootstrap admin access key was written to the data directory",
    "admin_key_bootstrap_failed": "the bootstrap admin key could not be made or written: "
    "restart the node",
    "anonymous_access": "the node serves unsigned requests (--anonymous): never in production",
    # queues (cmq.node.housekeeping)
    "dead_letter_refused": "a message due for its dead-letter queue stays: that queue refuses "
    "it (missing, or full)",
    # serving (cmq.cli.server, cmq.frontend, api)
    "front_end_exited": "an HTTP front-end process exited and is started again",
    "front_end_failed": "a connection between an HTTP front end and its node failed",
    "request_failed": "a request or a readiness check failed on the server's side (a fault "
    "of the node, or a bug: see the exception)",
}
"""Every event name, with what it means and what to do."""


class _Fields(logging.Formatter):
    """What both formats read off a record: its group, queue and event."""

    @staticmethod
    def scope(record: logging.LogRecord) -> tuple[int | None, str | None]:
        group, queue = LOG_SCOPE.get()
        return getattr(record, "group", group), getattr(record, "queue", queue)


class TextFormatter(_Fields):
    """`TEXT_FORMAT`, with `` [event=<name>]`` appended when the record has an event."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)  # the traceback, if any, follows it
        event = getattr(record, "event", None)
        return line if event is None else f"{line} [event={event}]"


class JsonFormatter(_Fields):
    """One JSON object per record, on one line (see the module docstring for its fields)."""

    def __init__(self, node: int | None = None) -> None:
        super().__init__()
        self.node = node

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        out: dict[str, object] = {
            "time": f"{stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "node": self.node,
        }
        group, queue = self.scope(record)
        if group is not None:
            out["group"] = group
        if queue is not None:
            out["queue"] = queue
        out["message"] = record.getMessage()
        event = getattr(record, "event", None)
        if event is not None:
            out["event"] = event
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            out["exception"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(out, default=str).decode()


def log_format(flag: str | None) -> LogFormat:
    """The format asked for: ``flag`` (``--log-format``), else ``CMQ_LOG_FORMAT``, else text;
    `ValueError` naming the choices for anything else."""
    chosen = flag or os.environ.get("CMQ_LOG_FORMAT") or "text"
    for f in FORMATS:
        if chosen.lower() == f:
            return f
    raise ValueError(f"unknown log format {chosen!r}: choose one of {', '.join(FORMATS)}")


def formatter(fmt: LogFormat, node: int | None = None) -> logging.Formatter:
    """The formatter of ``fmt`` (``node``: the node id JSON lines carry)."""
    return JsonFormatter(node) if fmt == "json" else TextFormatter()


def configure(
    fmt: LogFormat,
    *,
    node: int | None = None,
    level: str | int | None = None,
    stream: TextIO | None = None,
) -> logging.Handler:
    """Make the root logger write ``fmt`` lines to ``stream`` (default stderr) at ``level``
    (default ``CMQ_LOG_LEVEL``, else WARNING), replacing its handlers; the new handler."""
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(formatter(fmt, node))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level if level is not None else os.environ.get("CMQ_LOG_LEVEL", "WARNING"))
    return handler


def child_env(fmt: LogFormat, node: int | None) -> dict[str, str]:
    """The environment variables that make a child process (an HTTP front end) log as this
    one does, read by `configure_from_env`."""
    return {"CMQ_LOG_FORMAT": fmt} | ({} if node is None else {"CMQ_LOG_NODE": str(node)})


def configure_from_env() -> logging.Handler:
    """`configure` from ``CMQ_LOG_FORMAT`` and ``CMQ_LOG_NODE`` (see `child_env`)."""
    node = os.environ.get("CMQ_LOG_NODE")
    return configure(log_format(None), node=int(node) if node and node.isdigit() else None)
