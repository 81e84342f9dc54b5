"""Starting ``cmq serve`` processes on this machine: one typed description of a node's settings
(`ServeSettings`) gives its ``cmq serve`` command line; `founders` describes the founding nodes
of a local cluster; `NodeProcesses` starts, stops and kills their processes (a log file each);
`until_ready` waits until nodes answer ``/readyz``; `free_ports` finds loopback ports (from
`PORT_RANGE_ENV`'s range when set);
`LocalCluster` is all of it for a cluster a benchmark starts and stops.

``cmq dev`` (`cmq.cli.dev`) runs on it, and so do the test clusters (``tests/cmq/cluster.py``,
``tests/chaos/cluster.py``, ...) and the benchmarks (``bench/``), each a thin layer adding
its own abilities (a TCP proxy between peers, clock files, LazyFS data directories, another
release's code). `ServeSettings.argv` writes only the flags that are set, so the same settings
give a command line that earlier releases of ``cmq serve`` read too (the upgrade test runs
the previous release's code with it).

Nothing here imports the node: a launcher runs in processes (tests, benchmarks, ``cmq dev``)
that never start a node themselves.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

SERVE_COMMAND: tuple[str, ...] = (sys.executable, "-m", "cmq")
"""How a node process is started: ``<command> serve <flags>`` (a launcher may run other code
first, as the chaos tests do to change snapshot options)."""
LOOPBACK = "127.0.0.1"
DEFAULT_HTTP_PORT = 8080
"""The HTTP API's default port (``cmq serve --http``; the image and the chart expose it)."""
DEFAULT_PEER_PORT = 9080
"""The peer (Raft) traffic's default port (``cmq serve --peer``)."""


PORT_RANGE_ENV = "CMQ_PORT_RANGE"
"""``LOW-HIGH`` (inclusive): `free_ports` takes its ports from this range instead of asking the
kernel for ephemeral ones. Local clusters started side by side on one machine (parallel test
workers, each given its own range) then never hand out each other's ports, and a range below
the kernel's ephemeral one (``/proc/sys/net/ipv4/ip_local_port_range``) is never taken by an
outgoing connection's source port between the pick and the server's bind. Unset: the kernel's."""

_cursor: dict[tuple[int, int], int] = {}
"""Per range, where this process looks next (so successive calls do not hand out a port
again while the server it was picked for is still starting)."""
_cursor_lock = threading.Lock()
"""Held while a range is searched: threads of one process picking ports at once (a test
starting three nodes from a thread pool) must not read the same cursor."""


def free_ports(n: int, host: str = LOOPBACK) -> list[int]:
    """``n`` distinct TCP ports that were free on ``host`` a moment ago (bound at once, so
    none repeats; another process may take one before it is used), from `PORT_RANGE_ENV`'s
    range when it is set. `ValueError` for a malformed range; `RuntimeError` when the range
    has fewer than ``n`` free ports."""
    span = port_range(os.environ.get(PORT_RANGE_ENV))
    socks: list[socket.socket] = []
    try:
        if span is None:
            for _ in range(n):
                socks.append(socket.socket())
                socks[-1].bind((host, 0))
        else:
            with _cursor_lock:
                _bind_in(span, n, host, socks)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def port_range(text: str | None) -> tuple[int, int] | None:
    """``LOW-HIGH`` as ``(low, high)``; None for None or empty; `ValueError` otherwise."""
    if not text:
        return None
    low, sep, high = text.partition("-")
    if not (sep and low.strip().isdigit() and high.strip().isdigit()):
        raise ValueError(f"{PORT_RANGE_ENV} must be LOW-HIGH (two port numbers); got {text!r}")
    span = int(low), int(high)
    if not 1024 <= span[0] <= span[1] <= 65535:
        raise ValueError(f"{PORT_RANGE_ENV} must lie within 1024-65535, low first; got {text!r}")
    return span


def _bind_in(span: tuple[int, int], n: int, host: str, socks: list[socket.socket]) -> None:
    """Bind ``n`` sockets of ``socks`` to free ports of ``span``, from this process's cursor
    on (first placed by the process id, so processes sharing a range start apart)."""
    low, high = span
    size = high - low + 1
    start = _cursor.get(span, (os.getpid() * 7919) % size)
    for step in range(size):
        offset = (start + step) % size
        s = socket.socket()
        try:
            s.bind((host, low + offset))
        except OSError:
            s.close()
            continue
        socks.append(s)
        if len(socks) == n:
            _cursor[span] = (offset + 1) % size
            return
    raise RuntimeError(f"{PORT_RANGE_ENV} {low}-{high} has fewer than {n} free ports on {host}")


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """One node's ``cmq serve`` settings. None (or empty, or False) leaves a flag out: the
    node takes its default (or ``CMQ_*`` from its environment)."""

    node_id: int
    http: str
    """``HOST:PORT`` of the HTTP API."""
    peer: str
    """``HOST:PORT`` of peer traffic."""
    data_dirs: tuple[str, ...]
    peers: Mapping[int, str] = field(default_factory=dict)
    """Node id -> the ``HOST:PORT`` this node reaches it at (itself included); empty with
    ``join``."""
    join: tuple[str, ...] = ()
    """URLs of running nodes to join through (instead of ``peers``)."""
    groups: int | None = None
    anonymous: bool = False
    """Serve unsigned requests (development and tests)."""
    http_workers: int | None = None
    segment_max_bytes: int | None = None
    segment_max_age: float | None = None
    max_inflight_sends: int | None = None
    replication: int | None = None
    zone: str | None = None
    rejoin: bool = False
    tls_cert: str | None = None
    tls_key: str | None = None
    extra: tuple[str, ...] = ()
    """Further ``cmq serve`` flags, as they are (peer TLS files, ``--config``, ...)."""

    @property
    def url(self) -> str:
        """The node's HTTP API (plain HTTP; ``https`` with ``tls_cert``)."""
        return f"{'https' if self.tls_cert else 'http'}://{self.http}"

    def argv(self) -> list[str]:
        """The ``cmq serve`` flags (what follows ``serve``)."""
        out = ["--node-id", str(self.node_id), "--http", self.http, "--peer", self.peer]
        if self.peers:
            out += ["--peers", ",".join(f"{n}={a}" for n, a in sorted(self.peers.items()))]
        if self.join:
            out += ["--join", ",".join(self.join)]
        for d in self.data_dirs:
            out += ["--data-dir", d]
        options: tuple[tuple[str, object], ...] = (
            ("--groups", self.groups),
            ("--http-workers", self.http_workers),
            ("--segment-max-bytes", self.segment_max_bytes),
            ("--segment-max-age", self.segment_max_age),
            ("--max-inflight-sends", self.max_inflight_sends),
            ("--replication", self.replication),
            ("--zone", self.zone),
            ("--tls-cert", self.tls_cert),
            ("--tls-key", self.tls_key),
        )
        for flag, value in options:
            if value is not None:
                out += [flag, str(value)]
        if self.anonymous:
            out.append("--anonymous")
        if self.rejoin:
            out.append("--rejoin")
        return [*out, *self.extra]

    def command(self, prefix: Sequence[str] = SERVE_COMMAND) -> list[str]:
        """The whole command line: ``prefix`` (`SERVE_COMMAND`), ``serve``, `argv`."""
        return [*prefix, "serve", *self.argv()]


def founders(
    n: int,
    root: Path,
    *,
    http_ports: Sequence[int],
    peer_ports: Sequence[int],
    host: str = LOOPBACK,
    groups: int | None = None,
    anonymous: bool = False,
) -> dict[int, ServeSettings]:
    """The settings of a cluster's ``n`` founding nodes (ids 1..n, each with every node as
    a peer), node ``i`` on ``http_ports[i - 1]`` and ``peer_ports[i - 1]`` of ``host``, its
    data in ``root/node<i>``."""
    if len(http_ports) < n or len(peer_ports) < n:
        raise ValueError(f"{n} nodes need {n} HTTP ports and {n} peer ports")
    peers = {i: f"{host}:{peer_ports[i - 1]}" for i in range(1, n + 1)}
    return {
        i: ServeSettings(
            node_id=i,
            http=f"{host}:{http_ports[i - 1]}",
            peer=peers[i],
            data_dirs=(str(root / f"node{i}"),),
            peers=peers,
            groups=groups,
            anonymous=anonymous,
        )
        for i in peers
    }


class NodeProcesses:
    """The ``cmq serve`` processes of one local cluster, by node id. Each writes stdout and
    stderr to ``<log_dir>/node<id>.log`` (appended: a restart keeps the earlier runs) and gets
    the cluster secret as ``CMQ_SECRET``. Not thread-safe; the blocking waits must not run on
    an event loop's thread (use ``asyncio.to_thread`` there)."""

    def __init__(
        self,
        log_dir: Path,
        secret: str,
        *,
        env: Mapping[str, str] | None = None,
        command: Sequence[str] = SERVE_COMMAND,
    ) -> None:
        """``env``: added to this process's environment for every node; ``command``: how a
        node is started (`SERVE_COMMAND`)."""
        self.log_dir = log_dir
        self.secret = secret
        self.env = dict(env or {})
        self.command = tuple(command)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def log_path(self, nid: int) -> Path:
        return self.log_dir / f"node{nid}.log"

    def start(
        self,
        settings: ServeSettings,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        banner: str | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start node ``settings.node_id`` (not running here) with ``env`` added to the
        environment, in ``cwd``; ``banner``: a line written to its log first."""
        nid = settings.node_id
        if nid in self.procs:
            raise RuntimeError(f"node {nid} is running")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        full = dict(os.environ, CMQ_SECRET=self.secret, **self.env, **(env or {}))
        with self.log_path(nid).open("ab") as log:
            if banner is not None:
                log.write(banner.encode() + b"\n")
                log.flush()
            proc = subprocess.Popen(
                settings.command(self.command),
                env=full,
                stdout=log,
                stderr=log,
                cwd=None if cwd is None else str(cwd),
            )
        self.procs[nid] = proc
        return proc

    def running(self) -> list[int]:
        """The nodes whose process has not exited."""
        return [n for n, p in sorted(self.procs.items()) if p.poll() is None]

    def kill(self, nid: int) -> None:
        """SIGKILL node ``nid`` (if running here) and wait until it is gone."""
        p = self.procs.pop(nid, None)
        if p is not None:
            p.send_signal(signal.SIGKILL)
            p.wait()

    def kill_all(self) -> list[int]:
        """SIGKILL every node before waiting for any (a coordinated power loss); their ids."""
        victims = sorted(self.procs)
        for nid in victims:
            self.procs[nid].send_signal(signal.SIGKILL)
        for nid in victims:
            self.procs.pop(nid).wait()
        return victims

    def terminate(self, nid: int, timeout: float = 30) -> int:
        """SIGTERM node ``nid`` (a graceful stop: it hands its leaderships away first), SIGKILL
        after ``timeout`` seconds; its exit code (0 when it was not running here)."""
        p = self.procs.pop(nid, None)
        if p is None:
            return 0
        p.terminate()
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            return p.wait()

    def stop_all(self, timeout: float = 10) -> None:
        """SIGTERM every node still running, wait up to ``timeout`` seconds for all of them
        together, then SIGKILL what is left."""
        procs, self.procs = list(self.procs.values()), {}
        for p in procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + timeout
        for p in procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


async def until_ready(urls: Sequence[str], timeout: float, *, interval: float = 0.2) -> bool:
    """Whether every node of ``urls`` answered ``/readyz`` with 200 within ``timeout``
    seconds (asked together, every ``interval`` seconds; probes need no signature)."""
    from cmq.client import NO_RETRY, Client

    async with Client(list(urls), timeout=2, retry=NO_RETRY) as client:
        nodes = [client.derive([u]) for u in urls]
        deadline = time.monotonic() + timeout
        while True:
            if all(await asyncio.gather(*(n.ready() for n in nodes))):
                return True
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(interval)


def wait_ready(urls: Sequence[str], timeout: float, *, interval: float = 0.2) -> bool:
    """`until_ready`, blocking (called from a running event loop, it blocks that loop: the
    wait runs on a loop of its own in a worker thread)."""

    def run() -> bool:
        return asyncio.run(until_ready(urls, timeout, interval=interval))

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run()
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


class LocalCluster:
    """``n`` founding nodes on free loopback ports, data and logs under ``root``, anonymous
    access unless ``anonymous`` is False (then `credential` signs as an admin): what a
    benchmark starts, uses and stops. `start` starts every node; `stop` stops
    them all at once (SIGTERM, then SIGKILL after ``timeout``), so no node hands its
    leaderships to another first (``CMQ_HANDOFF_SECONDS=0`` unless ``env`` says otherwise)."""

    def __init__(
        self,
        root: Path,
        n: int = 3,
        *,
        groups: int | None = None,
        secret: str | None = None,
        http_workers: int | None = None,
        env: Mapping[str, str] | None = None,
        anonymous: bool = True,
    ) -> None:
        ports = free_ports(2 * n)
        self.root = root
        self.settings = founders(
            n, root, http_ports=ports[:n], peer_ports=ports[n:], groups=groups, anonymous=anonymous
        )
        if http_workers is not None:
            for nid, s in self.settings.items():
                self.settings[nid] = replace(s, http_workers=http_workers)
        self.urls = [s.url for _, s in sorted(self.settings.items())]
        env = {"CMQ_HANDOFF_SECONDS": "0", **(env or {})}
        self.procs = NodeProcesses(root, secret or secrets.token_hex(16), env=env)

    @property
    def credential(self) -> tuple[str, str]:
        """The cluster credential (key id, secret): an admin key of every node
        (`cmq.catalog.keys.cluster_credential`)."""
        from cmq.catalog.keys import cluster_credential

        return cluster_credential(self.procs.secret.encode())

    def start(self) -> None:
        for settings in self.settings.values():
            self.procs.start(settings)

    def pids(self) -> list[int]:
        """The node processes' ids (their HTTP front ends are their children)."""
        return [p.pid for _, p in sorted(self.procs.procs.items())]

    async def ready(self, timeout: float = 90) -> float:
        """Seconds until every node answered ``/readyz``; `TimeoutError` after ``timeout``."""
        started = time.monotonic()
        if not await until_ready(self.urls, timeout, interval=0.5):
            raise TimeoutError(f"the cluster was not ready in {timeout}s; logs in {self.root}")
        return time.monotonic() - started

    def stop(self, timeout: float = 20) -> None:
        self.procs.stop_all(timeout)
