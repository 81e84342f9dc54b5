"""A test double of a cmq cluster's archive read side (the HTTP contract of docs/api.md,
"Archive"): N "replicas" on loopback, each an aiohttp application in one background thread,
sharing one set of synthetic queues and segments. For the reader's and the job's unit tests
only; the end-to-end test runs real nodes.

Each segment is also real stored bytes (`cmq.fsm.store` records) served in the binary form
(`cmq.fsm.segdata`, what a node writes) to a reader asking for it with ``Accept``; ``binary =
False`` makes every replica answer the JSON lines instead, as a node of an older release does
(``json_only`` per replica).

Faults per replica: ``down`` (connection refused: the application is not served),
``torn`` (the records stream stops halfway, without a trailer), ``bad_checksum`` (the trailer's
checksum differs from the listing: the replica read other bytes), ``bad_crc`` (a body altered
in flight: ``stream_crc`` no longer matches), ``short`` (one record missing, trailer consistent
with what was sent: the count differs from the listing), ``flipped`` (binary form: one stored
byte of a body corrupted on the replica's disk, sent by a node that does not notice: the
stream's own CRC matches, only the stored checksum catches it).

The queues, segments and records it serves are `tests.archive.fake_data`'s (importable from
here too).

`require_signed` makes every replica verify each request's signature as a node does
(`api.auth.sigv4`): 401 for an unsigned or badly signed one; `signed` counts the good ones.
"""

from __future__ import annotations

import asyncio
import contextlib
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

from cmq.fsm import segdata
from tests.archive.fake_data import (
    OUTCOMES,
    FakeQueue,
    FakeSegment,
    iter_expected,
    make_records,
)
from tests.ports import free_ports

__all__ = [
    "OUTCOMES",
    "FakeCluster",
    "FakeQueue",
    "FakeSegment",
    "Faults",
    "iter_expected",
    "make_records",
]

NID = web.AppKey("nid", int)
BATCH_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@dataclass
class Faults:
    down: bool = False
    torn: set[tuple[str, int]] = field(default_factory=set)
    bad_checksum: set[tuple[str, int]] = field(default_factory=set)
    bad_crc: set[tuple[str, int]] = field(default_factory=set)
    short: set[tuple[str, int]] = field(default_factory=set)
    flipped: set[tuple[str, int]] = field(default_factory=set)
    json_only: bool = False


class FakeCluster:
    """``nodes`` replicas (ids 1..n) of every queue; ``leader`` is reported by the listing."""

    def __init__(self, nodes: int = 3, leader: int = 1) -> None:
        self.lock = threading.Lock()
        self.queues: dict[str, FakeQueue] = {}
        self.faults = {nid: Faults() for nid in range(1, nodes + 1)}
        self.leader = leader
        self.binary = True
        """Serve the binary form to a reader asking for it (False: JSON lines only)."""
        self.delay = 0.0
        """Seconds each records read waits before answering (to see reads overlap)."""
        self.inflight = 0
        self.max_inflight = 0
        """Records reads being answered at once, and the most seen."""
        self.forms: list[str] = []
        """The form of each records read answered (``binary`` or ``json``)."""
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
                    "bytes": len(s.stored()),
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
        self.inflight += 1
        self.max_inflight = max(self.max_inflight, self.inflight)
        try:
            await asyncio.sleep(self.delay)
            return await self._answer_records(request)
        finally:
            self.inflight -= 1

    async def _answer_records(self, request: web.Request) -> web.StreamResponse:
        nid = request.app[NID]
        key = (request.match_info["name"], int(request.match_info["first"]))
        faults = self.faults[nid]
        with self.lock:
            seg = self._segment(request)
            if isinstance(seg, web.Response):
                return seg
            if (
                self.binary
                and not faults.json_only
                and segdata.MEDIA_TYPE in request.headers.get("Accept", "")
            ):
                data = seg.stored()
                self.forms.append("binary")
                return await self._binary(request, nid, key, seg, data)
            self.forms.append("json")
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

    async def _binary(
        self,
        request: web.Request,
        nid: int,
        key: tuple[str, int],
        seg: FakeSegment,
        data: bytes,
    ) -> web.StreamResponse:
        faults = self.faults[nid]
        machine = seg.machine_segment(data)
        records = seg.records
        if key in faults.short:  # the last record missing, consistently
            records = records[:-1]
            data = FakeSegment(seg.first_seq, seg.last_seq - 1, records).stored()
            machine = FakeSegment(seg.first_seq, seg.last_seq - 1, records).machine_segment(data)
        if key in faults.flipped:  # a stored byte damaged; this node does not notice
            at = len(data) - 1  # the last record's body (or its id/attributes if empty)
            data = data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1 :]
            machine.crc = zlib.crc32(data)  # what the stream then computes
        chunks = list(segdata.stream(_Bytes(data), "fake", machine, 4096))
        if key in faults.flipped:  # the header still names the listing's checksum
            chunks[0] = _with_checksum(chunks[0], int(seg.checksum, 16))
            chunks[-1] = _recrc(chunks)
        if key in faults.bad_checksum:  # the replica read other bytes than the listing's
            chunks[0] = _with_checksum(chunks[0], int(seg.checksum, 16) ^ 1)
            chunks[-1] = _recrc(chunks)
        if key in faults.bad_crc:  # a byte of the first frame altered in flight
            first = bytearray(chunks[1])
            first[40] ^= 0x01
            chunks[1] = bytes(first)
        resp = web.StreamResponse(headers={"Content-Type": segdata.MEDIA_TYPE})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for i, chunk in enumerate(chunks):
            if key in faults.torn and i == len(chunks) // 2:
                assert request.transport is not None
                request.transport.abort()
                return resp
            try:
                await resp.write(chunk)
            except ConnectionError:  # the reader refused the stream early and left
                return resp
        self.served.append((nid, key[0], key[1]))  # before the end: the reader may be done
        with contextlib.suppress(ConnectionError):  # a reader that refused the stream left
            await resp.write_eof()
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


class _Bytes:
    """A `SegmentStore` holding one segment's bytes (all `segdata.stream` reads)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def scan(self, queue: str, segment: int, size: int, chunk: int) -> Iterator[bytes]:
        for at in range(0, min(size, len(self.data)), chunk):
            yield self.data[at : min(at + chunk, size)]


def _with_checksum(head: bytes, checksum: int) -> bytes:
    """The stream's first piece with its header's checksum replaced."""
    magic, version, first, count, size, _ = segdata.HEAD.unpack_from(head)
    fixed = segdata.HEAD.pack(magic, version, first, count, size, checksum)
    return fixed + head[segdata.HEAD.size :]


def _recrc(chunks: list[bytes]) -> bytes:
    """The last piece with the stream CRC recomputed (the header and tables, each frame's
    length, the end and the offsets: `segdata.stream`'s pieces)."""
    crc = zlib.crc32(chunks[0])
    for frame in chunks[1:-1]:
        crc = zlib.crc32(frame[:4], crc)
    crc = zlib.crc32(chunks[-1][:-4], crc)
    return chunks[-1][:-4] + crc.to_bytes(4, "little")
