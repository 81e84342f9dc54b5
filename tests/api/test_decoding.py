"""api.decoding and api.models on their own: arbitrary input never escapes as anything but a 4xx
error, refusals name the offending field, and the models mirror `cmq.model`."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Annotated, Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api import message_models, models
from api.decoding import decode, explain
from api.errors import http_status
from api.routes import ROUTES
from cmq.errors import CmqError, InvalidParameter
from cmq.model import OutgoingMessage, QueueAttributes, QueueStats, ReceivedMessage

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
    "group_id",
    "attempt_id",
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

REQUEST_MODELS = sorted({r.request for r in ROUTES if r.request}, key=lambda m: m.__name__)


def _to_model(request: msgspec.Struct) -> object:
    """What the route does with a decoded request before calling the service (may refuse)."""
    to_model = getattr(request, "to_model", None)
    return to_model() if to_model else request


@pytest.mark.parametrize("model", REQUEST_MODELS, ids=lambda m: m.__name__)
@settings(max_examples=80, deadline=None)
@given(body=request_like | messages_like)
def test_requests_accept_or_raise_invalid_parameter(model: type[Any], body: Any) -> None:
    try:
        _to_model(decode(json.dumps(body).encode(), model))
    except InvalidParameter as e:
        assert http_status(e) == 400
        assert e.message
        assert "Expected `" not in e.message, "a refusal the explainer could not word"


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=64) | json_values.map(lambda v: json.dumps(v).encode()))
def test_arbitrary_bytes_decode_or_raise_a_400(raw: bytes) -> None:
    try:
        result = decode(raw, models.ReceiveRequest)
    except CmqError as e:
        assert http_status(e) == 400
    else:
        assert isinstance(result, models.ReceiveRequest)


@settings(max_examples=200, deadline=None)
@given(
    body=st.binary(max_size=300) | st.text(max_size=100).map(str.encode),
    binary=st.booleans(),
)
def test_sent_body_renders_back_in_the_same_form(body: bytes, binary: bool) -> None:
    """A body decoded from a send renders, once received, in the field it was sent in."""
    if not binary:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return
        entry = {"body": text}
    else:
        entry = {"body_base64": base64.b64encode(body).decode()}
    raw = json.dumps({"messages": [entry]}).encode()
    [message] = [m.to_model() for m in decode(raw, models.SendRequest).messages]
    assert message == OutgoingMessage(body=body, binary=binary)
    received = ReceivedMessage("i", 1, message.body, message.binary, "r", 1, 0, ())
    rendered = msgspec.to_builtins(message_models.ReceivedMessage.of(received))
    assert {k: rendered[k] for k in entry} == entry


def test_empty_and_whitespace_bodies_mean_absent() -> None:
    assert decode(b"", models.CreateQueueRequest).to_model() == QueueAttributes()
    assert decode(b" \r\n\t", models.ReceiveRequest) == models.ReceiveRequest()
    assert decode(b"", models.ReceiveRequest).max_messages == 1


@pytest.mark.parametrize(
    ("model", "body", "message"),
    [
        (models.SendRequest, {"messages": None}, "messages is required"),
        (
            models.SendRequest,
            {"messages": [{"body": "a"}, {}]},
            "messages[1] needs exactly one of body and body_base64",
        ),
        (
            models.SendRequest,
            {"messages": [{"body": "a", "delay_seconds": 604_801}]},
            "messages[0].delay_seconds must be in [0, 604800]; got 604801",
        ),
        (
            models.SendRequest,
            {"messages": [{"body": "a", "attributes": {"k": 5}}]},
            "messages[0].attributes.k must be a string, not an integer",
        ),
        (
            models.SendRequest,
            {"messages": [{"body": "a", "attributes": {"": "v"}}]},
            "messages[0].attributes names must be 1..256 characters",
        ),
        (
            models.SendRequest,
            {"messages": [{"body_base64": "abc"}]},
            "messages[0].body_base64 is not valid standard (padded) base64",
        ),
        (
            models.SendRequest,
            {"messages": [{"body": 5}]},
            "messages[0].body must be a string, not an integer; use body_base64 for binary",
        ),
        (
            models.SendRequest,
            {"messages": [{"body": "a", "x": 1}]},
            "messages[0]: unknown field 'x'",
        ),
        (models.SendRequest, {"messages": []}, "messages must have at least one entry"),
        (models.ReceiveRequest, {"max_messages": 101}, "max_messages must be at most 100; got 101"),
        (
            models.ReceiveRequest,
            {"wait_seconds": 1.5},
            "wait_seconds must be an integer, not a number with a fraction or exponent",
        ),
        (models.ReceiveRequest, {"visbility_timeout": 5}, "unknown field 'visbility_timeout'"),
        (models.AckRequest, {"receipts": ["r", ""]}, "receipts[1] must be a non-empty string"),
        (models.AckRequest, {"receipts": {}}, "receipts must be an array, not an object"),
        (
            models.VisibilityRequest,
            {"entries": [{"receipt": "r"}]},
            "entries[0].visibility_timeout is required",
        ),
        (
            models.VisibilityRequest,
            {"entries": ["r"]},
            "entries[0] must be an object, not a string",
        ),
        (models.CreateQueueRequest, {"attributes": {"colour": 1}}, "unknown attribute 'colour'"),
        (
            models.CreateQueueRequest,
            {"attributes": {"delay_seconds": 901}},
            "attribute delay_seconds must be in [0, 900]; got 901",
        ),
        (
            models.SetAttributesRequest,
            {"attributes": {}},
            "attributes must name at least one attribute to change",
        ),
        (
            models.CreateQueueRequest,
            {"attributes": {"max_receive_count": 3}},
            "max_receive_count needs dead_letter_queue",
        ),
    ],
)
def test_refusals_name_the_field(model: type[Any], body: Any, message: str) -> None:
    with pytest.raises(InvalidParameter) as caught:
        _to_model(decode(json.dumps(body).encode(), model))
    assert caught.value.message == message


class Planted(msgspec.Struct, forbid_unknown_fields=True):
    ratio: Annotated[float, msgspec.Meta(gt=0)]


def test_explainer_reports_what_it_cannot_word() -> None:
    """Planted: a rule the explainer does not know yields None (the caller then falls back to
    msgspec's message, which `test_bad_input.test_every_refusal_is_explained` would catch)."""
    assert explain({"ratio": -1.0}, Planted) is None
    with pytest.raises(InvalidParameter, match="Expected `float` > 0"):
        decode(b'{"ratio": -1.0}', Planted)


@pytest.mark.parametrize(
    ("struct", "dataclass"),
    [(models.QueueAttributes, QueueAttributes), (models.QueueStats, QueueStats)],
)
def test_models_mirror_the_queue_dataclasses(struct: type[Any], dataclass: type[Any]) -> None:
    fields = [f.name for f in dataclasses.fields(dataclass)]
    assert list(struct.__struct_fields__) == fields
    if struct is models.QueueAttributes:
        assert list(models.QueueAttributesInput.__struct_fields__) == fields
