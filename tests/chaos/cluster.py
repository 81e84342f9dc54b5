"""A cluster of real ``cmq serve`` processes whose peer links all pass through `Proxy`.

Each node gets its own ``--peers`` map: node ``i`` reaches node ``j`` at proxy port ``P[i][j]``.
Nodes can be killed (SIGKILL), paused (SIGSTOP/SIGCONT), restarted on their data, wiped and
restarted with ``--rejoin``; a node's data directory may be a LazyFS mount (power loss).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Protocol

from cmq.cli.launch import SERVE_COMMAND, NodeProcesses, ServeSettings, free_ports
from cmq.client import NO_RETRY, Client
from cmq.errors import CmqError
from tests.chaos.iofaults import Fault
from tests.chaos.proxy import Mode, ProxyProcess

SECRET = "chaos-cluster-secret-0123456789abcdef"
Status = dict[str, Any]


class MountedFS(Protocol):
    """What the cluster needs of a LazyFS mount (`tests.chaos.lazyfs.LazyFS`)."""

    def start(self) -> None: ...

    def drop_unsynced(self) -> object: ...

    def inject(self, fault: Fault) -> object:
        """Plant an I/O fault (`tests.chaos.iofaults`)."""
        ...

    def clear_faults(self) -> object: ...

    def stop(self) -> None: ...


# `cmq serve` with the groups' options overridden (the CLI has no flags for them): NodeConfig
# with another default, still a dataclass (`cmq.cli.settings` reads its fields' defaults).
_WITH_GROUP_OPTIONS = """
import dataclasses, json, sys
import cmq.node.config
from raftlog.runtime import GroupOptions
options = GroupOptions(**json.loads(sys.argv[1]))
@dataclasses.dataclass(frozen=True)
class NodeConfig(cmq.node.config.NodeConfig):
    group_options: GroupOptions = dataclasses.field(default_factory=lambda: options)
cmq.node.config.NodeConfig = NodeConfig
from cmq.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def serve_command(group_options: dict[str, Any] | None) -> tuple[str, ...]:
    """How a node is started (`cmq.cli.launch.SERVE_COMMAND`), with ``group_options``:
    `raftlog.runtime.GroupOptions` overrides (e.g. frequent snapshots) for every group."""
    if not group_options:
        return SERVE_COMMAND
    return (sys.executable, "-c", _WITH_GROUP_OPTIONS, json.dumps(group_options))


def snapshot_code(dest: Path) -> Path:
    """Copy the packages a node runs (cmq, raftlog, api) to ``dest``: every node of a run, and
    every restart, then runs the same code even while the working tree is being edited."""
    repo = Path(__file__).resolve().parents[2]
    for pkg in ("cmq", "raftlog", "api"):
        shutil.copytree(
            repo / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
    return dest


class ChaosCluster:
    """``n`` nodes on loopback; peer traffic through a proxy process."""

    def __init__(
        self,
        root: Path,
        n: int = 3,
        groups: int = 2,
        code: Path | None = None,
        group_options: dict[str, int] | None = None,
    ) -> None:
        self.root = root
        self.group_options = group_options
        """`raftlog.runtime.GroupOptions` overrides (e.g. frequent snapshots), or None."""
        self.code = code
        """A copy of the packages the nodes run (see `snapshot_code`); None: the working tree."""
        self.n = n
        self.groups = groups
        self.ids = list(range(1, n + 1))
        ports = free_ports(2 * n + n * (n - 1))
        self.http_port = {nid: ports[nid - 1] for nid in self.ids}
        self.peer_port = {nid: ports[n + nid - 1] for nid in self.ids}
        rest = iter(ports[2 * n :])
        self.proxy_port = {(i, j): next(rest) for i in self.ids for j in self.ids if i != j}
        self.http = {nid: f"http://127.0.0.1:{self.http_port[nid]}" for nid in self.ids}
        self.proxy = ProxyProcess(
            [(i, j, p, self.peer_port[j]) for (i, j), p in sorted(self.proxy_port.items())]
        )
        self.nodes = NodeProcesses(root, SECRET, command=serve_command(group_options))
        self.paused: set[int] = set()
        self.damaged: set[int] = set()
        """Nodes a disk fault damaged and that have not caught up yet (`tests.chaos.diskfaults`)."""
        self.mounts: dict[int, MountedFS] = {}
        self.client: Client | None = None
        """One attempt per call, all nodes' connections in one pool (set by `start`)."""
        self.starts = 0
        self.clock_offset_ms: dict[int, int] = {}
        """Per node: the clock offset (``CMQ_CLOCK_OFFSET_MS``) its next start gets."""
        self.drift_skew_ms = 0.0
        """The largest skew a ``clock-drift`` episode reached (lease-overlap tolerance)."""

    # -- layout ------------------------------------------------------------------------------------
    def data_dir(self, nid: int) -> Path:
        return self.root / f"node{nid}" / "data"

    def clock_file(self, nid: int) -> Path:
        """The node's live clock-fault file (``CMQ_CLOCK_FILE``, `cmq.routing.clockfault`)."""
        return self.root / f"node{nid}" / "clock.json"

    def set_clock(self, nid: int, offset_ms: int = 0, drift_ppm: float = 0.0) -> None:
        """Move node ``nid``'s clock while it runs (it re-reads the file within a second):
        ``offset_ms`` from now on, plus ``drift_ppm`` of the time elapsed from now."""
        path = self.clock_file(nid)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"offset_ms": offset_ms, "drift_ppm": drift_ppm}))
        os.replace(tmp, path)

    def log_path(self, nid: int) -> Path:
        return self.root / f"node{nid}.log"

    def serve_settings(self, nid: int, rejoin: bool = False) -> ServeSettings:
        """Node ``nid``'s ``cmq serve`` settings: it reaches every other node through the
        proxy."""
        peers = {
            j: f"127.0.0.1:{self.peer_port[j] if j == nid else self.proxy_port[(nid, j)]}"
            for j in self.ids
        }
        return ServeSettings(
            node_id=nid,
            http=f"127.0.0.1:{self.http_port[nid]}",
            peer=f"127.0.0.1:{self.peer_port[nid]}",
            data_dirs=(str(self.data_dir(nid)),),
            peers=peers,
            groups=self.groups,
            anonymous=True,
            rejoin=rejoin,
        )

    def args(self, nid: int, rejoin: bool = False) -> list[str]:
        """Node ``nid``'s command line."""
        return self.serve_settings(nid, rejoin).command(self.nodes.command)

    @property
    def procs(self) -> dict[int, subprocess.Popen[bytes]]:
        """The node processes started here and not stopped (paused ones included), by id."""
        return self.nodes.procs

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self, lazyfs: dict[int, MountedFS] | None = None, ready: float = 60) -> None:
        """Start the proxy, mount the given LazyFS instances, start every node, wait ready."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.client = Client(list(self.http.values()), retry=NO_RETRY)
        await self.proxy.start()
        for nid, fs in (lazyfs or {}).items():
            fs.start()
            self.mounts[nid] = fs
        for nid in self.ids:
            self.start_node(nid)
        await self.wait_ready(ready)

    def start_node(self, nid: int, rejoin: bool = False) -> None:
        assert nid not in self.procs, f"node {nid} is running"
        self.data_dir(nid).mkdir(parents=True, exist_ok=True)
        env = {
            "CMQ_CLOCK_OFFSET_MS": str(self.clock_offset_ms.get(nid, 0)),
            "CMQ_CLOCK_FILE": str(self.clock_file(nid)),
        }
        if self.code is not None:
            env["PYTHONPATH"] = str(self.code)
        # Run from the code snapshot's directory: ``python -m``/``-c`` put the working
        # directory first on the path, ahead of PYTHONPATH (from the checkout, the checkout's
        # packages would be imported instead of the snapshot's).
        self.nodes.start(
            self.serve_settings(nid, rejoin),
            env=env,
            cwd=self.code,
            banner=f"--- start {time.strftime('%H:%M:%S')} rejoin={rejoin}",
        )
        self.starts += 1

    def kill(self, nid: int) -> None:
        """SIGKILL (a paused node too); waits for the process to be gone."""
        self.nodes.kill(nid)
        self.paused.discard(nid)

    async def terminate(self, nid: int, timeout: float = 30) -> int:
        """SIGTERM (a graceful stop: the node hands its leaderships away first), waiting up to
        ``timeout`` seconds before SIGKILL; returns the exit code."""
        self.resume(nid)
        return await asyncio.to_thread(self.nodes.terminate, nid, timeout)

    def pause(self, nid: int) -> None:
        p = self.procs.get(nid)
        if p is not None and nid not in self.paused:
            p.send_signal(signal.SIGSTOP)
            self.paused.add(nid)

    def resume(self, nid: int) -> None:
        p = self.procs.get(nid)
        if p is not None and nid in self.paused:
            p.send_signal(signal.SIGCONT)
        self.paused.discard(nid)

    def running(self) -> list[int]:
        """Nodes with a live, unpaused process."""
        return [n for n in self.ids if n in self.procs and n not in self.paused]

    def exited(self) -> dict[int, int]:
        """Nodes whose process ended by itself, with the exit code (they are forgotten)."""
        out = {}
        for nid, p in list(self.procs.items()):
            code = p.poll()
            if code is not None:
                out[nid] = code
                del self.procs[nid]
                self.paused.discard(nid)
        return out

    def wipe(self, nid: int) -> None:
        """Delete a (stopped) node's data: a lost disk."""
        assert nid not in self.procs
        d = self.data_dir(nid)
        for child in d.iterdir() if d.exists() else []:
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()

    async def set_blocks(self, blocks: dict[tuple[int, int], Mode]) -> None:
        await self.proxy.set_blocks(blocks)

    async def heal_network(self) -> None:
        await self.proxy.heal()

    async def heal_all(self) -> None:
        """Network healed, every node resumed and (re)started."""
        await self.heal_network()
        for nid in list(self.paused):
            self.resume(nid)
        self.exited()
        for nid in self.ids:
            if nid not in self.procs:
                self.start_node(nid)

    async def stop(self) -> None:
        for nid in list(self.paused):
            self.resume(nid)
        await asyncio.to_thread(self.nodes.stop_all, 15)
        with contextlib.suppress(Exception):
            await self.proxy.stop()
        for fs in self.mounts.values():
            with contextlib.suppress(Exception):
                fs.stop()
        self.mounts.clear()
        if self.client is not None:
            await self.client.close()
            self.client = None

    # -- observation -------------------------------------------------------------------------------
    def node(self, nid: int, timeout: float = 3) -> Client:
        """The client of node ``nid`` alone (no failover, one attempt per call)."""
        assert self.client is not None
        return self.client.derive([self.http[nid]], timeout=timeout)

    async def get(self, nid: int, path: str, timeout: float = 3) -> tuple[int, Any]:
        """``GET path`` on ``nid`` as it is: (status, JSON body), or (0, reason) when the node
        did not answer."""
        try:
            raw = await self.node(nid, timeout).request("GET", path)
        except CmqError as e:
            return 0, str(e)
        return raw.status, raw.payload

    async def status(self, nid: int, timeout: float = 3) -> Status | None:
        try:
            return await self.node(nid, timeout).status()
        except CmqError:
            return None

    async def statuses(self, nodes: list[int] | None = None) -> dict[int, Status]:
        nodes = self.running() if nodes is None else nodes
        got = await asyncio.gather(*(self.status(n) for n in nodes))
        return {n: s for n, s in zip(nodes, got, strict=True) if s is not None}

    async def digests(self, timeout: float = 10) -> dict[int, dict[int, dict[str, Any]]]:
        """Data group -> {node: its ``/v1/groups/{group}/digest``} for every running replica
        (the replicas as the catalog in a status names them; every data group on every node
        when no status names them). A replica that did not answer is left out."""
        statuses = await self.statuses()
        catalog: dict[str, Any] = {}
        for st in statuses.values():
            catalog = st.get("data_groups") or catalog
        groups = sorted({int(g) for st in statuses.values() for g in st["groups"]} - {0})
        out: dict[int, dict[int, dict[str, Any]]] = {}
        for g in groups:
            replicas = catalog.get(str(g), {}).get("replicas", self.ids)
            nodes = [n for n in self.running() if n in replicas]
            got = await asyncio.gather(
                *(self.get(n, f"/v1/groups/{g}/digest", timeout) for n in nodes)
            )
            out[g] = {n: body for n, (code, body) in zip(nodes, got, strict=True) if code == 200}
        return out

    async def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            nodes = self.running()
            ready = await asyncio.gather(*(self.node(n, 2).ready() for n in nodes))
            if nodes and all(ready):
                return
            if time.monotonic() > deadline:
                waiting = [n for n, ok in zip(nodes, ready, strict=True) if not ok]
                raise TimeoutError(
                    f"cluster not ready in {timeout}s ({await self.why_not_ready(waiting)});"
                    f" logs in {self.root}"
                )
            await asyncio.sleep(0.2)

    async def why_not_ready(self, nodes: list[int]) -> str:
        """What each of ``nodes`` waits for, from its status: per group its role, leader and
        whether it is still recovering (it may not vote yet); the voters it knows of."""
        parts = []
        for nid in nodes:
            st = await self.status(nid)
            if st is None:
                parts.append(f"node {nid}: no status")
                continue
            groups = [
                f"g{g} {v['role']} leader={v['leader']} voters={v['voters']}"
                + (" RECOVERING" if v.get("recovering") else "")
                for g, v in sorted(st["groups"].items())
                if v.get("recovering") or not v["leader"]
            ]
            parts.append(f"node {nid}: {'; '.join(groups) or 'groups fine (catalog?)'}")
        return ", ".join(parts)

    async def leaders(self) -> dict[int, int]:
        """Group → the node that claims to lead it (among running nodes)."""
        out: dict[int, int] = {}
        for nid, st in (await self.statuses()).items():
            for g, info in st["groups"].items():
                if info["role"] == "leader":
                    out[int(g)] = nid
        return out

    async def group_of(self, queue: str) -> int | None:
        for st in (await self.statuses()).values():
            g = st.get("placement", {}).get(queue)
            if g is not None:
                return int(g)
        return None

    async def leader_of_queue(self, queue: str, timeout: float = 30) -> int:
        """The node leading ``queue``'s data group: the one whose status says ``leader`` with
        the highest term (a deposed leader may not know yet)."""
        deadline = time.monotonic() + timeout
        while True:
            g = await self.group_of(queue)
            if g is not None:
                best: tuple[int, int] | None = None
                for nid, st in (await self.statuses()).items():
                    info = st["groups"].get(str(g))
                    if info and info["role"] == "leader":
                        cand = (int(info["term"]), nid)
                        best = cand if best is None or cand > best else best
                if best is not None:
                    return best[1]
            if time.monotonic() > deadline:
                raise TimeoutError(f"no leader for the group of {queue}")
            await asyncio.sleep(0.1)

    async def caught_up(self, nid: int, timeout: float = 60) -> bool:
        """Wait until ``nid`` has applied, in every group, what the others had committed when
        the wait began. False on timeout (a group may have stopped loudly)."""
        others = [n for n in self.running() if n != nid]
        target: dict[str, int] = {}
        for st in (await self.statuses(others)).values():
            for g, info in st["groups"].items():
                target[g] = max(target.get(g, 0), int(info["commit"]))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            mine = await self.status(nid)
            # The groups placed on ``nid`` (every group when the status names no replicas).
            placed = {
                g
                for g in target
                if g == "0"
                or nid in (mine or {}).get("data_groups", {}).get(g, {}).get("replicas", [nid])
            }
            if mine is not None and all(
                int(mine["groups"].get(g, {}).get("applied", -1)) >= target[g] for g in placed
            ):
                return True
            await asyncio.sleep(0.25)
        return False

    def last_error(self, nid: int) -> str:
        """The last exception line of ``nid``'s log (e.g. why it exited)."""
        p = self.log_path(nid)
        if not p.exists():
            return ""
        last = ""
        with p.open(errors="replace") as f:
            for line in f:
                head = line.split(":", 1)[0]
                if head.endswith(("Error", "Broken", "Violation", "Exception")) and " " not in head:
                    last = line.strip()
        return last

    def log_lines(self, needle: str) -> dict[int, int]:
        """How many lines of each node's log contain ``needle``."""
        out = {}
        for nid in self.ids:
            p = self.log_path(nid)
            if p.exists():
                with p.open(errors="replace") as f:
                    out[nid] = sum(needle in line for line in f)
        return out
