"""The pure W3C trace context checks and the X-Ray mapping (`cmq.tracecontext`), and the send
rule that refuses a malformed reserved attribute (`cmq.model.send_refusal`)."""

from __future__ import annotations

import pytest

from cmq.errors import InvalidTraceContext
from cmq.model import OutgoingMessage, QueueAttributes, send_refusal
from cmq.redrive import Moving, copies
from cmq.tracecontext import (
    check_traceparent,
    check_tracestate,
    trace_refusal,
    traceparent_from_xray,
    traceparent_of,
    xray_of,
)

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize(
    "value",
    [
        GOOD,
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future-field",
    ],
)
def test_valid_traceparents(value: str) -> None:
    trace_id, parent_id, _ = check_traceparent(value)
    assert trace_id == "4bf92f3577b34da6a3ce929d0e0e4736" and parent_id == "00f067aa0ba902b7"


@pytest.mark.parametrize(
    "value",
    [
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        GOOD + "-extra",
        " " + GOOD,
    ],
)
def test_malformed_traceparents(value: str) -> None:
    with pytest.raises(InvalidTraceContext) as e:
        check_traceparent(value)
    assert e.value.code == "InvalidTraceContext"


def test_tracestate() -> None:
    check_tracestate("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE, tenant@vendor=x")
    check_tracestate("")
    for bad in ("novalue", "UPPER=1", "a=1,a=2", "k=" + "v" * 300, ",".join(["k=v"] * 40)):
        with pytest.raises(InvalidTraceContext):
            check_tracestate(bad)


def test_refusal_of_attributes() -> None:
    assert trace_refusal([("other", "anything")]) is None
    assert trace_refusal([("traceparent", GOOD), ("tracestate", "a=b")]) is None
    assert trace_refusal([("tracestate", "a=b")]) is not None, "tracestate needs traceparent"
    assert trace_refusal([("traceparent", "junk")]) is not None
    m = OutgoingMessage(b"x", attributes=(("traceparent", "junk"),))
    refused = send_refusal("q", m, QueueAttributes())
    assert isinstance(refused, InvalidTraceContext)


def test_xray_mapping_both_ways() -> None:
    header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
    parent = "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"
    assert traceparent_from_xray(header) == parent
    assert traceparent_from_xray("Root=1-5759e988-bd862e3fe1be46a994272793") is None
    assert traceparent_from_xray("garbage") is None
    # A message's own traceparent first, else the one its AWSTraceHeader names.
    assert traceparent_of([("AWS.cmq.trace", header)]) == (parent, None)
    assert traceparent_of([("traceparent", GOOD), ("AWS.cmq.trace", header)]) == (GOOD, None)
    assert traceparent_of([("traceparent", "junk")]) is None
    # An SQS consumer: the header verbatim, else the traceparent in X-Ray form.
    assert xray_of([("AWS.cmq.trace", "Root=anything")]) == "Root=anything"
    assert xray_of([("traceparent", parent)]) == header
    assert xray_of([("traceparent", "junk")]) is None


def test_a_copy_drops_trace_attributes_stored_before_the_check() -> None:
    old = Moving("id", b"x", False, (("traceparent", "junk"), ("k", "v")))
    kept = Moving("id2", b"x", False, (("traceparent", GOOD),))
    a, b = copies("dlq", [old, kept], "q")
    assert a.attributes == (("k", "v"),)
    assert b.attributes == (("traceparent", GOOD),)
