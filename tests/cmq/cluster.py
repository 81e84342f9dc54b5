"""Real ``cmq serve`` processes on loopback for end-to-end tests, and a producer/consumer load
that checks what it sees. Everything talks to the cluster through `cmq.client`."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import re
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from cmq.cli.launch import NodeProcesses, ServeSettings, founders, free_ports, wait_ready
from cmq.client import NO_RETRY, Client, RawResponse, SyncClient
from cmq.errors import CmqError

SECRET = "end-to-end-test-secret-0123456789"


class CmqCluster:
    """N founding nodes on loopback (`cmq.cli.launch`); ``kill`` is SIGKILL, ``start`` reuses
    the node's data directory. ``settings`` (by node id) is what each node is started with:
    change it with `configure` before a start."""

    def __init__(
        self,
        root: Path,
        n: int = 3,
        groups: int = 2,
        *,
        anonymous: bool = True,
        node_args: dict[int, list[str]] | None = None,
        node_env: dict[int, dict[str, str]] | None = None,
    ) -> None:
        """``anonymous``: the nodes serve unsigned requests (``--anonymous``); False: they ask
        for signatures (tests of authentication). ``node_args`` and ``node_env``: extra
        ``cmq serve`` arguments and environment variables by node id."""
        self.root = root
        self.n = n
        self.node_env = node_env or {}
        ports = free_ports(2 * n)
        self.settings: dict[int, ServeSettings] = founders(
            n, root, http_ports=ports[:n], peer_ports=ports[n:], groups=groups, anonymous=anonymous
        )
        for nid, extra in (node_args or {}).items():
            self.configure(nid, extra=tuple(extra))
        self.nodes = NodeProcesses(root, SECRET)

    def configure(self, *nodes: int, **changes: Any) -> None:
        """Change the settings (`ServeSettings` fields) of ``nodes`` (default: every node) for
        their next start."""
        for nid in nodes or list(self.settings):
            self.settings[nid] = replace(self.settings[nid], **changes)

    @property
    def http(self) -> dict[int, str]:
        """Every node's URL by id."""
        return {nid: s.url for nid, s in self.settings.items()}

    @property
    def urls(self) -> list[str]:
        """Every node's URL, node 1 first."""
        return [s.url for _, s in sorted(self.settings.items())]

    @property
    def procs(self) -> dict[int, subprocess.Popen[bytes]]:
        """The node processes started here and not stopped, by id."""
        return self.nodes.procs

    def start(self, nid: int) -> None:
        self.nodes.start(self.settings[nid], env=self.node_env.get(nid))

    def start_all(self) -> None:
        for nid in self.settings:
            self.start(nid)
        self.wait_ready()

    @contextlib.contextmanager
    def running(self) -> Iterator[CmqCluster]:
        """This cluster started (`start_all`), and stopped on leaving, also when a node failed
        to start: what a fixture that starts a cluster of its own yields."""
        try:
            self.start_all()
            yield self
        finally:
            self.stop_all()

    def kill(self, nid: int) -> None:
        self.nodes.kill(nid)

    def stop_all(self) -> None:
        self.nodes.stop_all(10)

    def wait_ready(self, timeout: float = 30, nodes: list[int] | None = None) -> None:
        """Block until every running node (or every one of ``nodes``) answers ``/readyz``
        with 200 (not from a running event loop: use ``asyncio.to_thread`` there)."""
        urls = [self.settings[n].url for n in nodes or self.procs]
        if not wait_ready(urls, timeout, interval=0.1):
            raise AssertionError("cluster not ready; logs: " + str(self.root))

    async def leader_of_queue(self, name: str) -> int:
        """The node currently leading the data group that holds ``name``."""
        async with Client(self.urls, timeout=5, retry=NO_RETRY) as client:
            for nid in sorted(self.procs):
                try:
                    st = await client.derive([self.http[nid]]).status()
                except CmqError:
                    continue
                if name not in st["placement"]:
                    continue
                if st["groups"][str(st["placement"][name])]["role"] == "leader":
                    return nid
        raise AssertionError(f"no leader found for the group of {name}")

    async def kill_and_restart_leader(self, name: str, down: float, settle: float) -> int:
        """Kill the node leading the group of ``name``, start it again ``down`` seconds later and
        give it ``settle`` seconds: the node's id."""
        victim = await self.leader_of_queue(name)
        self.kill(victim)
        await asyncio.sleep(down)
        self.start(victim)
        await asyncio.sleep(settle)
        return victim

    def leader_node_of_queue(self, name: str) -> int:
        """`leader_of_queue`, blocking (see `blocking`)."""
        return blocking(lambda: asyncio.run(self.leader_of_queue(name)))


T = TypeVar("T")


def blocking(call: Callable[[], T]) -> T:
    """``call()``, which runs an event loop of its own (a `SyncClient`, ``asyncio.run``): here,
    or in a worker thread when this thread runs an event loop already. Blocks either way."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return call()
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result()


def request(url: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """One raw request (`cmq.client.Client.request`): (status, parsed JSON body), or
    ``(0, reason)`` when the node could not be reached. Blocking (see `blocking`)."""

    def call() -> tuple[int, Any]:
        with SyncClient(url, timeout=30) as client:
            try:
                raw: RawResponse = client.request(method, path, body)
            except CmqError as e:
                return 0, str(e)
        return raw.status, raw.payload

    return blocking(call)


def unique_queue(prefix: str) -> str:
    """A queue name no other test uses: ``prefix`` (made a valid name) and a random suffix."""
    stem = re.sub(r"[^A-Za-z0-9_-]", "-", prefix)[:60]
    return f"{stem}-{secrets.token_hex(4)}"


@dataclass
class Outcome:
    """What a `Load` saw: bodies attempted, confirmed, received (every delivery) and acked."""

    attempted: set[str] = field(default_factory=set)
    confirmed: set[str] = field(default_factory=set)
    received: list[str] = field(default_factory=list)
    acked: set[str] = field(default_factory=set)
    redelivered_after_ack: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, int]:
        got = set(self.received)
        return {
            "attempted": len(self.attempted),
            "confirmed": len(self.confirmed),
            "received": len(self.received),
            "distinct": len(got),
            "acked": len(self.acked),
            "lost": len(self.confirmed - got),
            "unexpected": len(got - self.attempted),
            "redelivered_after_ack": len(self.redelivered_after_ack),
        }


class Load:
    """Producers (batches of 5 unique bodies) and consumers (receive up to 20, ack them) on
    random live nodes of ``cluster``, through one `Client`: started with `start`, producers
    stopped and the queue drained by `drain`."""

    batch = 5
    """Bodies per send."""

    def __init__(self, cluster: CmqCluster, queue: str, seed: int = 1) -> None:
        self.cluster = cluster
        self.queue = queue
        self.out = Outcome()
        self.rng = random.Random(seed)
        self.stop_producers = asyncio.Event()
        self.stop_consumers = asyncio.Event()
        self.producers: list[asyncio.Task[None]] = []
        self.consumers: list[asyncio.Task[None]] = []
        self.client = Client(cluster.urls, timeout=15)

    def node(self) -> Client:
        """The client, starting at a random live node (failing over to the others)."""
        live = sorted(self.cluster.procs) or sorted(self.cluster.http)
        first = self.rng.choice(live)
        others = [self.cluster.http[n] for n in sorted(self.cluster.http) if n != first]
        return self.client.derive([self.cluster.http[first], *others])

    async def start(self, producers: int = 3, consumers: int = 3) -> None:
        self.producers = [asyncio.create_task(self._producer(w)) for w in range(producers)]
        self.consumers = [asyncio.create_task(self._consumer()) for _ in range(consumers)]

    async def _send(self, w: int, bodies: list[str]) -> None:
        """Producer ``w``'s send of one batch."""
        await self.node().send(self.queue, bodies)

    async def _producer(self, w: int) -> None:
        for n in itertools.count():
            if self.stop_producers.is_set():
                return
            bodies = [f"p{w}-{n}-{k}" for k in range(self.batch)]
            self.out.attempted.update(bodies)
            try:
                await self._send(w, bodies)
            except CmqError:
                await asyncio.sleep(0.05)
            else:
                self.out.confirmed.update(bodies)

    async def _consumer(self) -> None:
        while not self.stop_consumers.is_set():
            try:
                msgs = await self.node().receive(self.queue, 20, wait_seconds=1)
                if not msgs:
                    continue
                for m in msgs:
                    assert isinstance(m.body, str)
                    if m.body in self.out.acked:
                        self.out.redelivered_after_ack.append(m.body)
                    self.out.received.append(m.body)
                results = await self.node().ack(self.queue, [m.receipt for m in msgs])
                for m, res in zip(msgs, results, strict=True):
                    if res.ok:
                        self.out.acked.add(str(m.body))
            except CmqError:
                await asyncio.sleep(0.05)

    async def drain(self, timeout: float = 60) -> Outcome:
        """Stop producing; consume until the queue reports nothing visible, in flight or
        delayed, and every confirmed message was received (or ``timeout``)."""
        self.stop_producers.set()
        await asyncio.gather(*self.producers)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            await asyncio.sleep(0.5)
            if not self.out.confirmed <= set(self.out.received):
                continue
            try:
                st = (await self.node().get_queue(self.queue)).stats
            except CmqError:
                continue
            if st.visible == 0 and st.in_flight == 0 and st.delayed == 0:
                break
        self.stop_consumers.set()
        await asyncio.gather(*self.consumers)
        await self.client.close()
        return self.out


def assert_safe(out: Outcome, what: str, confirmed_at_least: int = 50) -> None:
    """Nothing confirmed was lost, nothing unexpected delivered, nothing delivered after its
    ack was confirmed; and the load did something."""
    s = out.summary()
    print(f"{what}: {s}")
    assert s["confirmed"] > confirmed_at_least, s
    assert s["lost"] == 0, sorted(out.confirmed - set(out.received))[:20]
    assert s["unexpected"] == 0, s
    assert s["redelivered_after_ack"] == 0, out.redelivered_after_ack[:20]
