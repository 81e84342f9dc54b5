"""The serving entry point: one node process (`cmq serve`) is a `QueueNode` behind the HTTP app.

This is the one module of the queue package that imports `api` (the declared exception of the
``queue-below-http`` import contract): it composes the node with the HTTP surface and its
metrics, binds the HTTP port, and runs until SIGINT or SIGTERM. Everything it composes is built
and tested on its own; this module only wires and runs them.

On SIGINT/SIGTERM the node first hands the leadership of every group it leads to its most
caught-up active voter (`hand_off_leadership`, bounded by ``CMQ_HANDOFF_SECONDS``, default 5)
while it still serves, so a rolling restart costs one transfer instead of an election timeout.

Requests must be signed with an access key (`api.auth`) unless the node runs ``anonymous``
(``--anonymous``, logged as a warning). With authentication on, the node makes sure the
cluster has its bootstrap admin key and writes it once to ``<data-dir>/admin-key.json``
(`cmq.admin.key_admin.bootstrap_admin_key`). With ``tls`` (certificate and key files) HTTP is
served over TLS.

With ``http_workers`` N > 0 (``cmq serve --http-workers N``, ``CMQ_HTTP_WORKERS``) the node
process serves no HTTP itself: N front-end processes bind the HTTP port together
(``SO_REUSEPORT``, the kernel spreads connections over them), parse HTTP and JSON and validate,
and call the node through `cmq.frontend.proxy` on a Unix socket, so the Raft loop runs no HTTP.
A front end that dies is started again. With front ends, ``/metrics`` shows the node's metrics
(a copy at most a second old) and the HTTP metrics of the front end that answered. Signed
requests are checked by the front ends themselves, with the node's code (`api.auth`), against a
copy of the node's key ring that the node keeps current over the socket (`cmq.frontend.keys`: a
key deleted or a grant revoked on the node is refused by its front ends within a second), and
``/v1/keys`` is carried to the node's key administration; the cluster secret stays in the node.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import ssl
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry

from api.app import make_app
from api.auth.guard import AuthConfig
from api.metrics import SharedRender
from api.sqs.queues import SqsSettings
from cmq import logs
from cmq.admin.key_admin import KeyAdmin, KeyRing, bootstrap_admin_key
from cmq.catalog.keys import cluster_credential
from cmq.consumers import Subscriptions
from cmq.errors import CmqError
from cmq.frontend.key_calls import NodeKeys
from cmq.frontend.proxy import NodeMetricsCollector, ServiceProxy, ServiceServer
from cmq.logs import LogFormat
from cmq.node.config import NodeConfig
from cmq.node.metrics import register_node_metrics
from cmq.node.queue_metrics import QueueMetricsSettings
from cmq.node.queue_node import QueueNode
from cmq.node.tracing import TRACER_NAME, otlp_provider, traced
from cmq.service import QueueService
from raftlog.runtime import MultiRaft, new_event_loop
from raftlog.transport import Address

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

JOIN_TIMEOUT = 120.0
"""Seconds ``--join`` keeps trying the given nodes before giving up."""


@dataclass(frozen=True, slots=True)
class HttpSecurity:
    """How the HTTP surface is protected: ``anonymous`` (no signatures asked: every request
    is served) and the TLS certificate chain and private key files (None: plain HTTP)."""

    anonymous: bool = False
    tls_cert: str | None = None
    tls_key: str | None = None

    def ssl_context(self) -> ssl.SSLContext | None:
        """The server's TLS context, or None for plain HTTP."""
        if self.tls_cert is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.tls_cert, self.tls_key)
        return context


async def join_cluster(cfg: NodeConfig) -> NodeConfig:
    """Register this node through one of ``cfg.join``'s nodes (retried until it answers or
    `JOIN_TIMEOUT`); the configuration to start with: the registered nodes as peers."""
    from cmq.client import Client

    address = f"{cfg.peer.host}:{cfg.peer.port}"
    dirs = [os.path.abspath(d) for d in cfg.data_dirs]
    async with Client(cfg.join, timeout=10, access_key=cluster_credential(cfg.secret)) as client:
        async with asyncio.timeout(JOIN_TIMEOUT):
            while True:
                try:
                    known = await client.join_node(
                        cfg.node_id, address, dirs, http=cfg.http, zone=cfg.zone
                    )
                    break
                except CmqError as e:
                    logging.getLogger("cmq.cli.server").warning(
                        "join deferred: %s", e, extra={"event": "join_deferred"}
                    )
                    await asyncio.sleep(1.0)
    peers = {n: Address.parse(a) for n, a in known.items()}
    peers[cfg.node_id] = cfg.peer
    return dataclasses.replace(cfg, peers=peers, joined=True)


async def serve(
    cfg: NodeConfig,
    http: Address,
    stop: asyncio.Event,
    security: HttpSecurity | None = None,
    http_workers: int = 0,
    *,
    queue_metrics: QueueMetricsSettings | None = None,
    otlp_endpoint: str | None = None,
) -> None:
    """Start the node (recovery, groups, peers), serve HTTP on ``http`` until ``stop`` is set,
    then stop accepting requests and close the node. A start that fails closes what it started
    and raises (`QueueNode.start`). With ``cfg.join`` the node first registers through a
    running node (`join_cluster`). ``security``: see `HttpSecurity` (default: signed requests,
    plain HTTP). ``http_workers``: front-end processes serving HTTP instead of this one (see
    the module docstring). ``queue_metrics``: which queues get their own ``/metrics`` series
    (default: `QueueMetricsSettings()`).
    ``otlp_endpoint``: export server spans there (`cmq.node.tracing`; None: no tracing)."""
    security = HttpSecurity() if security is None else security
    queue_metrics = QueueMetricsSettings() if queue_metrics is None else queue_metrics
    subscriptions = Subscriptions()
    log = logging.getLogger("cmq.cli.server")
    if cfg.join:
        cfg = await join_cluster(cfg)
    node = QueueNode(cfg)
    await node.start()
    service: QueueService = node
    bootstrap: asyncio.Task[object] | None = None
    tracing: TracerProvider | None = None
    try:
        if otlp_endpoint:
            tracing = otlp_provider(otlp_endpoint, cfg.node_id)
            service = traced(node, tracing.get_tracer(TRACER_NAME))
        registry = CollectorRegistry()
        now_ms = node.clock_source.wall_ms
        register_node_metrics(
            registry,
            node.raft,
            node.machines,
            now_ms,
            node.clock,
            scrubber=node.scrubber,
            disks=node.disk_watch,
            queues=queue_metrics,
            waiting=node.wakeups.waiting,
            subscriptions=subscriptions.counts,
        )
        auth: AuthConfig | None = None
        keys: KeyAdmin | None = None
        ring: KeyRing | None = None
        if security.anonymous:
            log.warning(
                "ANONYMOUS ACCESS: requests are not authenticated; anyone reaching "
                "%s:%d can do anything (never in production)",
                http.host,
                http.port,
                extra={"event": "anonymous_access"},
            )
            print("cmq: anonymous access enabled (--anonymous): no signatures asked", flush=True)
        else:
            # CMQ_AUTH_REGION pins the credential scope's region (default: any region).
            region = os.environ.get("CMQ_AUTH_REGION") or None
            ring = KeyRing(node.catalog, cfg.secret)
            auth = AuthConfig(ring, region=region)
            keys = KeyAdmin(node.catalog, node.router, cfg.secret, now_ms)
            bootstrap = asyncio.create_task(
                bootstrap_admin_key(node.catalog, node.router, cfg.secret, cfg.data_dirs[0], now_ms)
            )
            bootstrap.add_done_callback(_report_bootstrap)
        scheme = "https" if security.tls_cert is not None else "http"
        served = f"{scheme}://{http.host}:{http.port}"
        if http_workers:
            node_metrics = SharedRender(registry)  # one rendering a second for every front end
            served_keys = None if ring is None or keys is None else NodeKeys(ring, keys)
            async with FrontEnds(
                service, http, security, http_workers, node_metrics, keys=served_keys
            ):
                fronts = f"{http_workers} front ends"
                print(f"cmq node {cfg.node_id} serving {served} ({fronts})", flush=True)
                await stop.wait()
                left = await hand_off_leadership(node.raft, cfg.node_id, _handoff_seconds())
        else:
            app = make_app(
                service,
                registry=registry,
                sqs=SqsSettings.from_env(),
                auth=auth,
                keys=keys,
                subscriptions=subscriptions,
                leader_hint=node.leader_http,
            )
            async with _http_site(app, http, security, reuse_port=False):
                print(f"cmq node {cfg.node_id} serving {served}", flush=True)
                await stop.wait()
                left = await hand_off_leadership(node.raft, cfg.node_id, _handoff_seconds())
        print(f"cmq node {cfg.node_id} stopping; groups still led here: {left}", flush=True)
    finally:
        if bootstrap is not None:
            bootstrap.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await bootstrap
        await node.close()
        if tracing is not None:
            tracing.shutdown()  # exports the spans still batched


@contextlib.asynccontextmanager
async def _http_site(
    app: web.Application, http: Address, security: HttpSecurity, *, reuse_port: bool
) -> AsyncIterator[None]:
    """``app`` served on ``http`` until the block ends (then its connections are closed)."""
    # Cancel a handler whose client went away: an abandoned long poll must not lease.
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
    await runner.setup()
    try:
        await web.TCPSite(
            runner,
            http.host,
            http.port,
            reuse_address=True,
            reuse_port=reuse_port or None,
            ssl_context=security.ssl_context(),
        ).start()
        yield
    finally:
        await runner.cleanup()


class FrontEnds:
    """``count`` front-end processes (`front_end_main`) serving HTTP on ``http`` for ``node``
    through a `ServiceServer` on a private Unix socket (its key calls answered from ``keys``,
    the node's key ring and administration, unless ``security.anonymous``); one that exits
    while the block runs is started again after `RESPAWN_SECONDS`. Leaving the block stops them
    (SIGTERM, then SIGKILL after `STOP_SECONDS`) and closes the socket."""

    RESPAWN_SECONDS = 1.0
    STOP_SECONDS = 10.0

    def __init__(
        self,
        service: QueueService,
        http: Address,
        security: HttpSecurity,
        count: int,
        metrics: Callable[[], Awaitable[bytes]] | None = None,
        *,
        keys: NodeKeys | None = None,
    ) -> None:
        """``metrics``: the node's metrics text, shown by every front end's ``/metrics``.
        ``keys``: required unless ``security.anonymous`` (`ValueError`)."""
        if keys is None and not security.anonymous:
            raise ValueError("front ends serving signed requests need the node's key ring")
        self.http = http
        self.security = security
        self.count = count
        self._dir = tempfile.mkdtemp(prefix="cmq-front-")
        path = os.path.join(self._dir, "node.sock")
        self.server = ServiceServer(service, path, metrics, keys)
        self._tasks: list[asyncio.Task[None]] = []
        self._procs: dict[int, asyncio.subprocess.Process] = {}
        self._stopping = False

    async def __aenter__(self) -> FrontEnds:
        await self.server.start()
        self._tasks = [asyncio.create_task(self._keep(i)) for i in range(self.count)]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stopping = True
        for proc in self._procs.values():
            if proc.returncode is None:
                proc.terminate()
        for proc in self._procs.values():
            try:
                async with asyncio.timeout(self.STOP_SECONDS):
                    await proc.wait()
            except TimeoutError:
                proc.kill()
                await proc.wait()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.server.close()
        with contextlib.suppress(OSError):
            os.rmdir(self._dir)

    async def _keep(self, index: int) -> None:
        log = logging.getLogger("cmq.cli.server")
        address = f"{self.http.host}:{self.http.port}"
        mode = "anonymous" if self.security.anonymous else "signed"
        argv = [sys.executable, "-m", "cmq.cli.server", self.server.path, address, mode]
        if self.security.tls_cert is not None and self.security.tls_key is not None:
            argv += [self.security.tls_cert, self.security.tls_key]
        while not self._stopping:
            proc = self._procs[index] = await asyncio.create_subprocess_exec(*argv)
            code = await proc.wait()
            if not self._stopping:
                log.error(
                    "HTTP front end %d exited with %s; starting it again",
                    index,
                    code,
                    extra={"event": "front_end_exited"},
                )
                await asyncio.sleep(self.RESPAWN_SECONDS)


async def front_end(socket_path: str, http: Address, security: HttpSecurity) -> None:
    """One front-end process's life: the HTTP API on ``http`` (``SO_REUSEPORT``) for the node
    serving ``socket_path``, until SIGTERM/SIGINT or until the node process goes away. Unless
    ``security.anonymous``, requests are verified against the proxy's copy of the node's key
    ring (``CMQ_AUTH_REGION`` pins the region, as on the node) and ``/v1/keys`` is served."""
    proxy = ServiceProxy(socket_path, signed=not security.anonymous)
    await proxy.connect()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        registry = CollectorRegistry()
        registry.register(NodeMetricsCollector(proxy))
        auth = None
        if proxy.keys is not None:
            region = os.environ.get("CMQ_AUTH_REGION") or None
            auth = AuthConfig(proxy.keys, region=region, current=proxy.keys.current)
        app = make_app(
            proxy,
            registry=registry,
            sqs=SqsSettings.from_env(),
            auth=auth,
            keys=proxy.keys,
            leader_hint=proxy.leader_http,
        )
        async with _http_site(app, http, security, reuse_port=True):
            while not stop.is_set() and proxy.lost is None:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.5):
                        await stop.wait()
    finally:
        await proxy.close()


def front_end_main(argv: list[str]) -> int:
    """``python -m cmq.cli.server SOCKET HOST:PORT anonymous|signed [CERT KEY]``: run
    `front_end` (started by `FrontEnds`, not by hand)."""
    if len(argv) not in (3, 5) or argv[2] not in ("anonymous", "signed"):
        usage = "usage: python -m cmq.cli.server SOCKET HOST:PORT anonymous|signed [CERT KEY]"
        print(usage, file=sys.stderr)
        return 2
    cert, key = (argv[3], argv[4]) if len(argv) == 5 else (None, None)
    security = HttpSecurity(anonymous=argv[2] == "anonymous", tls_cert=cert, tls_key=key)
    logs.configure_from_env()
    loop = new_event_loop()
    with contextlib.closing(loop):
        loop.run_until_complete(front_end(argv[0], Address.parse(argv[1]), security))
    return 0


def _report_bootstrap(task: asyncio.Task[object]) -> None:
    """Log a bootstrap of the admin key that failed (it is not retried: restart the node)."""
    if not task.cancelled() and task.exception() is not None:
        logging.getLogger("cmq.cli.server").error(
            "the bootstrap admin key could not be made or written: %r",
            task.exception(),
            extra={"event": "admin_key_bootstrap_failed"},
        )


def _handoff_seconds() -> float:
    return float(os.environ.get("CMQ_HANDOFF_SECONDS", "5"))


async def hand_off_leadership(raft: MultiRaft, node_id: int, timeout: float) -> int:
    """Ask every group led by ``node_id`` to transfer its leadership to the voter with the
    highest match index among those recently active, and wait (polling) until this node leads
    none or ``timeout`` seconds passed. Returns how many groups are still led here (0 when the
    hand-off completed; a group with no other active voter cannot be handed off)."""
    deadline = asyncio.get_running_loop().time() + timeout
    asked: set[int] = set()
    while True:
        led = [g for g in sorted(raft.groups) if raft.groups[g].leader() == node_id]
        if not led or asyncio.get_running_loop().time() >= deadline:
            return len(led)
        for g in led:
            if g in asked and raft.status(g).transferee:
                continue  # a transfer is under way
            st = raft.status(g)
            targets = [
                (ps.match, p)
                for p, ps in st.peers.items()
                if p != node_id and p in st.conf.voters and ps.recent_active and not ps.learner
            ]
            if targets:
                raft.transfer_leader(g, max(targets)[1])
                asked.add(g)
        await asyncio.sleep(0.05)


def run(
    cfg: NodeConfig,
    http: Address,
    security: HttpSecurity | None = None,
    http_workers: int = 0,
    log_format: LogFormat = "text",
    *,
    queue_metrics: QueueMetricsSettings | None = None,
    otlp_endpoint: str | None = None,
) -> int:
    """Run one node in the foreground on a fresh event loop (uvloop when installed) until
    SIGINT or SIGTERM; returns the process exit status. Logs go to stderr as ``log_format``
    lines (`cmq.logs`; its front ends write the same); ``CMQ_LOG_LEVEL`` sets the log level
    (default WARNING)."""
    logs.configure(log_format, node=cfg.node_id)
    os.environ.update(logs.child_env(log_format, cfg.node_id))  # read by the front ends

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve(
            cfg,
            http,
            stop,
            security,
            http_workers,
            queue_metrics=queue_metrics,
            otlp_endpoint=otlp_endpoint,
        )

    loop = new_event_loop()
    with contextlib.closing(loop):
        loop.run_until_complete(main())
    return 0


if __name__ == "__main__":
    sys.exit(front_end_main(sys.argv[1:]))
