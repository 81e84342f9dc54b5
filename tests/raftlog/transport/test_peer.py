"""Real TCP on loopback: authentication, one connection per pair, reconnects, bounded buffers."""

from __future__ import annotations

import asyncio

import pytest

from raftlog.transport.codec import FrameKind
from raftlog.transport.peer import Address, Transport, TransportConfig, parse_peers
from tests.raftlog.transport.peer_nodes import Node, addresses, exchange_all, running


async def test_three_nodes_exchange_frames_over_one_connection_per_pair() -> None:
    addrs = addresses(3)
    nodes = {i: Node(i, addrs) for i in addrs}
    async with running(*nodes.values()):
        await exchange_all(nodes)
        for nd in nodes.values():
            assert all(p.connects == 1 for p in nd.t.stats().values())


async def test_peer_without_the_secret_is_refused() -> None:
    addrs = addresses(2)
    good = Node(2, addrs, b"right")
    bad = Node(1, addrs, b"wrong")
    async with running(good, bad):
        bad.t.send(2, FrameKind.RAFT, b"intrusion")
        await asyncio.sleep(0.5)
        assert good.got == []
        assert not good.t.is_connected(1) and not bad.t.is_connected(2)
        assert bad.t.stats()[2].auth_failures + good.t.stats()[1].auth_failures >= 1


async def test_reconnects_after_the_peer_restarts() -> None:
    addrs = addresses(2)
    a, b = Node(1, addrs), Node(2, addrs)
    async with running(a):
        async with running(b):
            a.t.send(2, FrameKind.RAFT, b"one")
            await b.wait_for(1)
        b = Node(2, addrs)
        async with running(b):
            for _ in range(100):
                if a.t.is_connected(2):
                    break
                await asyncio.sleep(0.05)
            a.t.send(2, FrameKind.RAFT, b"two")
            await b.wait_for(1)
            assert b.got[0][2] == b"two"


async def test_full_send_buffer_refuses_instead_of_blocking() -> None:
    addrs = addresses(2)
    cfg = TransportConfig(send_buffer_frames=3)
    t = Transport(1, addrs[1], addrs, b"x", lambda *_: None, cfg=cfg)
    await t.start()  # peer 2 never comes up: frames pile up
    try:
        assert [t.send(2, FrameKind.RAFT, b"m") for _ in range(5)] == [True] * 3 + [False] * 2
        assert t.stats()[2].dropped_full == 2
        assert not t.send(99, FrameKind.RAFT, b"unknown peer")
    finally:
        await t.close()


def test_address_parsing() -> None:
    assert Address.parse("127.0.0.1:9000") == Address("127.0.0.1", 9000)
    with pytest.raises(ValueError):
        Address.parse("nope")


@pytest.mark.parametrize("bad", ["", "1", "1=", "x=h:1", "1=h", "1=h:1,2"])
def test_peer_list_parsing(bad: str) -> None:
    assert parse_peers("1=127.0.0.1:9000, 2=[::1]:9001") == {
        1: Address("127.0.0.1", 9000),
        2: Address("::1", 9001),
    }
    with pytest.raises(ValueError):
        parse_peers(bad)


async def test_large_frames_travel_in_chunks_between_other_traffic() -> None:
    addrs = addresses(2)
    cfg = TransportConfig(chunk_bytes=64 << 10)
    a, b = Node(1, addrs, cfg=cfg), Node(2, addrs, cfg=cfg)
    async with running(a, b):
        big = bytes(range(256)) * 8000  # ~2 MB: 32 chunks
        assert a.t.send(2, FrameKind.RAFT, big)
        assert a.t.send(2, FrameKind.BEATS, b"small")
        await b.wait_for(2)
        kinds = [k for _, k, _ in b.got]
        assert sorted(kinds) == [FrameKind.RAFT, FrameKind.BEATS]
        assert kinds[0] is FrameKind.BEATS  # not stuck behind the big frame
        assert next(body for _, k, body in b.got if k is FrameKind.RAFT) == big


async def test_writer_survives_a_transport_closed_under_it() -> None:
    addrs = addresses(2)
    a, b = Node(1, addrs), Node(2, addrs)
    async with running(a, b):
        a.t.send(2, FrameKind.RAFT, b"before")
        await b.wait_for(1)
        writer = a.t.peers[2].writer
        assert writer is not None

        def closed(*_: object) -> None:
            raise RuntimeError("unable to perform operation: the handler is closed")

        writer.writelines = closed  # type: ignore[method-assign]
        a.t.send(2, FrameKind.RAFT, b"lost with the connection")
        for _ in range(100):
            if a.t.peers[2].writer not in (None, writer):
                break
            await asyncio.sleep(0.05)
        assert a.t.peers[2].writer not in (None, writer), "no reconnect after the failure"
        a.t.send(2, FrameKind.RAFT, b"after")
        await b.wait_for(2)
        assert b.got[-1][2] == b"after"


async def test_close_ends_a_dialer_whose_cancellation_a_finishing_handshake_swallowed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Python 3.11's ``asyncio.wait_for`` returns (or raises) the result of an inner call that
    finished in the same loop turn as the caller's cancellation, and the cancellation is lost.
    Here the handshake fails just as `close` cancels the dialer: the dialer must still end (it
    used to redial forever, and `close` waited for it forever)."""
    from raftlog.transport import peer as peer_module

    addrs = addresses(2)
    one, two = Node(1, addrs), Node(2, addrs)
    failing = asyncio.Event()
    entered = asyncio.Event()

    async def handshake(self: Transport, *args: object) -> None:
        entered.set()
        await failing.wait()
        raise peer_module.AuthError("refused just now")

    monkeypatch.setattr(Transport, "_client_handshake", handshake)
    await two.t.start()
    await one.t.start()
    try:
        await asyncio.wait_for(entered.wait(), 5)
        failing.set()  # the handshake's failure and the cancellation land in one loop turn
        await asyncio.wait_for(one.t.close(), 5)
    finally:
        await two.t.close()
