"""Start real ``cmq serve`` processes on loopback for end-to-end tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.ports import free_ports


class CmqCluster:
    """N node processes; ``kill`` is SIGKILL, ``start`` reuses the node's data directory."""

    def __init__(self, root: Path, n: int = 3, groups: int = 2) -> None:
        self.root = root
        self.n = n
        ports = free_ports(2 * n)
        self.http = {i + 1: f"http://127.0.0.1:{ports[i]}" for i in range(n)}
        peers = ",".join(f"{i + 1}=127.0.0.1:{ports[n + i]}" for i in range(n))
        self.args = {
            i + 1: [
                sys.executable,
                "-m",
                "cmq",
                "serve",
                "--node-id",
                str(i + 1),
                "--http",
                f"127.0.0.1:{ports[i]}",
                "--peer",
                f"127.0.0.1:{ports[n + i]}",
                "--peers",
                peers,
                "--data-dir",
                str(root / f"node{i + 1}"),
                "--groups",
                str(groups),
            ]
            for i in range(n)
        }
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, nid: int) -> None:
        env = dict(os.environ, CMQ_SECRET="end-to-end-test-secret-0123456789")
        log = open(self.root / f"node{nid}.log", "ab")  # noqa: SIM115 - owned by the process
        self.procs[nid] = subprocess.Popen(self.args[nid], env=env, stdout=log, stderr=log)

    def start_all(self) -> None:
        for nid in self.args:
            self.start(nid)
        self.wait_ready()

    def kill(self, nid: int) -> None:
        p = self.procs.pop(nid)
        p.send_signal(signal.SIGKILL)
        p.wait()

    def stop_all(self) -> None:
        for p in self.procs.values():
            p.terminate()
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs.clear()

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(request(self.http[n], "GET", "/readyz")[0] == 200 for n in self.procs):
                return
            time.sleep(0.1)
        raise AssertionError("cluster not ready; logs: " + str(self.root))

    def leader_node_of_queue(self, name: str) -> int:
        """The node currently leading the data group that holds ``name``."""
        for nid in sorted(self.procs):
            status, st = request(self.http[nid], "GET", "/v1/status")
            if status != 200 or name not in st["placement"]:
                continue
            group = st["groups"][str(st["placement"][name])]
            if group["role"] == "leader":
                return nid
        raise AssertionError(f"no leader found for the group of {name}")


def request(
    url: str, method: str, path: str, body: Any = None, raw: bytes | None = None
) -> tuple[int, Any]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(url + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            payload = r.read()
            return r.status, json.loads(payload) if payload else None
    except urllib.error.HTTPError as e:
        payload = e.read()
        try:
            return e.code, json.loads(payload)
        except ValueError:
            return e.code, payload
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        return 0, str(e)
