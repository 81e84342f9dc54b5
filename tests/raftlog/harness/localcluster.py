"""Start real raftlog node processes on loopback and talk to their control API.

Used by the multi-process tests and by ``bench/raftlog_bench.py``. The node processes run
``python -m tests.raftlog.harness.node`` with the repository root on their ``PYTHONPATH``, so
the caller's working directory does not matter.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from tests.ports import free_ports

REPO = Path(__file__).resolve().parents[3]
"""The repository root: put on the node processes' ``PYTHONPATH`` so ``tests`` imports."""


@dataclass
class ProcCluster:
    """N node processes; ``kill`` is SIGKILL (no clean shutdown), ``start`` reuses the data."""

    root: Path
    n: int = 3
    groups: int = 4
    secret: str = "local-cluster-secret"
    state_machine: str = "applog"
    procs: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    http: dict[int, str] = field(default_factory=dict)
    args: dict[int, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ports = free_ports(2 * self.n)
        peers = ",".join(f"{i + 1}=127.0.0.1:{ports[i]}" for i in range(self.n))
        for i in range(self.n):
            nid = i + 1
            http_port = ports[self.n + i]
            self.http[nid] = f"http://127.0.0.1:{http_port}"
            self.args[nid] = [
                sys.executable,
                "-m",
                "tests.raftlog.harness.node",
                "--id",
                str(nid),
                "--listen",
                f"127.0.0.1:{ports[i]}",
                "--http",
                f"127.0.0.1:{http_port}",
                "--peers",
                peers,
                "--data-dir",
                str(self.root / f"n{nid}"),
                "--groups",
                str(self.groups),
                "--state-machine",
                self.state_machine,
            ]

    def start(self, nid: int) -> None:
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        env = dict(os.environ, RAFTLOG_SECRET=self.secret, PYTHONPATH=path)
        log = open(self.root / f"n{nid}.log", "ab")  # noqa: SIM115 - owned by the process
        self.procs[nid] = subprocess.Popen(self.args[nid], env=env, stdout=log, stderr=log)

    def start_all(self) -> None:
        for nid in self.args:
            self.start(nid)

    def kill(self, nid: int) -> None:
        p = self.procs.pop(nid)
        p.send_signal(signal.SIGKILL)
        p.wait()

    def stop_all(self) -> None:
        for nid in list(self.procs):
            p = self.procs.pop(nid)
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


async def get_json(session: aiohttp.ClientSession, url: str) -> dict[str, object] | None:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
            if r.status != 200:
                return None
            data: dict[str, object] = await r.json()
            return data
    except (TimeoutError, aiohttp.ClientError):
        return None


async def leaders(session: aiohttp.ClientSession, c: ProcCluster) -> dict[int, int]:
    """group -> leader id, as reported by the live nodes that call themselves leader."""
    out: dict[int, int] = {}
    for nid in sorted(c.procs):
        st = await get_json(session, c.http[nid] + "/status")
        if st is None:
            continue
        groups = st["groups"]
        assert isinstance(groups, dict)
        for gid, g in groups.items():
            if g["role"] == "LEADER":
                out[int(gid)] = nid
    return out


async def wait_ready(session: aiohttp.ClientSession, c: ProcCluster, timeout: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        if len(await leaders(session, c)) == c.groups:
            return
        await asyncio.sleep(0.1)
    raise AssertionError("cluster did not elect leaders for every group")
