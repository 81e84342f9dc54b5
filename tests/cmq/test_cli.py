"""The `cmq` command as a user runs it: `cmq dev`, then the admin and client subcommands."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.ports import free_ports

pytestmark = pytest.mark.slow


def cmq(*args: str, stdin: str | None = None) -> tuple[int, object]:
    p = subprocess.run(
        [sys.executable, "-m", "cmq", *args],
        input=stdin,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = p.stdout.strip()
    return p.returncode, json.loads(out) if out.startswith(("{", "[")) else out


def consecutive_free_ports(n: int) -> int:
    """The first of ``n`` consecutive ports that are free right now (cmq dev counts up)."""
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


def test_dev_cluster_and_client_commands(tmp_path: Path) -> None:
    base = consecutive_free_ports(3)
    peer_base = consecutive_free_ports(3)
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
        banner = ""
        deadline = time.monotonic() + 60
        while "Ctrl-C" not in banner and time.monotonic() < deadline:
            assert dev.stdout is not None
            line = dev.stdout.readline()
            if not line and dev.poll() is not None:
                break
            banner += line
        assert "Ctrl-C" in banner, banner
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
    finally:
        dev.send_signal(signal.SIGINT)
        dev.wait(30)
    assert dev.returncode == 0
    # A restart reuses the data.
    assert (tmp_path / "dev" / "node1").is_dir() and (tmp_path / "dev" / "secret").exists()
