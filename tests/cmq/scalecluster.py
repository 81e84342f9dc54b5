"""Real ``cmq serve`` processes for the scale-out tests: founding nodes started with ``--peers``
and spare nodes started later with ``--join``; statuses and node lists over HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from cmq.catalog.keys import cluster_credential
from cmq.cli import launch
from cmq.cli.launch import NodeProcesses, free_ports
from cmq.client import NO_RETRY, Client
from cmq.errors import CmqError

SECRET = "scale-out-test-secret-0123456789"


class ScaleCluster:
    """``founders`` nodes (ids 1..founders) plus ``spares`` that join later (`cmq.cli.launch`)."""

    def __init__(
        self,
        root: Path,
        founders: int = 3,
        spares: int = 2,
        groups: int = 6,
        *,
        anonymous: bool = True,
    ) -> None:
        """``anonymous``: the nodes serve unsigned requests; False: they ask for signatures
        (the test's client signs with the credential derived from the cluster secret)."""
        self.root = root
        self.anonymous = anonymous
        self.groups = groups
        n = founders + spares
        ports = free_ports(2 * n)
        self.ids = list(range(1, n + 1))
        self.founders = list(range(1, founders + 1))
        self.settings = launch.founders(
            n, root, http_ports=ports[:n], peer_ports=ports[n:], groups=groups, anonymous=anonymous
        )
        self.http = {i: s.url for i, s in self.settings.items()}
        self.peer = {i: s.peer for i, s in self.settings.items()}
        self.nodes = NodeProcesses(root, SECRET, env={"CMQ_LOG_LEVEL": "INFO"})
        key = None if anonymous else cluster_credential(SECRET.encode())
        self.client = Client(list(self.http.values()), retry=NO_RETRY, timeout=5, access_key=key)

    @property
    def procs(self) -> dict[int, subprocess.Popen[bytes]]:
        return self.nodes.procs

    def start(self, nid: int, join: list[int] | None = None) -> None:
        """Start a founder (its peers: the founders), or with ``join`` a node joining through
        those nodes."""
        settings = self.settings[nid]
        if join:
            settings = replace(settings, peers={}, join=tuple(self.http[j] for j in join))
        else:
            peers = {f: self.peer[f] for f in self.founders}
            settings = replace(settings, peers=peers)
        self.nodes.start(settings)

    def kill(self, nid: int) -> None:
        self.nodes.kill(nid)

    async def close(self) -> None:
        await asyncio.to_thread(self.nodes.stop_all, 10)
        await self.client.close()

    def node(self, nid: int, timeout: float = 5) -> Client:
        return self.client.derive([self.http[nid]], timeout=timeout)

    async def wait_ready(self, nodes: list[int], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(await asyncio.gather(*(self.node(n, 2).ready() for n in nodes))):
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"nodes {nodes} not ready in {timeout}s; logs in {self.root}")

    async def status(self, nid: int) -> dict[str, Any] | None:
        try:
            return await self.node(nid).status()
        except CmqError:
            return None

    async def statuses(self, nodes: list[int] | None = None) -> dict[int, dict[str, Any]]:
        ids = sorted(self.procs) if nodes is None else nodes
        got = await asyncio.gather(*(self.status(n) for n in ids))
        return {n: s for n, s in zip(ids, got, strict=True) if s is not None}

    async def catalog_groups(self, via: int) -> dict[str, Any]:
        """The catalog's data groups (replicas, move) as node ``via`` sees them."""
        st = await self.status(via)
        return {} if st is None else dict(st.get("data_groups", {}))

    async def leaders(self) -> dict[int, int]:
        """Group -> the running node that leads it with the highest term."""
        best: dict[int, tuple[int, int]] = {}
        for nid, st in (await self.statuses()).items():
            for g, info in st["groups"].items():
                if info["role"] == "leader":
                    cand = (int(info["term"]), nid)
                    best[int(g)] = max(best.get(int(g), cand), cand)
        return {g: nid for g, (_, nid) in best.items()}

    async def queue_stats(self, queue: str, nodes: list[int]) -> dict[int, dict[str, Any]]:
        out = {}
        for nid in nodes:
            with contextlib.suppress(CmqError):
                info = await self.node(nid).get_queue(queue)
                stats = dataclasses.asdict(info.stats)
                stats.pop("oldest_age_ms", None)
                out[nid] = stats
        return out


async def until(check: Any, timeout: float, what: str, interval: float = 0.3) -> Any:
    """Await ``check()`` (a coroutine function) until it returns a truthy value; that value.
    AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        got = await check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)
