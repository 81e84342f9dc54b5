"""The `cmq` command as a user runs it: `cmq dev`, then the admin and client subcommands."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.ports import free_ports

pytestmark = pytest.mark.slow


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cmq", *args],
        input=stdin,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def cmq(*args: str, stdin: str | None = None) -> tuple[int, Any]:
    """The command with ``--json``: (exit status, parsed stdout)."""
    p = run(*args, "--json", stdin=stdin)
    out = p.stdout.strip()
    return p.returncode, json.loads(out) if out.startswith(("{", "[")) else out


def consecutive_free_ports(n: int) -> int:
    """The first of ``n`` consecutive ports that are free right now (cmq dev counts up). From
    a port range (`tests.ports`) `free_ports` hands them out in a row and moves past them;
    the kernel's ports are probed for a free run instead."""
    ports = free_ports(n)
    if ports == list(range(ports[0], ports[0] + n)):
        return ports[0]
    for _ in range(100):
        start = free_ports(1)[0]
        socks = []
        try:
            for port in range(start, start + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return start
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of free ports")


def dev_banner(dev: subprocess.Popen[str]) -> str:
    """What ``cmq dev`` printed up to its ready banner (the line naming Ctrl-C); fails when it
    exits or takes over 60 s before that."""
    banner = ""
    deadline = time.monotonic() + 60
    while "Ctrl-C" not in banner and time.monotonic() < deadline:
        assert dev.stdout is not None
        line = dev.stdout.readline()
        if not line and dev.poll() is not None:
            break
        banner += line
    assert "Ctrl-C" in banner, banner
    return banner


def test_dev_cluster_and_client_commands(tmp_path: Path) -> None:
    base = consecutive_free_ports(6)
    peer_base = base + 3
    dev = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cmq",
            "dev",
            "--data-dir",
            str(tmp_path / "dev"),
            "--http-port",
            str(base),
            "--peer-port",
            str(peer_base),
            "--groups",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ),
    )
    try:
        banner = dev_banner(dev)
        assert f"http://127.0.0.1:{base}" in banner and "curl" in banner
        url = f"--url=http://127.0.0.1:{base + 1}"  # any node serves any queue
        code, out = cmq("queue", "create", "work", "-a", "visibility_timeout=10", url)
        assert code == 0 and out["created"] is True, out
        code, out = cmq("send", "work", "first", "second", url)
        assert code == 0 and [m["seq"] for m in out["messages"]] == [1, 2]
        code, out = cmq("send", "work", url, stdin="third\n")
        assert code == 0
        code, out = cmq("receive", "work", "--max", "10", "--ack", url)
        assert code == 0 and [m["body"] for m in out["messages"]] == ["first", "second", "third"]
        assert all(r["ok"] for r in out["acked"]["results"])
        code, out = cmq("queue", "stats", "work", url)
        assert out["stats"]["acked_total"] == 3 and out["stats"]["visible"] == 0
        code, out = cmq("queue", "list", url)
        assert {"name": "work"} in out["queues"]
        code, out = cmq("status", url)
        assert code == 0 and set(out["groups"]) == {"0", "1", "2"}
        code, out = cmq("queue", "stats", "nope", url)
        assert code == 1 and out["error"]["code"] == "QueueNotFound"
        # Rewind: acknowledged messages come back, once (the admin key: dev is anonymous).
        since = (datetime.now(UTC) - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%MZ")
        cmq("queue", "create", "kept", "-a", "retain_acked_seconds=3600", url)
        cmq("send", "kept", "again", url)
        cmq("receive", "kept", "--ack", url)
        code, out = cmq("queue", "rewind", "kept", "--since", since, url)
        assert code == 0 and out == {"name": "kept", "rewound": 1}, out
        code, out = cmq("receive", "kept", url)
        assert [m["body"] for m in out["messages"]] == ["again"]
        code, out = cmq("queue", "rewind", "kept", "--since", "yesterday", url)
        assert code == 1 and out["error"]["code"] == "InvalidParameter"

        # For people: aligned tables, and errors as one line with the code and a hint.
        table = run("queue", "list", url)
        assert table.returncode == 0
        header = next(line for line in table.stdout.splitlines() if "queue" in line)
        assert header.split() == ["queue", "depth", "in", "flight", "delayed", "oldest"]
        assert any(line.split()[:2] == ["work", "0"] for line in table.stdout.splitlines())
        status = run("status", url)
        assert status.returncode == 0 and "every group has a leader" in status.stdout
        assert "0 (meta)" in status.stdout and "(this)" in status.stdout
        sent = run("send", "work", "fourth", url)
        assert "sent 1 message(s)" in sent.stdout
        got = run("receive", "work", "--ack", url)
        assert "fourth" in got.stdout and "acked 1 of 1" in got.stdout
        missing = run("queue", "stats", "nope", url)
        assert missing.returncode == 1 and missing.stdout == ""
        assert missing.stderr.count("\n") == 1, missing.stderr
        assert missing.stderr.startswith("error QueueNotFound: ")
        assert "hint: `cmq queue list`" in missing.stderr
    finally:
        dev.send_signal(signal.SIGINT)
        dev.wait(30)
    assert dev.returncode == 0
    # A restart reuses the data.
    assert (tmp_path / "dev" / "node1").is_dir() and (tmp_path / "dev" / "secret").exists()


def test_errors_are_one_line_without_a_traceback(tmp_path: Path) -> None:
    (port,) = free_ports(1)  # nothing listens there
    p = run("queue", "list", f"--url=http://127.0.0.1:{port}")
    assert p.returncode == 1
    assert p.stderr.startswith("error ConnectFailed: "), p.stderr
    assert "hint: is a node listening at --url?" in p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    p = run("serve", "--node-id", "1", "--peers", "1=nowhere", "--data-dir", str(tmp_path))
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert p.stderr.startswith("error ValueError: expected HOST:PORT"), p.stderr
    p = run("queue", "stats", "bad.name", f"--url=http://127.0.0.1:{port}", "--json")
    assert p.returncode == 1
    assert json.loads(p.stdout)["error"]["code"] in {"InvalidQueueName", "ConnectFailed"}


def _children(pid: int) -> set[int]:
    """The live processes whose parent is ``pid`` (from /proc)."""
    out = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.add(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_dev_derives_peer_ports_and_any_stop_signal_stops_every_node(
    tmp_path: Path, sig: signal.Signals
) -> None:
    base = consecutive_free_ports(3)
    dev = subprocess.Popen(
        [
            *(sys.executable, "-m", "cmq", "dev", "--data-dir", str(tmp_path)),
            *("--http-port", str(base), "--groups", "1"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    nodes: set[int] = set()
    try:
        dev_banner(dev)
        # Peer ports follow the HTTP port (+1000), not the fixed 9080-9082 (each node
        # registers its address in the catalog shortly after the cluster is ready).
        expected = {f"127.0.0.1:{base + 1000 + i}" for i in range(3)}
        addresses: set[str] = set()
        deadline = time.monotonic() + 20
        while addresses != expected and time.monotonic() < deadline:
            code, status = cmq("status", f"--url=http://127.0.0.1:{base}")
            assert code == 0
            addresses = {n["address"] for n in status["nodes"].values()}
            time.sleep(0.2)
        assert addresses == expected
        nodes = _children(dev.pid)
        assert len(nodes) == 3
        started = time.monotonic()
        dev.send_signal(sig)
        assert dev.wait(15) == 0
        took = time.monotonic() - started
        assert not [n for n in nodes if _alive(n)], "a node outlived cmq dev"
        assert took < 8, took
    finally:
        if dev.poll() is None:
            dev.kill()
            dev.wait()
        for n in nodes:
            if _alive(n):
                os.kill(n, signal.SIGKILL)
