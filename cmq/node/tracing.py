"""Server spans for sends, leases and acks, through the OpenTelemetry API, exported by OTLP.

Off by default, and then nothing here runs: the node's `QueueService` is served as it is (no
wrapper, no span objects, OpenTelemetry not even imported). With ``--otlp-endpoint`` (or
``CMQ_OTLP_ENDPOINT``) `otlp_provider` builds an SDK tracer provider with a batching OTLP/HTTP
exporter (the ``otel-export`` extra), and `traced` wraps the service so that every surface
(native HTTP, the stream, SQS, front-end workers) is covered in one place:

* ``send <queue>`` covers the whole send (`send` or `send_each`), commit on a majority included;
  it is a child of the first message's trace context (`cmq.tracecontext.traceparent_of`: its
  ``traceparent``, else its SQS ``AWSTraceHeader``) and links to the other messages' contexts;
* ``receive <queue>`` covers the receive (long-poll wait and lease commit) and links to the
  context of each message leased; a receive that leases nothing (an empty long poll, a stream
  subscription's idle wait) and does not fail makes no span;
* ``ack <queue>`` (and ``nack``) covers the commit and links to the context of each message
  whose receipt this node handed out (a bounded memory, `MAX_REMEMBERED` receipts).

Spans are SERVER spans with the messaging attributes of the OpenTelemetry semantic
conventions (``messaging.system`` ``cmq``, ``messaging.destination.name``,
``messaging.operation.type``, ``messaging.batch.message_count``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from cmq.model import EntryResult, OutgoingMessage, ReceivedMessage, SendRefused, SentMessage
from cmq.service import SERVICE_METHODS, QueueService
from cmq.tracecontext import AWS_TRACE, TRACEPARENT, TRACESTATE, traceparent_of

A = TypeVar("A", SentMessage, SentMessage | SendRefused)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Link, SpanContext, Tracer

MAX_REMEMBERED = 10_000
"""Receipts whose message context this node keeps for the ack's span links (oldest dropped)."""
MAX_LINKS = 32
"""Most links one span carries."""
ENV_ENDPOINT = "CMQ_OTLP_ENDPOINT"
TRACER_NAME = "cmq.server"
_TRACE_KEYS = frozenset((TRACEPARENT, TRACESTATE, AWS_TRACE))


def otlp_provider(endpoint: str, node_id: int) -> TracerProvider:
    """An SDK tracer provider exporting in batches to the OTLP/HTTP collector at ``endpoint``
    (``http://host:4318``; ``/v1/traces`` is added to a URL without a path), resource
    ``service.name=cmq``, ``service.instance.id=<node_id>``. `RuntimeError` naming the extra
    when the SDK or the exporter is not installed."""
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as e:
        raise RuntimeError(
            f"--otlp-endpoint needs the OpenTelemetry SDK and OTLP exporter: "
            f"pip install 'cmq[otel-export]' ({e})"
        ) from e
    url = endpoint.rstrip("/")
    if url.count("/") <= 2:  # scheme://host[:port] only
        url += "/v1/traces"
    resource = Resource.create({"service.name": "cmq", "service.instance.id": str(node_id)})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
    return provider


def traced(service: QueueService, tracer: Tracer) -> QueueService:
    """``service`` with server spans made by ``tracer`` (see the module docstring)."""
    return TracedService(service, tracer)


class TracedService:
    """A `QueueService` whose sends, receives, acks and nacks make spans; every other method
    is the wrapped service's own."""

    def __init__(self, service: QueueService, tracer: Tracer) -> None:
        from opentelemetry import trace

        self._service = service
        self._tracer = tracer
        self._trace = trace
        self._receipts: OrderedDict[str, SpanContext] = OrderedDict()

    def __getattr__(self, name: str) -> Any:
        if name not in SERVICE_METHODS:
            raise AttributeError(name)
        return getattr(self._service, name)

    # -- the trace context of messages -----------------------------------------------------------
    def _span_context(
        self,
        attributes: Iterable[tuple[str, str]],
        seen: dict[tuple[str, ...], SpanContext | None],
    ) -> SpanContext | None:
        """The remote span context ``attributes`` carry (`traceparent_of`), or None; ``seen``
        caches it by the trace attributes' raw values within one call (a batch usually shares
        one context: it is checked and built once)."""
        key = tuple(v for k, v in attributes if k in _TRACE_KEYS)
        if not key:
            return None
        if key in seen:
            return seen[key]
        found = traceparent_of(attributes)
        sc = None
        if found is not None:
            parent, state = found
            _, trace_id, span_id, flags = parent.split("-")[:4]
            trace = self._trace
            sc = trace.SpanContext(
                trace_id=int(trace_id, 16),
                span_id=int(span_id, 16),
                is_remote=True,
                trace_flags=trace.TraceFlags(int(flags, 16)),
                trace_state=trace.TraceState.from_header([state]) if state else None,
            )
        seen[key] = sc
        return sc

    def _links(self, contexts: Iterable[SpanContext | None]) -> list[Link]:
        seen: set[tuple[int, int]] = set()
        links = []
        for sc in contexts:
            if sc is None or (sc.trace_id, sc.span_id) in seen:
                continue
            seen.add((sc.trace_id, sc.span_id))
            links.append(self._trace.Link(sc))
            if len(links) == MAX_LINKS:
                break
        return links

    def _attributes(self, queue: str, operation: str, count: int) -> dict[str, str | int]:
        return {
            "messaging.system": "cmq",
            "messaging.destination.name": queue,
            "messaging.operation.type": operation,
            "messaging.operation.name": operation,
            "messaging.batch.message_count": count,
        }

    def _remember(self, messages: Sequence[ReceivedMessage]) -> list[SpanContext | None]:
        contexts = []
        seen: dict[tuple[str, ...], SpanContext | None] = {}
        for m in messages:
            sc = self._span_context(m.attributes, seen)
            contexts.append(sc)
            if sc is not None:
                self._receipts[m.receipt] = sc
                if len(self._receipts) > MAX_REMEMBERED:
                    self._receipts.popitem(last=False)
        return contexts

    # -- the traced operations -------------------------------------------------------------------
    async def send(self, name: str, messages: list[OutgoingMessage]) -> list[SentMessage]:
        return await self._traced_send(name, messages, self._service.send)

    async def send_each(
        self, name: str, messages: list[OutgoingMessage]
    ) -> list[SentMessage | SendRefused]:
        return await self._traced_send(name, messages, self._service.send_each)

    async def _traced_send(
        self,
        name: str,
        messages: list[OutgoingMessage],
        send: Callable[[str, list[OutgoingMessage]], Awaitable[list[A]]],
    ) -> list[A]:
        seen: dict[tuple[str, ...], SpanContext | None] = {}
        contexts = [self._span_context(m.attributes, seen) for m in messages if m.attributes]
        first = next((sc for sc in contexts if sc is not None), None)
        parent = (
            None
            if first is None
            else self._trace.set_span_in_context(self._trace.NonRecordingSpan(first))
        )
        others = [sc for sc in contexts if sc is not first]
        with self._tracer.start_as_current_span(
            f"send {name}",
            context=parent,
            kind=self._trace.SpanKind.SERVER,
            links=self._links(others),
            attributes=self._attributes(name, "send", len(messages)),
        ) as span:
            answers = await send(name, messages)
            if len(answers) == 1 and isinstance(answers[0], SentMessage):
                span.set_attribute("messaging.message.id", answers[0].id)
            return answers

    async def receive(
        self,
        name: str,
        max_messages: int,
        visibility_timeout: int | None,
        wait_seconds: int | None,
        *,
        attempt_id: str | None = None,
    ) -> list[ReceivedMessage]:
        # The span's links are the leased messages' contexts, known only at the end: the span
        # is made then, with the start time taken here.
        start = time.time_ns()
        error: Exception | None = None
        received: list[ReceivedMessage] = []
        try:
            received = await self._service.receive(
                name, max_messages, visibility_timeout, wait_seconds, attempt_id=attempt_id
            )
            return received
        except Exception as e:  # a cancelled wait (the client left) is no failure: no span
            error = e
            raise
        finally:
            if received or error is not None:
                self._receive_span(name, start, received, error)

    def _receive_span(
        self,
        name: str,
        start: int,
        received: list[ReceivedMessage],
        error: Exception | None,
    ) -> None:
        """The span of a receive that leased messages or failed (an empty long poll, the
        stream's idle wait included, makes none)."""
        span = self._tracer.start_span(
            f"receive {name}",
            context=self._trace.set_span_in_context(self._trace.INVALID_SPAN),
            kind=self._trace.SpanKind.SERVER,
            links=self._links(self._remember(received)),
            attributes=self._attributes(name, "receive", len(received)),
            start_time=start,
        )
        if error is not None:
            span.record_exception(error)
            span.set_status(self._trace.StatusCode.ERROR, type(error).__name__)
        span.end()

    async def ack(self, name: str, receipts: list[str]) -> list[EntryResult]:
        with self._settle(name, "ack", receipts):
            return await self._service.ack(name, receipts)

    async def nack(self, name: str, receipts: list[str], delay_seconds: int) -> list[EntryResult]:
        with self._settle(name, "nack", receipts):
            return await self._service.nack(name, receipts, delay_seconds)

    def _settle(self, name: str, operation: str, receipts: list[str]) -> Any:
        links = self._links([self._receipts.pop(r, None) for r in receipts])
        attributes = self._attributes(name, "settle", len(receipts))
        attributes["messaging.operation.name"] = operation
        return self._tracer.start_as_current_span(
            f"{operation} {name}",
            context=self._trace.set_span_in_context(self._trace.INVALID_SPAN),
            kind=self._trace.SpanKind.SERVER,
            links=links,
            attributes=attributes,
        )
