"""W3C trace context carried as message attributes. Pure: no I/O, no OpenTelemetry.

A message's trace context travels in two reserved attributes named as the W3C headers are,
so a producer instrumented for any queue (an SQS client that sets a ``traceparent`` message
attribute, cmq's own client) and any consumer meet without configuration:

* `TRACEPARENT` (``traceparent``): ``version-trace_id-parent_id-flags`` in lowercase hex;
* `TRACESTATE` (``tracestate``): vendor entries, only next to a ``traceparent``.

A send whose message carries either with a malformed value is refused with
`cmq.errors.InvalidTraceContext` (nothing stored; `trace_refusal`). An SQS send's
``AWSTraceHeader`` system attribute is kept verbatim in ``AWS.cmq.trace`` (`AWS_TRACE`); a
consumer of another surface reads the context from it when the message has no
``traceparent`` (`traceparent_of`), and an SQS consumer of a message sent with a
``traceparent`` gets it as an ``AWSTraceHeader`` (`xray_of`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from cmq.errors import InvalidTraceContext

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
RESERVED = frozenset((TRACEPARENT, TRACESTATE))
"""Attribute names whose values must be valid W3C trace context."""
AWS_TRACE = "AWS.cmq.trace"
"""Where the SQS surface keeps a send's ``AWSTraceHeader`` (X-Ray format), verbatim."""

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
_TRACESTATE_KEY = re.compile(
    r"^([a-z0-9][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})$"
)
_TRACESTATE_VALUE = re.compile(
    r"^[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]$"
)
MAX_TRACESTATE = 512
MAX_TRACESTATE_MEMBERS = 32
_XRAY_ROOT = re.compile(r"^1-([0-9a-f]{8})-([0-9a-f]{24})$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")


def check_traceparent(value: str) -> tuple[str, str, str]:
    """The trace id, parent id and flags of a valid ``traceparent``; else `InvalidTraceContext`.
    Version ``00`` is exactly 55 characters; a later version (not ``ff``) may carry more
    fields after the fourth, which are ignored as W3C asks."""
    m = _TRACEPARENT.match(value)
    bad = m is None
    if m is not None:
        version, trace_id, parent_id, flags, rest = m.groups()
        bad = (
            version == "ff"
            or (version == "00" and rest is not None)
            or trace_id == "0" * 32
            or parent_id == "0" * 16
        )
    if bad or m is None:
        raise InvalidTraceContext(
            f"traceparent must be version-traceid-parentid-flags in lowercase hex "
            f"(00-<32 hex, not all 0>-<16 hex, not all 0>-<2 hex>); got {value[:80]!r}"
        )
    return trace_id, parent_id, flags


def check_tracestate(value: str) -> None:
    """`InvalidTraceContext` unless ``value`` is a W3C ``tracestate``: at most 32 comma-separated
    ``key=value`` members (empty members allowed), keys unique, at most 512 characters."""
    problem = None
    if len(value) > MAX_TRACESTATE:
        problem = f"at most {MAX_TRACESTATE} characters"
    else:
        members = [m.strip(" \t") for m in value.split(",")]
        members = [m for m in members if m]
        keys = [m.split("=", 1)[0] for m in members]
        if len(members) > MAX_TRACESTATE_MEMBERS:
            problem = f"at most {MAX_TRACESTATE_MEMBERS} members"
        elif len(set(keys)) != len(keys):
            problem = "each key once"
        for member in members:
            key, eq, val = member.partition("=")
            if not eq or not _TRACESTATE_KEY.match(key) or not _TRACESTATE_VALUE.match(val):
                problem = f"members are key=value (W3C); {member[:80]!r} is not"
                break
    if problem is not None:
        raise InvalidTraceContext(f"tracestate: {problem}")


def trace_refusal(attributes: Iterable[tuple[str, str]]) -> InvalidTraceContext | None:
    """Why a message with ``attributes`` may not be sent (a malformed `TRACEPARENT` or
    `TRACESTATE`, or a ``tracestate`` without a ``traceparent``), or None."""
    found = {k: v for k, v in attributes if k in RESERVED}
    if not found:
        return None
    try:
        if TRACEPARENT in found:
            check_traceparent(found[TRACEPARENT])
        if TRACESTATE in found:
            if TRACEPARENT not in found:
                raise InvalidTraceContext("tracestate needs a traceparent")
            check_tracestate(found[TRACESTATE])
    except InvalidTraceContext as e:
        return e
    return None


def traceparent_of(attributes: Iterable[tuple[str, str]]) -> tuple[str, str | None] | None:
    """The trace context a delivered message carries, as (``traceparent``, ``tracestate``):
    its own attributes when valid, else the one its ``AWSTraceHeader`` (`AWS_TRACE`) names;
    None when it has neither (or neither is valid: a message stored before the check)."""
    stored = dict(attributes)
    parent = stored.get(TRACEPARENT)
    if parent is not None and trace_refusal(stored.items()) is None:
        return parent, stored.get(TRACESTATE)
    header = stored.get(AWS_TRACE)
    if header is None:
        return None
    converted = traceparent_from_xray(header)
    return None if converted is None else (converted, None)


def traceparent_from_xray(header: str) -> str | None:
    """An X-Ray trace header (``Root=1-<8 hex>-<24 hex>;Parent=<16 hex>;Sampled=<0|1>``, fields
    in any order) as a ``traceparent``; None without a valid root and parent."""
    fields: dict[str, str] = {}
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        fields[key] = value
    root = _XRAY_ROOT.match(fields.get("Root", "").lower())
    parent = fields.get("Parent", "").lower()
    if root is None or not _HEX16.match(parent) or parent == "0" * 16:
        return None
    trace_id = root.group(1) + root.group(2)
    if trace_id == "0" * 32:
        return None
    flags = "01" if fields.get("Sampled") == "1" else "00"
    return f"00-{trace_id}-{parent}-{flags}"


def xray_of(attributes: Iterable[tuple[str, str]]) -> str | None:
    """The ``AWSTraceHeader`` an SQS consumer gets: the one the message was sent with
    (verbatim), else its ``traceparent`` in X-Ray form, else None."""
    stored = dict(attributes)
    header = stored.get(AWS_TRACE)
    if header is not None:
        return header
    parent = stored.get(TRACEPARENT)
    if parent is None:
        return None
    try:
        trace_id, parent_id, flags = check_traceparent(parent)
    except InvalidTraceContext:
        return None
    sampled = int(flags, 16) & 1
    return f"Root=1-{trace_id[:8]}-{trace_id[8:]};Parent={parent_id};Sampled={sampled}"
