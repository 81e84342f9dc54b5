"""Resumable chunked transfers: the pure sender/receiver state, and a real transfer over TCP
cut mid-way by a proxy that resumes instead of starting over."""

from __future__ import annotations

import asyncio
import contextlib
import os

import pytest

from raftlog.transport.codec import CodecError, FrameKind, split_chunks
from raftlog.transport.peer import Address, Transport, TransportConfig
from raftlog.transport.resume import (
    BulkQueue,
    ChunkState,
    FrameKey,
    Reassembly,
    decode_state,
    encode_state,
)
from tests.ports import free_ports


def test_chunk_state_round_trips_and_refuses_bad_lengths() -> None:
    s = ChunkState(True, FrameKey(4, 1000, 77), 2, (FrameKey(1, 5, 9), FrameKey(3, 30, 1)))
    assert decode_state(encode_state(s)) == s
    empty = ChunkState(False, None, 0, ())
    assert decode_state(encode_state(empty)) == empty
    with pytest.raises(CodecError):
        decode_state(encode_state(s)[:-1])
    with pytest.raises(CodecError):
        decode_state(b"\x01")


def test_a_cut_transfer_resumes_at_the_first_missing_piece() -> None:
    body = os.urandom(10_000)
    chunks = split_chunks(1, FrameKind.RAFT, body, 1000)
    q, r = BulkQueue(4), Reassembly(1 << 20)
    assert q.add(chunks)
    assert q.add(split_chunks(2, FrameKind.RAFT, body, 1000))  # the same body: not queued again
    assert len(q) == 1
    assert q.next_chunk() is None  # nothing before the receiver's state
    q.on_state(r.state(connect=True))
    sent = []
    for _ in range(4):
        c = q.next_chunk()
        assert c is not None
        sent.append(c.index)
        assert r.add(c) is None
    q.next_chunk()  # piece 4 is lost with the connection
    q.disconnected()
    assert not q.pending() and q.next_chunk() is None
    q.on_state(r.state(connect=True))  # the receiver kept pieces 0..3
    assert q.resumes == 1
    whole = None
    while (c := q.next_chunk()) is not None:
        sent.append(c.index)
        whole = r.add(c)
    assert sent == list(range(10)) and whole == (FrameKind.RAFT, body)
    assert len(q) == 1  # kept until the receiver confirms
    q.on_state(r.state(connect=False))
    assert len(q) == 0


def test_a_receiver_that_lost_its_pieces_gets_the_whole_frame_again() -> None:
    body = os.urandom(5000)
    q = BulkQueue(4)
    q.add(split_chunks(1, FrameKind.RAFT, body, 1000))
    q.on_state(ChunkState(True, None, 0, ()))
    for _ in range(3):
        q.next_chunk()
    q.disconnected()
    fresh = Reassembly(1 << 20)  # e.g. the receiver restarted
    q.on_state(fresh.state(connect=True))
    got = [c.index for c in iter(q.next_chunk, None)]
    assert got == [0, 1, 2, 3, 4]


def test_the_frame_held_in_part_resumes_before_others() -> None:
    a, b = os.urandom(3000), os.urandom(3000)
    q, r = BulkQueue(4), Reassembly(1 << 20)
    q.add(split_chunks(1, FrameKind.RAFT, a, 1000))
    q.add(split_chunks(2, FrameKind.RAFT, b, 1000))
    q.on_state(r.state(connect=True))
    for _ in range(2):
        c = q.next_chunk()
        assert c is not None
        r.add(c)
    q.disconnected()
    q.on_state(r.state(connect=True))
    out = [r.add(c) for c in iter(q.next_chunk, None)]
    assert [o for o in out if o is not None] == [(FrameKind.RAFT, a), (FrameKind.RAFT, b)]


class CuttingProxy:
    """Forwards ``listen`` → ``target`` at about ``rate`` bytes/s; the first connection is cut
    (both sides closed) once ``cut_at`` bytes went towards the target."""

    def __init__(self, target: int, rate: float, cut_at: int) -> None:
        self.target, self.rate, self.cut_at = target, rate, cut_at
        self.port = free_ports(1)[0]
        self.connections = 0
        self.forwarded = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        self.connections += 1
        cut = self.cut_at if self.connections == 1 else None
        ur, uw = await asyncio.open_connection("127.0.0.1", self.target)
        up = asyncio.current_task()
        assert up is not None
        self._tasks.add(up)
        back = asyncio.get_running_loop().create_task(self._pump(ur, cw, None, None))
        self._tasks.add(back)
        try:
            await self._pump(cr, uw, cut, self.rate)
        finally:
            back.cancel()
            for w in (cw, uw):
                w.close()
            self._tasks.discard(back)
            self._tasks.discard(up)

    async def _pump(
        self,
        r: asyncio.StreamReader,
        w: asyncio.StreamWriter,
        cut: int | None,
        rate: float | None,
    ) -> None:
        sent = 0
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await r.read(64 << 10):
                if cut is not None and sent + len(data) > cut:
                    return  # the link drops mid-transfer
                w.write(data)
                await w.drain()
                sent += len(data)
                if rate is not None:
                    self.forwarded += len(data)
                    await asyncio.sleep(len(data) / rate)


async def test_a_transfer_cut_mid_way_resumes_and_ships_under_one_and_a_half_times() -> None:
    size = 24 << 20
    body = os.urandom(size)
    p1, p2 = free_ports(2)
    real = {1: Address("127.0.0.1", p1), 2: Address("127.0.0.1", p2)}
    proxy = CuttingProxy(p2, rate=60e6, cut_at=size // 2)
    await proxy.start()
    got: list[bytes] = []
    arrived = asyncio.Event()

    def on_frame(peer: int, kind: FrameKind, frame: bytes) -> None:
        if kind is FrameKind.RAFT:
            got.append(frame)
            arrived.set()

    cfg = TransportConfig(chunk_bytes=256 << 10)
    # Node 1 (the smaller id dials) reaches node 2 through the proxy.
    a = Transport(
        1, real[1], {1: real[1], 2: Address("127.0.0.1", proxy.port)}, b"k", on_frame, cfg=cfg
    )
    b = Transport(2, real[2], real, b"k", on_frame, cfg=cfg)
    await a.start()
    await b.start()
    try:
        assert a.send(2, FrameKind.RAFT, body)
        await asyncio.wait_for(arrived.wait(), 30)
        assert got == [body]
        assert proxy.connections >= 2  # it was cut and resumed on a new connection
        assert a.peers[2].bulk.resumes >= 1
        shipped = a.stats()[2].bytes_sent
        print(f"shipped {shipped / size:.3f}x the frame")
        assert size <= shipped < 1.5 * size, shipped / size
        # The receiver's confirmation empties the sender's queue.
        for _ in range(100):
            if len(a.peers[2].bulk) == 0:
                break
            await asyncio.sleep(0.02)
        assert len(a.peers[2].bulk) == 0
        await asyncio.sleep(0.2)
        assert got == [body]  # delivered once
    finally:
        await a.close()
        await b.close()
        await proxy.close()


async def test_frames_for_a_peer_gone_too_long_are_dropped() -> None:
    size = 8 << 20
    p1, p2 = free_ports(2)
    real = {1: Address("127.0.0.1", p1), 2: Address("127.0.0.1", p2)}
    proxy = CuttingProxy(p2, rate=4e6, cut_at=1 << 40)  # slow: the transfer is under way
    await proxy.start()
    cfg = TransportConfig(chunk_bytes=256 << 10, resume_seconds=0.3)
    via = {1: real[1], 2: Address("127.0.0.1", proxy.port)}
    a = Transport(1, real[1], via, b"k", lambda *_: None, cfg=cfg)
    b = Transport(2, real[2], real, b"k", lambda *_: None, cfg=cfg)
    await a.start()
    await b.start()
    try:
        assert a.send(2, FrameKind.RAFT, os.urandom(size))
        for _ in range(100):
            if a.is_connected(2):
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        await b.close()
        await proxy.close()  # node 2 is gone
        assert len(a.peers[2].bulk) == 1
        for _ in range(100):
            if len(a.peers[2].bulk) == 0:
                break
            await asyncio.sleep(0.02)
        assert len(a.peers[2].bulk) == 0
    finally:
        await a.close()
        await b.close()
        await proxy.close()
