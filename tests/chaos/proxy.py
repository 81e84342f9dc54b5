"""A TCP proxy between every pair of cmq nodes, so the runner can partition them.

Node ``i`` reaches node ``j`` at ``127.0.0.1:P[i][j]`` (its own ``--peers`` map), which forwards
to ``j``'s real peer port. The peer transport dials one connection per pair (the smaller id
dials), so bytes from the dialer to the listener travel in direction ``(i, j)`` and the replies
in ``(j, i)``. Each *direction* can be blocked in one of two ways:

* ``pause``: stop reading (TCP backpressure; nothing is lost): a partition during which packets
  are dropped and retransmitted later. On heal the held bytes flow, as TCP would deliver them.
  New connections are held (not connected upstream) until the direction opens.
* ``drop``: read and discard. A connection that lost bytes is closed when the direction opens
  (its framing is broken), so the peers reconnect; new connections are closed at once while a
  direction of the pair drops.

Run in its own process (`python -m tests.chaos.proxy`, driven by `ProxyProcess`) so that the
runner's client load never delays peer traffic. Protocol on stdin/stdout, one JSON object a
line: first ``{"routes": [[i, j, listen_port, target_port], ...]}`` → ``{"ready": true}``;
then ``{"blocks": [[src, dst, "pause"|"drop"], ...]}`` (the complete set; ``[]`` heals all)
→ ``{"ok": true, "connections": n}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Mode = Literal["pause", "drop"]
Direction = tuple[int, int]


@dataclass(eq=False)
class _Conn:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter | None = None
    tainted: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def close(self) -> None:
        for w in (self.client, self.upstream):
            if w is not None:
                w.close()


class Proxy:
    """All routes of one cluster in this event loop."""

    def __init__(self, routes: list[tuple[int, int, int, int]]) -> None:
        self.routes = routes
        self.blocks: dict[Direction, Mode] = {}
        self._changed = asyncio.Event()
        self._servers: list[asyncio.Server] = []
        self._conns: dict[tuple[int, int], set[_Conn]] = {}

    async def start(self) -> None:
        for i, j, listen, target in self.routes:
            self._conns[(i, j)] = set()
            server = await asyncio.start_server(
                functools.partial(self._accept, i, j, target),
                "127.0.0.1",
                listen,
                reuse_address=True,
            )
            self._servers.append(server)

    async def close(self) -> None:
        for s in self._servers:
            s.close()
        for conns in self._conns.values():
            for c in list(conns):
                c.close()
                for t in c.tasks:
                    t.cancel()

    def connections(self) -> int:
        return sum(len(c) for c in self._conns.values())

    def set_blocks(self, blocks: dict[Direction, Mode]) -> None:
        """Replace the blocked directions; wake every waiting pump."""
        before = self.blocks
        self.blocks = dict(blocks)
        for (i, j), conns in self._conns.items():
            for d in ((i, j), (j, i)):
                if before.get(d) == "drop" and self.blocks.get(d) != "drop":
                    for c in list(conns):
                        if c.tainted:
                            c.close()
                if self.blocks.get(d) == "drop" and before.get(d) != "drop":
                    for c in list(conns):  # a cut link: its connections reset at once
                        c.close()
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_open(self, d: Direction) -> Mode | None:
        """Wait while ``d`` is paused; the block in force afterwards (None or drop)."""
        while self.blocks.get(d) == "pause":
            await self._changed.wait()
        return self.blocks.get(d)

    async def _accept(
        self, i: int, j: int, target: int, reader: asyncio.StreamReader, w: asyncio.StreamWriter
    ) -> None:
        conn = _Conn(w)
        conns = self._conns[(i, j)]
        conns.add(conn)
        try:
            if "drop" in (self.blocks.get((i, j)), self.blocks.get((j, i))):
                return
            if await self._wait_open((i, j)) == "drop":
                return
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
            except OSError:
                return
            conn.upstream = up_writer
            down = asyncio.ensure_future(self._pump(conn, reader, up_writer, (i, j)))
            up = asyncio.ensure_future(self._pump(conn, up_reader, w, (j, i)))
            conn.tasks = [down, up]
            await asyncio.wait(conn.tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            conn.close()
            for t in conn.tasks:
                t.cancel()
            conns.discard(conn)

    async def _pump(
        self,
        conn: _Conn,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        d: Direction,
    ) -> None:
        with contextlib.suppress(OSError, RuntimeError):
            while True:
                await self._wait_open(d)
                data = await reader.read(1 << 16)
                if not data:
                    return
                # Bytes read just before a pause began are held until it ends.
                if await self._wait_open(d) == "drop":
                    conn.tainted = True
                    continue
                writer.write(data)
                await writer.drain()


async def _serve_stdio() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def reply(obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    first = json.loads(await reader.readline())
    proxy = Proxy([(int(i), int(j), int(a), int(b)) for i, j, a, b in first["routes"]])
    await proxy.start()
    reply({"ready": True})
    try:
        while line := await reader.readline():
            cmd = json.loads(line)
            proxy.set_blocks({(int(a), int(b)): m for a, b, m in cmd["blocks"]})
            reply({"ok": True, "connections": proxy.connections()})
    finally:
        await proxy.close()


class ProxyProcess:
    """The proxy in a child process, driven from the runner's event loop."""

    def __init__(self, routes: list[tuple[int, int, int, int]]) -> None:
        self.routes = routes
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()
        self.blocks: dict[Direction, Mode] = {}

    async def start(self) -> None:
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.chaos.proxy",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=str(Path(__file__).resolve().parents[2]),
        )
        await self._send({"routes": self.routes})

    async def _send(self, obj: dict[str, Any]) -> dict[str, Any]:
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        async with self._lock:
            proc.stdin.write((json.dumps(obj) + "\n").encode())
            await proc.stdin.drain()
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
        if not line:
            raise RuntimeError("the proxy process exited")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def set_blocks(self, blocks: dict[Direction, Mode]) -> None:
        self.blocks = dict(blocks)
        await self._send({"blocks": [[a, b, m] for (a, b), m in sorted(blocks.items())]})

    async def heal(self) -> None:
        await self.set_blocks({})

    async def stop(self) -> None:
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except TimeoutError:
            proc.kill()
            await proc.wait()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve_stdio())
