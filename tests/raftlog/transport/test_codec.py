"""Peer frame codec: exact round trips, and garbage is refused (never half-parsed)."""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.core import ConfState, Entry, EntryKind, Message, MsgType, Snapshot, SnapshotMeta
from raftlog.transport.codec import (
    Beat,
    BeatAck,
    CodecError,
    FrameKind,
    decode_beat_acks,
    decode_beats,
    decode_call,
    decode_messages,
    encode_beat_acks,
    encode_beats,
    encode_call,
    encode_messages,
    frame,
    parse_header,
)

u64 = st.integers(min_value=0, max_value=2**63)
ids = st.integers(min_value=1, max_value=2**40)
entries = st.lists(
    st.builds(Entry, u64, u64, st.sampled_from(EntryKind), st.binary(max_size=64)), max_size=5
)
snapshots = st.none() | st.builds(
    Snapshot,
    st.builds(
        SnapshotMeta,
        u64,
        u64,
        st.builds(
            ConfState,
            st.lists(ids, max_size=5).map(tuple),
            st.lists(ids, max_size=3).map(tuple),
        ),
    ),
    st.binary(max_size=128),
)
messages = st.builds(
    Message,
    st.sampled_from(MsgType),
    to=ids,
    frm=ids,
    term=u64,
    log_term=u64,
    index=u64,
    entries=entries.map(tuple),
    commit=u64,
    reject=st.booleans(),
    reject_hint=u64,
    snapshot=snapshots,
    transfer=st.booleans(),
)


@settings(max_examples=200)
@given(st.lists(st.tuples(u64, messages), max_size=4))
def test_messages_round_trip(batch: list[tuple[int, Message]]) -> None:
    assert decode_messages(encode_messages(batch)) == batch


@settings(max_examples=200)
@given(st.lists(st.tuples(u64, messages), min_size=1, max_size=3), st.data())
def test_truncated_or_extended_bodies_are_refused(
    batch: list[tuple[int, Message]], data: st.DataObject
) -> None:
    body = encode_messages(batch)
    cut = data.draw(st.integers(min_value=0, max_value=len(body) - 1))
    with pytest.raises(CodecError):
        decode_messages(body[:cut])
    with pytest.raises(CodecError):
        decode_messages(body + b"\x00")


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_random_bytes_never_crash_the_decoder(body: bytes) -> None:
    with contextlib.suppress(CodecError):
        decode_messages(body)


def test_unknown_message_type_is_refused() -> None:
    body = bytearray(encode_messages([(1, Message(MsgType.APP, to=2, frm=1, term=1))]))
    body[4 + 8] = 99  # the type byte of the first message
    with pytest.raises(CodecError):
        decode_messages(bytes(body))


def test_beats_and_acks_round_trip() -> None:
    beats = [Beat(1, 5, 10), Beat(7, 2, 0)]
    assert decode_beats(encode_beats(beats)) == beats
    acks = [BeatAck(1, 5)]
    assert decode_beat_acks(encode_beat_acks(acks)) == acks
    with pytest.raises(CodecError):
        decode_beats(encode_beats(beats)[:-1])
    with pytest.raises(CodecError):
        decode_beats(b"\xff\xff\xff\xff")


def test_frame_header_limits() -> None:
    f = frame(FrameKind.RAFT, b"abc")
    assert parse_header(f[:5], 100) == (FrameKind.RAFT, 3)
    with pytest.raises(CodecError):
        parse_header(f[:5], 3)
    with pytest.raises(CodecError):
        parse_header(b"\x00\x00\x00\x02\x63", 100)


def test_calls_round_trip() -> None:
    assert decode_call(encode_call(42, True, b"payload")) == (42, True, b"payload")


def test_chunk_reassembly_checks_order_length_and_crc() -> None:
    from raftlog.transport.codec import decode_chunk, encode_chunk, split_chunks
    from raftlog.transport.resume import Reassembly

    body = bytes(range(256)) * 40
    chunks = split_chunks(7, FrameKind.RAFT, body, 1000)
    assert len(chunks) == 11
    r = Reassembly(1 << 20)
    out = [r.add(decode_chunk(encode_chunk(c))) for c in chunks]
    assert out[:-1] == [None] * 10 and out[-1] == (FrameKind.RAFT, body)
    # Out of order: refused.
    r = Reassembly(1 << 20)
    r.add(chunks[0])
    with pytest.raises(CodecError):
        r.add(chunks[2])
    # A damaged piece fails the CRC of the whole.
    r = Reassembly(1 << 20)
    bad = [*chunks[:-1], dataclasses.replace(chunks[-1], data=b"x" * 240)]
    with pytest.raises(CodecError):
        for c in bad:
            r.add(c)
    # Oversized announcements are refused before anything is buffered.
    with pytest.raises(CodecError):
        Reassembly(100).add(chunks[0])
    # A transfer whose start was lost (reconnect) is ignored, then a new one works.
    r = Reassembly(1 << 20)
    assert r.add(chunks[3]) is None
    assert [r.add(c) for c in chunks][-1] == (FrameKind.RAFT, body)
