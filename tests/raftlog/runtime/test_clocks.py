"""`raftlog.runtime.clocks.judge` (pure) and the clock-probe codec."""

from __future__ import annotations

import pytest

from raftlog.runtime.clocks import ClockReading, judge
from raftlog.runtime.host import SYSTEM_CLOCK
from raftlog.runtime.peerwatch import PeerWatch
from raftlog.transport.codec import (
    PROBE_CALL_BIT,
    CodecError,
    FrameKind,
    decode_call,
    decode_clock_ping,
    decode_clock_pong,
    encode_clock_ping,
    encode_clock_pong,
    is_clock_probe,
)

HOUR = 3_600_000.0
HOUR_MS = 3_600_000


def r(peer: int, offset: float, rtt: float = 2.0, at: float = 100.0) -> ClockReading:
    return ClockReading(peer, offset, rtt, at)


def test_the_node_off_the_majority_is_unsafe_and_the_others_name_it() -> None:
    # Node 1 an hour ahead: its peers read an hour behind it.
    v1 = judge([r(2, -HOUR), r(3, -HOUR + 3)], now=100.0, bound_ms=500)
    assert v1.unsafe and v1.offset_ms == pytest.approx(HOUR, abs=5) and v1.off_peers == ()
    # Node 2 sees node 1 an hour ahead, node 3 in step: it is fine and names node 1.
    v2 = judge([r(1, HOUR), r(3, 2.0)], now=100.0, bound_ms=500)
    assert not v2.unsafe and v2.off_peers == (1,) and abs(v2.offset_ms) < 5


def test_two_nodes_that_disagree_never_accuse_each_other() -> None:
    a = judge([r(2, -HOUR)], now=100.0, bound_ms=500)
    b = judge([r(1, HOUR)], now=100.0, bound_ms=500)
    assert not a.unsafe and not b.unsafe
    assert a.off_peers == (2,) and b.off_peers == (1,)


def test_within_the_bound_is_safe_and_stale_or_slow_readings_are_ignored() -> None:
    assert not judge([r(2, -400), r(3, -450)], now=100.0, bound_ms=500).unsafe
    assert judge([r(2, -600), r(3, -650)], now=100.0, bound_ms=500).unsafe
    stale = judge([r(2, -HOUR, at=90.0), r(3, -HOUR, at=90.0)], now=100.0, bound_ms=500)
    assert not stale.unsafe and stale.peers == 0
    slow = judge([r(2, -HOUR, rtt=900), r(3, -HOUR, rtt=900)], now=100.0, bound_ms=500)
    assert not slow.unsafe and slow.peers == 0


def test_five_nodes_median() -> None:
    # Two of five peers off the same way do not move the median.
    v = judge([r(2, 0), r(3, 1), r(4, HOUR), r(5, HOUR)], now=100.0, bound_ms=500)
    assert not v.unsafe and v.off_peers == (4, 5)


def test_probe_codec_round_trips_and_refuses_garbage() -> None:
    assert decode_clock_ping(encode_clock_ping(42)) == 42
    assert decode_clock_pong(encode_clock_pong(7, -5)) == (7, -5)
    with pytest.raises(CodecError):
        decode_clock_pong(b"\x00" * 3)
    with pytest.raises(CodecError):
        decode_clock_ping(encode_clock_ping(1) + b"x")


def test_peer_watch_reads_a_pong_and_ignores_an_older_probes_answer() -> None:
    sent: list[tuple[int, FrameKind, bytes]] = []

    def send(peer: int, kind: FrameKind, body: bytes) -> bool:
        sent.append((peer, kind, body))
        return peer != 9  # node 9 is unreachable: no probe outstanding

    def answer(body: bytes) -> bytes:  # what the other node's runtime does with a probe call
        rid, _, payload = decode_call(body)
        assert rid & PROBE_CALL_BIT and is_clock_probe(payload)
        rrid, is_error, reply = decode_call(theirs.pong(rid, payload))
        assert rrid == rid and not is_error
        return reply

    mine = PeerWatch(SYSTEM_CLOCK)
    mine.wall_clock = lambda: 1_000_000
    theirs = PeerWatch(SYSTEM_CLOCK)
    theirs.wall_clock = lambda: 1_000_000 + HOUR_MS
    mine.probe(send, [2, 9])
    assert [(p, k) for p, k, _ in sent] == [(2, FrameKind.CALL), (9, FrameKind.CALL)]
    first = sent[0][2]
    mine.probe(send, [2])  # a newer probe: the first one's late answer no longer counts
    mine.on_pong(2, answer(first))
    assert mine.readings() == ()
    mine.on_pong(2, answer(sent[-1][2]))
    (reading,) = mine.readings()
    assert reading.peer == 2 and abs(reading.offset_ms - HOUR_MS) < 100
    mine.heard(2)
    assert mine.silent_for(2) < 1.0
    mine.forget(2)
    assert mine.readings() == ()
