"""The typed forwarded calls (`cmq.routing.rpc`): every call and reply round-trips through its
codec, and garbage is refused with a clean `InvalidParameter` (never another exception)."""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cmq.errors import (
    CmqError,
    InvalidParameter,
    OutcomeUnknown,
    Overloaded,
    QueueNotFound,
    ReceiptInvalid,
    Unavailable,
)
from cmq.failure import Failure
from cmq.model import QueueAttributes, QueueStats, ReceivedMessage, SentMessage
from cmq.routing.rpc import (
    RETRY,
    AckCall,
    AnyCall,
    AssignQueueCall,
    CatalogCall,
    ChangeVisibilityCall,
    ClaimSegmentsCall,
    CreateQueueCall,
    DeleteQueueCall,
    ExportCall,
    GetQueueCall,
    MarkArchivedCall,
    NackCall,
    PeekCall,
    ProduceCall,
    PurgeCall,
    QueueMetaCall,
    ReceiveCall,
    RegisterNodeCall,
    ReleaseCall,
    ReleaseInfo,
    RemoveQueueCall,
    RewindCall,
    SetAttributesCall,
    decode_call,
    decode_error,
    encode_failure,
    leader_hint,
)
from cmq.segment_values import ArchiveResult, ClaimResult, Refused

text = st.text(max_size=20)
group = st.integers(0, 2**32 - 1)
count = st.integers(0, 2**31)
optional_seconds = st.none() | st.integers(0, 2**40)
received = st.builds(
    ReceivedMessage,
    id=text,
    seq=st.integers(0, 2**62),
    body=st.binary(max_size=300),
    binary=st.booleans(),
    receipt=text,
    receive_count=count,
    sent_at_ms=st.integers(0, 2**62),
    attributes=st.lists(st.tuples(text, text), max_size=3).map(tuple),
)
attributes = st.builds(
    QueueAttributes,
    visibility_timeout=st.integers(0, 43200),
    dead_letter_queue=st.none() | st.just("dlq"),
    max_receive_count=st.integers(0, 10),
)
receipts = st.lists(text, max_size=4).map(tuple)
calls: st.SearchStrategy[AnyCall] = st.one_of(
    st.builds(ProduceCall, group, st.binary(min_size=1, max_size=50), st.booleans()),
    st.builds(ReceiveCall, group, text, count, optional_seconds, optional_seconds),
    st.builds(AckCall, group, text, receipts),
    st.builds(
        ChangeVisibilityCall,
        group,
        text,
        st.lists(st.tuples(text, st.integers(0, 43200)), max_size=4).map(tuple),
    ),
    st.builds(NackCall, group, text, receipts, st.integers(0, 900)),
    st.builds(CreateQueueCall, group, text, attributes),
    st.builds(DeleteQueueCall, group, text),
    st.builds(GetQueueCall, group, text),
    st.builds(PeekCall, group, text, count),
    st.builds(ExportCall, group, text, count, count, count),
    st.builds(
        SetAttributesCall,
        group,
        text,
        st.dictionaries(text, st.integers(-(2**63), 2**63 - 1) | text | st.none(), max_size=3).map(
            lambda d: tuple(d.items())
        ),
    ),
    st.builds(PurgeCall, group, text),
    st.builds(RewindCall, group, text, st.integers(-(2**63), 2**63 - 1)),
    st.builds(AssignQueueCall, group, text),
    st.builds(RemoveQueueCall, group, text),
    st.builds(RegisterNodeCall, group, count, text, st.lists(text, max_size=3).map(tuple)),
    st.builds(ReleaseCall, group),
    st.builds(
        QueueMetaCall,
        group,
        text,
        st.lists(st.tuples(text, text), max_size=3).map(tuple),
        st.lists(text, max_size=3).map(tuple),
    ),
)


@given(calls)
def test_every_call_round_trips(call: AnyCall) -> None:
    assert decode_call(call.encode()) == call


def test_every_call_type_has_its_own_tag() -> None:
    calls = _one_of_each()
    assert len({type(c) for c in calls}) == len(calls) == len(AnyCall.__args__)
    assert len({c.encode()[1] for c in calls}) == len(calls)  # first array item: the tag


def _one_of_each() -> list[AnyCall]:
    return [
        ProduceCall(1, b"\x05command"),
        ReceiveCall(1, "q", 10, None, 20),
        AckCall(1, "q", ("r1", "r2")),
        ChangeVisibilityCall(1, "q", (("r1", 30),)),
        NackCall(1, "q", ("r1",), 5),
        CreateQueueCall(1, "q", QueueAttributes(visibility_timeout=7)),
        DeleteQueueCall(1, "q"),
        GetQueueCall(1, "q"),
        PeekCall(1, "q", 10),
        ExportCall(1, "q", 5, 90, 1000),
        SetAttributesCall(1, "q", (("visibility_timeout", 9),)),
        PurgeCall(1, "q"),
        RewindCall(1, "q", 1_700_000_000_000),
        AssignQueueCall(0, "q"),
        RemoveQueueCall(0, "q"),
        RegisterNodeCall(0, 2, "127.0.0.1:9080", ("/data/a",)),
        QueueMetaCall(0, "q", (("tag.k", "v"),), ("sqs.old",)),
        CatalogCall(0, b'{"op": "drain", "name": "2"}'),
        ClaimSegmentsCall(1, "q", "b-1", (1, 11), 60_000),
        MarkArchivedCall(1, "q", "b-1", (1, 11)),
        ReleaseCall(0),
    ]


@pytest.mark.parametrize("call", _one_of_each(), ids=lambda c: type(c).__name__)
def test_truncated_padded_or_garbled_calls_are_refused_cleanly(call: AnyCall) -> None:
    data = call.encode()
    for cut in range(len(data)):
        with pytest.raises(InvalidParameter):
            decode_call(data[:cut])
    with pytest.raises(InvalidParameter):
        decode_call(data + b"\0")
    with pytest.raises(InvalidParameter):
        decode_call(data[:1] + b"\x7f" + data[2:])  # unknown tag
    with pytest.raises(InvalidParameter):
        decode_call(data[:2] + b"\xa1x" + data[3:])  # a string where the group goes


@given(st.binary(max_size=64))
def test_random_bytes_decode_or_fail_with_invalid_parameter(data: bytes) -> None:
    with contextlib.suppress(InvalidParameter):
        decode_call(data)


def test_produce_calls_carry_the_command_bytes_as_they_are() -> None:
    call = ProduceCall(7, b"\x05command", dedup_only=True)
    payload = call.encode()
    assert b"\x05command" in payload and len(payload) < len(b"\x05command") + 8
    assert decode_call(payload) == call
    assert call.retry_unknown() and not ProduceCall(7, b"x").retry_unknown()
    assert ReceiveCall(1, "q", 1, None, None).retry_unknown()


REPLIES: list[tuple[AnyCall, Any]] = [
    (ProduceCall(1, b"c"), [SentMessage("id1", 1), SentMessage("id2", 2**40)]),
    (ProduceCall(1, b"c"), []),
    (ReceiveCall(1, "q", 1, None, None), [ReceivedMessage("i", 1, b"b", True, "r", 2, 3, ())]),
    (AckCall(1, "q", ("a", "b")), (None, "LeaseStale")),
    (ChangeVisibilityCall(1, "q", ()), ()),
    (NackCall(1, "q", ("a",), 0), ("MessageNotInflight",)),
    (CreateQueueCall(1, "q", QueueAttributes()), True),
    (CreateQueueCall(1, "q", QueueAttributes()), False),
    (DeleteQueueCall(1, "q"), None),
    (GetQueueCall(1, "q"), (QueueAttributes(delay_seconds=3), QueueStats(1, 2, 3, 4, 5, 6, 7, 8))),
    (SetAttributesCall(1, "q", ()), QueueAttributes(visibility_timeout=1)),
    (PurgeCall(1, "q"), 12),
    (RewindCall(1, "q", 0), 7),
    (AssignQueueCall(0, "q"), 3),
    (RemoveQueueCall(0, "q"), None),
    (RegisterNodeCall(0, 1, "a:1", ()), None),
    (QueueMetaCall(0, "q"), {"tag.k": "v"}),
    (QueueMetaCall(0, "q", (("a", "b"),)), None),
    (
        ClaimSegmentsCall(1, "q", "b", (1, 7), 10),
        ClaimResult((1,), (Refused(7, "claimed", "other"), Refused(9, "not_found"))),
    ),
    (MarkArchivedCall(1, "q", "b", (1,)), ArchiveResult((1,), (3,), (Refused(7, "claimed", "x"),))),
    (ReleaseCall(0), ReleaseInfo("0.2.0", 1, 1)),
]


@pytest.mark.parametrize(("call", "result"), REPLIES, ids=lambda x: type(x).__name__)
def test_replies_round_trip_and_refuse_garbage(call: AnyCall, result: Any) -> None:
    reply = call.encode_reply(result)
    assert call.decode_reply(reply) == result
    with pytest.raises(InvalidParameter):
        call.decode_reply(reply + b"\0")
    for cut in range(len(reply)):
        with pytest.raises(InvalidParameter):
            call.decode_reply(reply[:cut])


@given(st.lists(received, max_size=5))
def test_received_round_trip(messages: list[ReceivedMessage]) -> None:
    call = ReceiveCall(1, "q", 10, None, None)
    assert call.decode_reply(call.encode_reply(messages)) == messages


def test_replies_of_the_wrong_shape_are_refused() -> None:
    receive = ReceiveCall(1, "q", 10, None, None)
    with pytest.raises(InvalidParameter):
        receive.decode_reply(AckCall(1, "q", ()).encode_reply((None,)))
    with pytest.raises(InvalidParameter):
        GetQueueCall(1, "q").decode_reply(PurgeCall(1, "q").encode_reply(3))


@pytest.mark.parametrize("packed", [False, True], ids=["json", "packed"])
def test_error_table(packed: bool) -> None:
    for cls in (QueueNotFound, OutcomeUnknown, ReceiptInvalid, InvalidParameter):
        err = decode_error(encode_failure(Failure(cls.code, "why"), packed=packed))
        assert type(err) is cls and err.message == "why"
    unknown_code = decode_error(encode_failure(Failure("SomethingNew", "m"), packed=packed))
    assert type(unknown_code) is CmqError and unknown_code.message == "m"
    assert decode_error(encode_failure(Failure(RETRY, "moved"), packed=packed)) is None
    garbage = decode_error(b"\xff not json")
    assert isinstance(garbage, Unavailable)
    assert isinstance(decode_error(b"[1, 2]"), Unavailable)
    assert isinstance(decode_error(b"{not json"), Unavailable)
    assert isinstance(decode_error(b"no call handler on this node"), Unavailable)


def test_a_retry_names_the_leader_this_node_knows_in_the_layout_older_releases_read() -> None:
    payload = encode_failure(Failure(RETRY, "not the leader", None, 3), packed=False)
    assert payload == b'{"error":"Retry","message":"not the leader","leader":3}'
    assert leader_hint(payload) == 3 and decode_error(payload) is None
    no_leader = encode_failure(Failure(RETRY, "no leader"), packed=False)
    assert no_leader == b'{"error":"Retry","message":"no leader","leader":0}'
    assert leader_hint(no_leader) == 0
    gone = encode_failure(Failure("QueueNotFound", "gone", 2.0, 3), packed=False)
    assert gone == b'{"error":"QueueNotFound","message":"gone"}'  # as releases before wrote it
    assert leader_hint(gone) == 0
    assert leader_hint(b"\xff not json") == 0 and leader_hint(b"[3]") == 0


def test_the_packed_failure_is_the_front_end_form_and_carries_retry_after() -> None:
    """Flag ``peer_failures``: the answer is `cmq.failure.Failure` as the front-end socket
    writes it, so a leader's retry_after survives the hop (the JSON form drops it)."""
    busy = Overloaded("the queue's leader is busy")
    busy.retry_after = 1.5
    payload = encode_failure(Failure.of(busy), packed=True)
    assert payload == msgspec.msgpack.encode(["Overloaded", "the queue's leader is busy", 1.5, 0])
    err = decode_error(payload)
    assert type(err) is Overloaded and err.retry_after == 1.5
    legacy = decode_error(encode_failure(Failure.of(busy), packed=False))
    assert type(legacy) is Overloaded and legacy.retry_after == Overloaded.retry_after == 1.0
    moved = encode_failure(Failure(RETRY, "not the leader", None, 3), packed=True)
    assert leader_hint(moved) == 3 and decode_error(moved) is None
