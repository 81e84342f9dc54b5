"""A test double of a cmq cluster's archive read side (the HTTP contract of docs/api.md,
"Archive"): N "replicas" on loopback, each an aiohttp application in one background thread,
sharing one set of synthetic queues and segments. For the reader's and the job's unit tests
only; the end-to-end test runs real nodes.

Faults per replica: ``down`` (connection refused: the application is not served),
``torn`` (the records stream stops halfway, without a trailer), ``bad_checksum`` (the trailer's
checksum differs from the listing: the replica read other bytes), ``bad_crc`` (a body altered
in flight: ``stream_crc`` no longer matches), ``short`` (one record missing, trailer consistent
with what was sent: the count differs from the listing).

`require_signed` makes every replica verify each request's signature as a node does
(`api.auth.sigv4`): 401 for an unsigned or badly signed one; `signed` counts the good ones.
"""

from __future__ import annotations

import asyncio
import base64
import re
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
from aiohttp import web

from tests.ports import free_ports

NID = web.AppKey("nid", int)
BATCH_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@dataclass
class FakeSegment:
    first_seq: int
    last_seq: int
    records: list[dict[str, Any]]
    state: str = "released"
    claim: tuple[str, int] | None = None  # (batch_id, expires_at_ms)

    def lines(self) -> list[bytes]:
        return [orjson.dumps(r) + b"\n" for r in self.records]

    @property
    def checksum(self) -> str:
        crc = 0
        for line in self.lines():
            crc = zlib.crc32(line, crc)
        return f"{zlib.crc32(b'stored', crc):08x}"


@dataclass
class FakeQueue:
    archive: bool = True
    segments: dict[int, FakeSegment] = field(default_factory=dict)
    next_seq: int = 0


@dataclass
class Faults:
    down: bool = False
    torn: set[tuple[str, int]] = field(default_factory=set)
    bad_checksum: set[tuple[str, int]] = field(default_factory=set)
    bad_crc: set[tuple[str, int]] = field(default_factory=set)
    short: set[tuple[str, int]] = field(default_factory=set)


OUTCOMES = ("acked", "acked", "acked", "expired", "dead_lettered", "purged")


def make_records(queue: str, first_seq: int, n: int, sent_at_ms: int) -> list[dict[str, Any]]:
    """``n`` records with distinct ids, varied bodies (binary, empty, large), attributes and
    outcomes; every seq present (a real segment may skip seqs copied forward)."""
    out = []
    for i in range(n):
        seq = first_seq + i
        body = bytes([seq % 256, 0, 255]) + f"{queue}:{seq}".encode() * (1 + seq % 5)
        if seq % 97 == 0:
            body = b""
        out.append(
            {
                "seq": seq,
                "id": f"{queue}-m{seq}",
                "sent_at_ms": sent_at_ms + i * 1000,
                "receive_count": 1 + seq % 3,
                "attributes": {"k": str(seq)} if seq % 2 else {},
                "body_b64": base64.b64encode(body).decode(),
                "outcome": OUTCOMES[seq % len(OUTCOMES)],
            }
        )
    return out


class FakeCluster:
    """``nodes`` replicas (ids 1..n) of every queue; ``leader`` is reported by the listing."""

    def __init__(self, nodes: int = 3, leader: int = 1) -> None:
        self.lock = threading.Lock()
        self.queues: dict[str, FakeQueue] = {}
        self.faults = {nid: Faults() for nid in range(1, nodes + 1)}
        self.leader = leader
        self.ports = dict(zip(range(1, nodes + 1), free_ports(nodes), strict=True))
        self.served: list[tuple[int, str, int]] = []  # (node, queue, first_seq) streamed OK
        self.mark_calls: list[tuple[str, str, list[int]]] = []
        self.keys: dict[str, str] = {}  # access key id -> secret; empty: unsigned is fine
        self.signed: list[tuple[str, str]] = []  # (key id, path) of verified requests
        self.loop = asyncio.new_event_loop()
        self.runners: dict[int, web.AppRunner] = {}
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    # -- data ------------------------------------------------------------------------------
    def add_queue(self, name: str, archive: bool = True) -> None:
        with self.lock:
            self.queues.setdefault(name, FakeQueue(archive=archive))

    def add_segments(
        self, queue: str, sizes: list[int], state: str = "released", day_ms: int = 1_790_000_000_000
    ) -> list[int]:
        """Append segments of ``sizes`` records to ``queue``; their first seqs."""
        self.add_queue(queue)
        firsts = []
        with self.lock:
            q = self.queues[queue]
            for n in sizes:
                first = q.next_seq
                # Consecutive segments straddle UTC days so the date partitions are exercised.
                records = make_records(queue, first, n, day_ms + first * 20_000_000)
                q.segments[first] = FakeSegment(first, first + n - 1, records, state)
                q.next_seq += n
                firsts.append(first)
        return firsts

    def records(self, queue: str | None = None) -> list[dict[str, Any]]:
        """Every record still held (for expectations), with its queue."""
        with self.lock:
            return [
                dict(r, queue=name)
                for name, q in self.queues.items()
                if queue in (None, name)
                for s in q.segments.values()
                for r in s.records
            ]

    def remaining(self, queue: str) -> list[int]:
        with self.lock:
            return sorted(self.queues[queue].segments)

    def expire_claims(self) -> None:
        """Every claim's TTL has run out (as if time went by)."""
        with self.lock:
            for q in self.queues.values():
                for s in q.segments.values():
                    if s.claim is not None:
                        s.claim = (s.claim[0], 0)

    def require_signed(self, keys: dict[str, str]) -> None:
        """From now on, only requests signed with one of ``keys`` (id -> secret) are served."""
        with self.lock:
            self.keys = dict(keys)

    @web.middleware
    async def _verify(self, request: web.Request, handler: Any) -> web.StreamResponse:
        from api.auth.errors import AuthError
        from api.auth.sigv4 import SignedRequest, verify

        with self.lock:
            keys = dict(self.keys)
        if keys:
            path, _, query = request.raw_path.partition("?")
            headers = tuple((k.decode(), v.decode()) for k, v in request.raw_headers)
            signed = SignedRequest(request.method, path, query, headers, await request.read())
            try:
                who = verify(
                    signed, keys.get, now=datetime.now(UTC), region="us-east-1", service="sqs"
                )
            except AuthError as e:
                return self._error(401, type(e).__name__, str(e))
            with self.lock:
                self.signed.append((who.access_key_id, path))
        return await handler(request)

    # -- serving ---------------------------------------------------------------------------
    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{self.ports[n]}" for n in sorted(self.ports)]

    def start(self) -> None:
        self.thread.start()
        for nid in self.ports:
            if not self.faults[nid].down:
                self.set_up(nid)

    def set_up(self, nid: int) -> None:
        asyncio.run_coroutine_threadsafe(self._serve(nid), self.loop).result(10)

    def set_down(self, nid: int) -> None:
        self.faults[nid].down = True
        runner = self.runners.pop(nid, None)
        if runner is not None:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), self.loop).result(10)

    def stop(self) -> None:
        for nid in list(self.runners):
            self.set_down(nid)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def __enter__(self) -> FakeCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self, nid: int) -> None:
        app = web.Application(middlewares=[self._verify])
        app[NID] = nid
        app.router.add_get("/v1/status", self._status)
        app.router.add_get("/v1/queues", self._queues)
        app.router.add_get("/v1/queues/{name}", self._queue)
        app.router.add_get("/v1/queues/{name}/segments", self._listing)
        app.router.add_get("/v1/queues/{name}/segments/{first}/records", self._records)
        app.router.add_post("/v1/queues/{name}/segments/claim", self._claim)
        app.router.add_post("/v1/queues/{name}/segments/archived", self._archived)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.ports[nid]).start()
        self.runners[nid] = runner

    @staticmethod
    def _error(status: int, code: str, message: str = "") -> web.Response:
        return web.json_response(
            {"error": {"code": code, "message": message or code}}, status=status
        )

    async def _status(self, request: web.Request) -> web.Response:
        return web.json_response({"node": request.app[NID]})

    async def _queues(self, request: web.Request) -> web.Response:
        with self.lock:
            return web.json_response({"queues": [{"name": n} for n in sorted(self.queues)]})

    async def _queue(self, request: web.Request) -> web.Response:
        with self.lock:
            q = self.queues.get(request.match_info["name"])
            if q is None:
                return self._error(404, "queue_not_found")
            return web.json_response(
                {"name": request.match_info["name"], "attributes": {"archive": q.archive}}
            )

    async def _listing(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        state = request.query.get("state", "all")
        if state not in ("active", "sealed", "released", "archived_pending", "all"):
            return self._error(400, "invalid_parameter", f"state {state!r}")
        with self.lock:
            q = self.queues.get(name)
            if q is None:
                return self._error(404, "queue_not_found")
            segs = [
                {
                    "first_seq": s.first_seq,
                    "last_seq": s.last_seq,
                    "count": len(s.records),
                    "bytes": sum(len(x) for x in s.lines()),
                    "state": s.state,
                    "checksum": s.checksum,
                    "claim": None
                    if s.claim is None
                    else {"batch_id": s.claim[0], "expires_at_ms": s.claim[1]},
                }
                for s in sorted(q.segments.values(), key=lambda s: s.first_seq)
                if state in ("all", s.state)
            ]
        return web.json_response(
            {"queue": name, "group": 1, "leader": self.leader, "segments": segs}
        )

    def _segment(self, request: web.Request) -> FakeSegment | web.Response:
        q = self.queues.get(request.match_info["name"])
        if q is None:
            return self._error(404, "queue_not_found")
        seg = q.segments.get(int(request.match_info["first"]))
        if seg is None:
            return self._error(404, "segment_not_found")
        if seg.state != "released":
            return self._error(409, "segment_not_released")
        return seg

    async def _records(self, request: web.Request) -> web.StreamResponse:
        nid = request.app[NID]
        key = (request.match_info["name"], int(request.match_info["first"]))
        faults = self.faults[nid]
        with self.lock:
            seg = self._segment(request)
            if isinstance(seg, web.Response):
                return seg
            lines = seg.lines()
            checksum = seg.checksum
        crc = 0
        for line in lines:
            crc = zlib.crc32(line, crc)
        if key in faults.short:
            lines = lines[:-1]
            crc = 0
            for line in lines:
                crc = zlib.crc32(line, crc)
        if key in faults.bad_crc:
            lines = [lines[0].replace(b'"body_b64":"', b'"body_b64":"AAAA'), *lines[1:]]
        if key in faults.bad_checksum:
            checksum = f"{(int(checksum, 16) ^ 1):08x}"
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        cut = len(lines) // 2 if key in faults.torn else None
        for i, line in enumerate(lines):
            if cut is not None and i == cut:
                assert request.transport is not None
                request.transport.abort()
                return resp
            await resp.write(line)
        trailer = {
            "end": True,
            "count": len(lines),
            "stream_crc": f"{crc:08x}",
            "checksum": checksum,
        }
        await resp.write(orjson.dumps(trailer) + b"\n")
        await resp.write_eof()
        self.served.append((nid, key[0], key[1]))
        return resp

    async def _claim(self, request: web.Request) -> web.Response:
        body = await request.json()
        batch, ttl = body.get("batch_id"), body.get("ttl_ms")
        if not isinstance(batch, str) or not BATCH_ID.match(batch) or not isinstance(ttl, int):
            return self._error(400, "invalid_parameter")
        now = int(time.time() * 1000)
        claimed, refused = [], []
        with self.lock:
            q = self.queues.get(request.match_info["name"])
            if q is None:
                return self._error(404, "queue_not_found")
            for first in body["segments"]:
                seg = q.segments.get(first)
                if seg is None:
                    refused.append({"first_seq": first, "batch_id": None, "reason": "not_found"})
                elif seg.state != "released":
                    refused.append({"first_seq": first, "batch_id": None, "reason": "not_released"})
                elif seg.claim is None or seg.claim[1] <= now or seg.claim[0] == batch:
                    seg.claim = (batch, now + ttl)
                    claimed.append(first)
                else:
                    refused.append(
                        {"first_seq": first, "batch_id": seg.claim[0], "reason": "claimed"}
                    )
        return web.json_response({"claimed": claimed, "refused": refused})

    async def _archived(self, request: web.Request) -> web.Response:
        body = await request.json()
        batch = body.get("batch_id")
        if not isinstance(batch, str) or not BATCH_ID.match(batch):
            return self._error(400, "invalid_parameter")
        now = int(time.time() * 1000)
        archived, already, refused = [], [], []
        with self.lock:
            name = request.match_info["name"]
            q = self.queues.get(name)
            if q is None:
                return self._error(404, "queue_not_found")
            self.mark_calls.append((name, batch, list(body["segments"])))
            for first in body["segments"]:
                seg = q.segments.get(first)
                if seg is None:
                    already.append(first)
                elif seg.state != "released":
                    refused.append({"first_seq": first, "batch_id": None, "reason": "not_released"})
                elif seg.claim is not None and seg.claim[0] != batch and seg.claim[1] > now:
                    refused.append(
                        {"first_seq": first, "batch_id": seg.claim[0], "reason": "claimed"}
                    )
                else:
                    del q.segments[first]
                    archived.append(first)
        return web.json_response({"archived": archived, "already": already, "refused": refused})


def _refused(first: int, batch: str | None, reason: str) -> dict[str, Any]:
    return {"first_seq": first, "batch_id": batch, "reason": reason}


def iter_expected(records: list[dict[str, Any]]) -> Iterator[tuple[str, int, bytes, str]]:
    for r in records:
        yield r["queue"], r["seq"], base64.b64decode(r["body_b64"]), r["outcome"]
