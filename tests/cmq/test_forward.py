"""The binary forms of forwarded produce calls and receive replies."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cmq.errors import InvalidParameter
from cmq.forward import (
    PRODUCE_CALL,
    decode_produce_call,
    decode_received,
    encode_produce_call,
    encode_received,
)
from cmq.model import ReceivedMessage

text = st.text(max_size=20)
received = st.builds(
    ReceivedMessage,
    id=text,
    seq=st.integers(0, 2**62),
    body=st.binary(max_size=300),
    binary=st.booleans(),
    receipt=text,
    receive_count=st.integers(0, 2**31),
    sent_at_ms=st.integers(0, 2**62),
    attributes=st.lists(st.tuples(text, text), max_size=3).map(tuple),
)


@given(st.lists(received, max_size=5))
def test_received_round_trip(messages: list[ReceivedMessage]) -> None:
    assert decode_received(encode_received(messages)) == messages


def test_truncated_or_padded_receive_replies_are_refused() -> None:
    data = encode_received([ReceivedMessage("i", 1, b"body", True, "r", 2, 3, (("k", "v"),))])
    for cut in range(len(data)):
        with pytest.raises(InvalidParameter):
            decode_received(data[:cut])
    with pytest.raises(InvalidParameter):
        decode_received(data + b"\0")


def test_produce_call_round_trip_and_json_calls_are_told_apart() -> None:
    payload = encode_produce_call(7, b"\x05command")
    assert payload[0] == PRODUCE_CALL and payload[0] != ord("{")
    assert decode_produce_call(payload) == (7, b"\x05command")
    for bad in (b"", payload[:5], b'{"op": "send"}'):
        with pytest.raises(InvalidParameter):
            decode_produce_call(bad)
