"""`cmq.logs`: the JSON and text log lines, the event registry, and ``cmq serve`` writing them
(``--log-format json``, ``CMQ_LOG_FORMAT``, text by default) in real node processes."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import pytest

from cmq import logs
from cmq.cli.launch import ServeSettings, wait_ready
from cmq.logs import EVENTS, LOG_SCOPE, JsonFormatter, TextFormatter, log_format
from cmq.node.diskwatch import DiskPolicy, DiskWatch
from raftlog.runtime import MultiRaft
from tests.ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
EVENT_USE = re.compile(r"""["']event["']\s*:\s*["']([A-Za-z0-9_]+)["']""")


def record(msg: str = "hello %s", *args: object, **extra: Any) -> logging.LogRecord:
    r = logging.LogRecord("cmq.test", logging.ERROR, __file__, 1, msg, args or ("x",), None)
    for k, v in extra.items():
        setattr(r, k, v)
    return r


def events_in_code() -> dict[str, list[str]]:
    """Every event name passed in the code, with the files using it."""
    found: dict[str, list[str]] = {}
    for package in ("cmq", "api", "raftlog"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "logs.py" and path.parent.name == "cmq":
                continue
            for name in EVENT_USE.findall(path.read_text()):
                found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def docs_logs_section() -> str:
    """The "Logs" section of docs/operations.md."""
    text = (ROOT / "docs" / "operations.md").read_text()
    start = text.index("\n## Logs\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else None]


def test_every_event_in_the_code_is_registered_and_documented() -> None:
    used = events_in_code()
    assert len(used) >= 20  # the scan sees the call sites
    unregistered = {name: where for name, where in used.items() if name not in EVENTS}
    assert not unregistered, f"events not in cmq.logs.EVENTS: {unregistered}"
    unused = set(EVENTS) - set(used)
    assert not unused, f"registered events no code logs: {sorted(unused)}"
    rows = dict(re.findall(r"^\| `([a-z0-9_]+)` \| (.+) \|$", docs_logs_section(), re.M))
    undocumented = [name for name in EVENTS if name not in rows]
    assert not undocumented, f"events missing from docs/operations.md, Logs: {undocumented}"
    assert rows == dict(EVENTS), "docs/operations.md's event table differs from cmq.logs.EVENTS"
    assert all(meaning.strip() for meaning in EVENTS.values())


def test_a_json_line_has_every_field_from_the_record_and_the_scope() -> None:
    fmt = JsonFormatter(node=3)
    token = LOG_SCOPE.set((7, "orders"))
    try:
        line = fmt.format(record("disk %s", "gone", event="disk_failed"))
        own = json.loads(fmt.format(record(group=2, queue="other")))
    finally:
        LOG_SCOPE.reset(token)
    assert "\n" not in line
    got = json.loads(line)
    assert TIME.match(got.pop("time"))
    assert got == {
        "level": "ERROR",
        "logger": "cmq.test",
        "node": 3,
        "group": 7,
        "queue": "orders",
        "message": "disk gone",
        "event": "disk_failed",
    }
    assert (own["group"], own["queue"]) == (2, "other")  # the record's own extra wins
    outside = json.loads(fmt.format(record()))
    assert "group" not in outside and "queue" not in outside and "event" not in outside


def test_a_json_line_carries_the_exception_text() -> None:
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        logger = logging.getLogger("cmq.test.exc")
        buf = io.StringIO()
        handler = logging.StreamHandler(buf)
        handler.setFormatter(JsonFormatter(1))
        logger.addHandler(handler)
        try:
            logger.exception("it failed", extra={"event": "request_failed"})
        finally:
            logger.removeHandler(handler)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 1
    got = json.loads(lines[0])
    assert got["message"] == "it failed" and got["event"] == "request_failed"
    assert "Traceback" in got["exception"] and "RuntimeError: boom" in got["exception"]


def test_the_text_line_is_unchanged_but_for_its_event() -> None:
    plain = logging.Formatter(logs.TEXT_FORMAT)
    r = record()
    assert TextFormatter().format(r) == plain.format(r)
    r = record(event="disk_full")
    assert TextFormatter().format(r) == plain.format(r) + " [event=disk_full]"
    try:
        raise OSError("gone")
    except OSError:
        r = record(event="disk_failed")
        r.exc_info = sys.exc_info()
    first, *trace = TextFormatter().format(r).splitlines()
    assert first.endswith("hello x [event=disk_failed]") and trace[0].startswith("Traceback")


def test_the_format_comes_from_the_flag_then_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CMQ_LOG_FORMAT", raising=False)
    assert log_format(None) == "text"
    monkeypatch.setenv("CMQ_LOG_FORMAT", "JSON")
    assert log_format(None) == "json"
    assert log_format("text") == "text"
    monkeypatch.setenv("CMQ_LOG_FORMAT", "xml")
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        log_format(None)


async def test_a_full_disk_is_logged_with_its_event(caplog: pytest.LogCaptureFixture) -> None:
    from tests.cmq.test_diskwatch import FakeRaft, inline

    watch = DiskWatch(
        4,
        cast(MultiRaft, FakeRaft()),
        ["/a", "/b"],
        DiskPolicy(reserve_bytes=1000, slow_fsync_seconds=2.0),
        offload=cast(Any, inline),
        probe=lambda d: {"/a": 10_000, "/b": 10}[d],
        monotonic=lambda: 100.0,
    )
    with caplog.at_level(logging.WARNING, logger="cmq.node.diskwatch"):
        await watch.check()
    (full,) = [r for r in caplog.records if getattr(r, "event", None) == "disk_full"]
    got = json.loads(JsonFormatter(4).format(full))
    assert got["event"] == "disk_full" and got["level"] == "WARNING" and got["node"] == 4
    assert "/b" in got["message"] and "reserve" in got["message"]


# -- real node processes ---------------------------------------------------------------------------
def _start(tmp: Path, flags: tuple[str, ...], env: dict[str, str]) -> tuple[Any, ServeSettings]:
    http, peer = free_ports(2)
    s = ServeSettings(
        node_id=1,
        http=f"127.0.0.1:{http}",
        peer=f"127.0.0.1:{peer}",
        data_dirs=(str(tmp),),
        peers={1: f"127.0.0.1:{peer}"},
        groups=1,
        anonymous=True,
        extra=flags,
    )
    full = {k: v for k, v in os.environ.items() if k != "CMQ_LOG_FORMAT"}
    full |= {"CMQ_SECRET": "log-test-secret-0123456789", "CMQ_HANDOFF_SECONDS": "0"} | env
    proc = subprocess.Popen(
        s.command(), env=full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    return proc, s


def _run_node(tmp: Path, flags: tuple[str, ...], env: dict[str, str]) -> list[str]:
    """Start a one-node cluster, wait until it serves, create a queue, stop it; its stderr
    lines."""
    proc, s = _start(tmp, flags, env)
    try:
        assert wait_ready([s.url], 60, interval=0.1), "the node did not start"
        from cmq.client import SyncClient

        with SyncClient(s.url) as client:
            client.create_queue("logged")
            client.send("logged", ["one"])
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err.splitlines()


@pytest.fixture(scope="module")
def node_logs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[str]]]:
    """stderr of three nodes run at once: ``--log-format json``, ``CMQ_LOG_FORMAT=json``, and
    neither (all at INFO)."""
    runs = {
        "flag": (("--log-format", "json"), {"CMQ_LOG_LEVEL": "INFO"}),
        "env": ((), {"CMQ_LOG_FORMAT": "json", "CMQ_LOG_LEVEL": "INFO"}),
        "text": ((), {"CMQ_LOG_LEVEL": "INFO"}),
    }
    with ThreadPoolExecutor(len(runs)) as pool:
        futures = {
            name: pool.submit(_run_node, tmp_path_factory.mktemp(name), flags, env)
            for name, (flags, env) in runs.items()
        }
        yield {name: f.result() for name, f in futures.items()}


@pytest.mark.slow
@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_node_writes_one_json_object_per_line(node_logs: dict[str, list[str]], how: str) -> None:
    lines = node_logs[how]
    assert lines
    parsed = [json.loads(line) for line in lines]  # every line is one JSON object
    for got in parsed:
        assert TIME.match(got["time"]), got
        assert got["node"] == 1 and got["level"] in {"DEBUG", "INFO", "WARNING", "ERROR"}
        assert got["logger"] and isinstance(got["message"], str)
        assert got.get("event") is None or got["event"] in EVENTS
    anonymous = [p for p in parsed if p.get("event") == "anonymous_access"]
    assert len(anonymous) == 1 and anonymous[0]["level"] == "WARNING"
    assert anonymous[0]["logger"] == "cmq.cli.server"


@pytest.mark.slow
def test_a_node_writes_text_by_default(node_logs: dict[str, list[str]]) -> None:
    lines = node_logs["text"]
    assert lines and not any(line.startswith("{") for line in lines)
    (anonymous,) = [line for line in lines if "ANONYMOUS ACCESS" in line]
    assert re.match(
        r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} WARNING cmq\.cli\.server: ANONYMOUS ACCESS: .*"
        r" \[event=anonymous_access\]$",
        anonymous,
    ), anonymous


async def test_what_a_leader_logs_while_it_runs_a_call_names_its_queue() -> None:
    """`LeaderOps.execute` scopes the log to the call's group and queue, and only while the
    call runs."""
    from cmq.routing.ops import LeaderOps
    from cmq.routing.rpc import GetQueueCall

    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(JsonFormatter(2))
    logger = logging.getLogger("cmq.test.scope")
    logger.addHandler(handler)

    class Leader:
        async def _dispatch(self, call: object) -> str:
            logger.warning("working", extra={"event": "dead_letter_refused"})
            return "done"

    try:
        assert await LeaderOps.execute(cast(LeaderOps, Leader()), GetQueueCall(3, "orders")) == (
            "done"
        )
        logger.warning("after")
    finally:
        logger.removeHandler(handler)
    during, after = (json.loads(line) for line in buf.getvalue().splitlines())
    assert (during["group"], during["queue"], during["node"]) == (3, "orders", 2)
    assert "group" not in after and "queue" not in after
