"""Command encoding: round trips for every command, and malformed input rejected."""

from __future__ import annotations

import contextlib
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cmq.errors import InvalidParameter
from cmq.fsm.commands import (
    Ack,
    ChangeVisibility,
    Command,
    CreateQueue,
    DeadLetter,
    DeleteQueue,
    Expire,
    Lease,
    Nack,
    NewMessage,
    Produce,
    Purge,
    SetAttributes,
    decode_command,
    encode_command,
)
from cmq.fsm.store import record_tail
from cmq.model import QueueAttributes
from tests.cmq.fsm.harness import legacy_produce

i64 = st.integers(-(2**63), 2**63 - 1)
u32 = st.integers(0, 2**32 - 1)
text = st.text(max_size=20)
attrs = st.builds(
    QueueAttributes,
    visibility_timeout=i64,
    delay_seconds=i64,
    dead_letter_queue=st.none() | text,
    max_receive_count=i64,
    archive=st.booleans(),
    fifo=st.booleans(),
    content_based_deduplication=st.booleans(),
)
new_message = st.builds(
    NewMessage,
    id=text,
    body=st.binary(max_size=50),
    binary=st.booleans(),
    attributes=st.lists(st.tuples(text, text), max_size=3).map(tuple),
    delay_ms=st.none() | i64,
    dedup_id=st.none() | text,
    group_id=st.none() | text,
)
pairs = st.lists(st.tuples(i64, i64), max_size=4).map(tuple)
commands: st.SearchStrategy[Command] = st.one_of(
    st.builds(CreateQueue, text, attrs, i64),
    st.builds(DeleteQueue, text),
    st.builds(SetAttributes, text, attrs),
    st.builds(Purge, text, i64),
    st.builds(Produce, text, i64, st.lists(new_message, max_size=4).map(tuple)),
    st.builds(Lease, text, i64, u32, st.none() | i64, st.none() | text),
    st.builds(Ack, text, i64, pairs),
    st.builds(
        ChangeVisibility, text, i64, st.lists(st.tuples(i64, i64, i64), max_size=4).map(tuple)
    ),
    st.builds(Nack, text, i64, pairs, i64),
    st.builds(DeadLetter, text, st.lists(i64, max_size=4).map(tuple)),
    st.builds(Expire, text, i64),
)


@settings(max_examples=300)
@given(commands)
def test_round_trip(cmd: Command) -> None:
    data = encode_command(cmd)
    assert decode_command(data) == cmd
    assert data[0] >= 1


@settings(max_examples=200)
@given(commands, st.data())
def test_truncated_or_extended_input_is_rejected(cmd: Command, data: st.DataObject) -> None:
    raw = encode_command(cmd)
    cut = data.draw(st.integers(0, len(raw) - 1))
    # Cut exactly before the optional FIFO trailer, it is the command without it (the form
    # written before FIFO fields existed); any other cut is refused.
    plain = _without_fifo_fields(cmd)
    if plain != cmd and raw[:cut] == encode_command(plain):
        assert decode_command(raw[:cut]) == plain
    else:
        with pytest.raises(InvalidParameter):
            decode_command(raw[:cut])
    with pytest.raises(InvalidParameter):
        decode_command(raw + b"\0")


def _without_fifo_fields(cmd: Command) -> Command:
    if isinstance(cmd, Produce):
        return replace(cmd, messages=tuple(replace(m, group_id=None) for m in cmd.messages))
    if isinstance(cmd, Lease):
        return replace(cmd, attempt_id=None)
    return cmd


@given(st.binary(max_size=64))
def test_garbage_never_crashes_differently(raw: bytes) -> None:
    with contextlib.suppress(InvalidParameter):
        decode_command(raw)


def test_unknown_type_and_huge_counts() -> None:
    with pytest.raises(InvalidParameter, match="unknown command type"):
        decode_command(b"\xff")
    # A forged count is rejected before looping over it.
    with pytest.raises(InvalidParameter, match="count"):
        decode_command(b"\x0a" + b"\x01\0\0\0q" + b"\xff\xff\xff\xff")
    with pytest.raises(InvalidParameter, match="UTF-8"):
        decode_command(b"\x02" + b"\x01\0\0\0\xff")


@settings(max_examples=200)
@given(st.builds(Produce, text, i64, st.lists(new_message, max_size=4).map(tuple)))
def test_a_produce_carries_each_message_as_its_record_tail(cmd: Produce) -> None:
    decoded = decode_command(encode_command(cmd))
    assert isinstance(decoded, Produce) and decoded.tails is not None
    assert decoded.tails == tuple(
        record_tail(m.id, m.binary, m.attributes, m.body) for m in cmd.messages
    )
    # A log written before PRODUCE_RECORDS still decodes, to the same command (no tails).
    legacy = decode_command(legacy_produce(cmd))
    assert legacy == cmd and isinstance(legacy, Produce) and legacy.tails is None


def test_a_malformed_record_tail_is_refused() -> None:
    good = encode_command(Produce("q", 1, (NewMessage("m", b"body", False, (), None, None),)))
    head = 1 + 4 + 1 + 8 + 4  # type, queue, now, count
    tail_at = head + 4
    assert decode_command(good) is not None
    size = int.from_bytes(good[head:tail_at], "little")
    # A tail with a level (flag 0x02 and its byte): the command carries the level as an option.
    leveled = (size + 1).to_bytes(4, "little") + b"\x02\x03" + good[tail_at + 1 :]
    cases = {
        "unknown record flags": good[:tail_at] + b"\x04" + good[tail_at + 1 :],
        "carries a priority level": good[:head] + leveled,
        "unknown message options": good[:-1] + b"\x20",
        "overruns": good[: tail_at + 1] + b"\xff\0\0\0" + good[tail_at + 5 :],
        "truncated": good[:-1],
    }
    for match, raw in cases.items():
        with pytest.raises(InvalidParameter, match=match):
            decode_command(raw)
