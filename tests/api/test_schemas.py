"""api.schemas on its own: arbitrary input never escapes as anything but a 4xx error."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api import schemas
from cmq.errors import CmqError, InvalidParameter
from cmq.model import OutgoingMessage, QueueAttributes

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
# Objects shaped like requests: the known field names get arbitrary values.
FIELDS = [
    "attributes",
    "messages",
    "body",
    "body_base64",
    "delay_seconds",
    "dedup_id",
    "max_messages",
    "visibility_timeout",
    "wait_seconds",
    "receipts",
    "entries",
    "receipt",
    "delay_seconds",
]
request_like = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=4)
messages_like = st.fixed_dictionaries(
    {
        "messages": st.lists(
            st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=4), max_size=3
        )
    }
)

PARSERS: list[Callable[[Any], object]] = [
    schemas.parse_create,
    schemas.parse_set_attributes,
    schemas.parse_no_fields,
    schemas.parse_send,
    schemas.parse_receive,
    schemas.parse_ack,
    schemas.parse_visibility,
    schemas.parse_nack,
]


@pytest.mark.parametrize("parse", PARSERS, ids=lambda f: f.__name__)
@settings(max_examples=80, deadline=None)
@given(body=request_like | messages_like)
def test_parsers_accept_or_raise_invalid_parameter(
    parse: Callable[[Any], object], body: Any
) -> None:
    try:
        parse(body)
    except InvalidParameter as e:
        assert e.http_status == 400
        assert e.message


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=64) | json_values.map(lambda v: json.dumps(v).encode()))
def test_parse_body_returns_an_object_or_raises_a_400(raw: bytes) -> None:
    try:
        result = schemas.parse_body(raw)
    except CmqError as e:
        assert e.http_status == 400
    else:
        assert result is None or isinstance(result, dict)


@settings(max_examples=200, deadline=None)
@given(
    body=st.binary(max_size=300) | st.text(max_size=100).map(str.encode),
    binary=st.booleans(),
)
def test_sent_body_renders_back_in_the_same_form(body: bytes, binary: bool) -> None:
    """A body parsed from a send renders, once received, in the field it was sent in."""
    import base64

    if not binary:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return
        entry = {"body": text}
    else:
        entry = {"body_base64": base64.b64encode(body).decode()}
    [message] = schemas.parse_send({"messages": [entry]})
    assert message == OutgoingMessage(body=body, binary=binary)
    from cmq.model import ReceivedMessage

    rendered = schemas.render_received(
        [ReceivedMessage("i", 1, message.body, message.binary, "r", 1, 0, ())]
    )["messages"][0]
    assert {k: rendered[k] for k in entry} == entry


def test_empty_and_whitespace_bodies_mean_absent() -> None:
    assert schemas.parse_body(b"") is None
    assert schemas.parse_body(b" \r\n\t") is None
    assert schemas.parse_create(None) == QueueAttributes()
    assert schemas.parse_receive(None) == schemas.ReceiveRequest(1, None, None)
