"""Trace context for `cmq.client`, through the OpenTelemetry API when it is installed (the
``otel`` extra: ``pip install cmq[otel]``); without it every function here is a no-op and the
client works as before.

On send the client adds the current span's context to each message as the reserved
``traceparent`` / ``tracestate`` attributes (`cmq.tracecontext`), unless the message carries a
``traceparent`` of its own or has no room left for them (`with_trace`). On receive, `extract`
(or `ReceivedMessage.trace_context`) gives the producer's context, so the consumer can start
its processing span as its child, or link to it (`span_context`)::

    with tracer.start_as_current_span("process", context=tracing.extract(message)):
        ...

A message sent through SQS with an ``AWSTraceHeader`` yields that context when it has no
``traceparent``. The W3C format is used whatever propagator the application configured, as
the attribute names are W3C's.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from cmq.model import MAX_MESSAGE_ATTRIBUTES
from cmq.tracecontext import TRACEPARENT, TRACESTATE, traceparent_of

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import SpanContext


class _Otel:
    """The OpenTelemetry API functions the client uses, imported once."""

    def __init__(self) -> None:
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.trace = trace
        self.propagator = TraceContextTextMapPropagator()


@functools.cache
def _api() -> _Otel | None:
    """The OpenTelemetry API, or None when it is not installed (looked up once)."""
    try:
        return _Otel()
    except ImportError:
        return None


def current() -> dict[str, str]:
    """The current span's context as the reserved attributes (empty: no OpenTelemetry, or no
    valid current span)."""
    api = _api()
    if api is None:
        return {}
    carrier: dict[str, str] = {}
    api.propagator.inject(carrier)
    return {k: v for k, v in carrier.items() if k in (TRACEPARENT, TRACESTATE)}


def with_trace(
    attributes: Mapping[str, str] | None, trace: Mapping[str, str]
) -> Mapping[str, str] | None:
    """A message's ``attributes`` with the trace context ``trace`` (from `current`) added,
    unless it names its own ``traceparent`` or the context would take it past the
    `MAX_MESSAGE_ATTRIBUTES` a message may carry (then it goes without)."""
    if not trace or (attributes and TRACEPARENT in attributes):
        return attributes
    if not attributes:
        return trace
    if len(attributes) + len(trace) > MAX_MESSAGE_ATTRIBUTES:
        return attributes
    return {**attributes, **trace}


def _carrier(attributes: Mapping[str, str]) -> dict[str, str] | None:
    found = traceparent_of(attributes.items())
    if found is None:
        return None
    parent, state = found
    carrier = {TRACEPARENT: parent}
    if state is not None:
        carrier[TRACESTATE] = state
    return carrier


def extract(message: Any) -> Context | None:
    """The producer's context of a received message (anything with ``attributes``, a mapping
    of names to values), as an OpenTelemetry `Context` to start a span in; None without
    OpenTelemetry or without a context on the message."""
    api = _api()
    carrier = _carrier(message.attributes)
    if api is None or carrier is None:
        return None
    ctx: Context = api.propagator.extract(carrier)
    return ctx


def span_context(message: Any) -> SpanContext | None:
    """The producer's span context of a received message (for a span link), or None."""
    api = _api()
    ctx = extract(message)
    if api is None or ctx is None:
        return None
    found: SpanContext = api.trace.get_current_span(ctx).get_span_context()
    return found if found.is_valid else None
