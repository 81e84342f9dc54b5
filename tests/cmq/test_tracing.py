"""Trace context end to end on an in-process three-node cluster (twin network and disks), each
node's service traced (`cmq.node.tracing`) into one in-memory exporter: a producer's span, the
server's send span (the commit) and a consumer's processing span on another node make one
trace; every surface (native HTTP, the stream, SQS through boto3) carries the context; a
malformed ``traceparent`` is refused with its code and nothing is stored."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode, Tracer

from api.app import make_app
from api.sqs.queues import SqsSettings
from cmq.client import Client, Message
from cmq.client.stream import StreamClient
from cmq.errors import InvalidTraceContext, QueueNotFound
from cmq.node.tracing import TRACER_NAME, otlp_provider, traced
from tests.cmq.helpers import Twins, configs, running
from tests.sqs import helpers as sqs_helpers

BAD_PARENT = "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01"


@dataclass
class Traced:
    """The cluster: its nodes' URLs by id, the spans they and the test's tracer made."""

    urls: dict[int, str]
    exporter: InMemorySpanExporter
    tracer: Tracer

    def spans(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Traced]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    cfgs = configs(tmp_path)
    async with running(cfgs, Twins(tuple(cfgs))) as nodes, contextlib.AsyncExitStack() as stack:
        urls = {}
        for nid, node in nodes.items():
            service = traced(node, provider.get_tracer(TRACER_NAME))
            server = TestServer(make_app(service, sqs=SqsSettings()))
            await server.start_server()
            stack.push_async_callback(server.close)
            urls[nid] = str(server.make_url("")).rstrip("/")
        yield Traced(urls, exporter, provider.get_tracer("test"))


def _parent(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


def _linked(span: ReadableSpan) -> set[int]:
    return {link.context.span_id for link in span.links}


async def test_one_trace_from_producer_through_commit_to_consumer_on_another_node(
    cluster: Traced,
) -> None:
    async with Client(cluster.urls[1]) as producer, Client(cluster.urls[2]) as consumer:
        await producer.create_queue("orders")
        with cluster.tracer.start_as_current_span("produce") as produce:
            await producer.send("orders", ["order 1"])
        [m] = await consumer.receive("orders", 1, wait_seconds=5)
        with cluster.tracer.start_as_current_span("process", context=m.trace_context()):
            await consumer.ack("orders", [m.receipt])

    trace_id = produce.get_span_context().trace_id
    produce_id = produce.get_span_context().span_id
    [send] = cluster.spans("send orders")
    [process] = cluster.spans("process")
    assert send.kind == SpanKind.SERVER
    assert send.context.trace_id == trace_id == process.context.trace_id
    assert _parent(send) == produce_id, "the commit is a child of the producer's span"
    assert _parent(process) == produce_id, "the processing is a child of the producer's span"
    assert send.attributes is not None
    assert send.attributes["messaging.destination.name"] == "orders"
    leases = [s for s in cluster.spans("receive orders") if produce_id in _linked(s)]
    assert len(leases) == 1, "the lease links to the message's context"
    [ack] = cluster.spans("ack orders")
    assert produce_id in _linked(ack), "the ack links to the message's context"
    assert m.attributes["traceparent"].split("-")[1] == f"{trace_id:032x}"


async def test_stream_carries_the_context(cluster: Traced) -> None:
    async with Client(cluster.urls[1]) as c:
        await c.create_queue("streamed")
    async with StreamClient(cluster.urls[1]) as producer, StreamClient(cluster.urls[2]) as consumer:
        with cluster.tracer.start_as_current_span("produce") as produce:
            await producer.send("streamed", ["one"])
        sub = await consumer.subscribe("streamed")
        async with asyncio.timeout(10):
            [m] = await sub.next()
        await sub.ack([m])
        await sub.close()
    context = m.trace_context()
    assert context is not None
    with cluster.tracer.start_as_current_span("process", context=context) as process:
        pass
    assert process.parent is not None
    assert process.parent.span_id == produce.get_span_context().span_id
    [send] = cluster.spans("send streamed")
    assert _parent(send) == produce.get_span_context().span_id


async def test_malformed_traceparent_is_refused_and_nothing_stored(cluster: Traced) -> None:
    async with Client(cluster.urls[1]) as c, StreamClient(cluster.urls[2]) as s:
        await c.create_queue("strict")
        for bad in (
            {"traceparent": BAD_PARENT},
            {"traceparent": "00-abc"},
            {"traceparent": "00-" + "A" * 32 + "-" + "b" * 16 + "-01"},
            {"tracestate": "k=v"},
        ):
            with pytest.raises(InvalidTraceContext) as refused:
                await c.send("strict", [Message("x", attributes=bad)])
            assert refused.value.code == "InvalidTraceContext"
            with pytest.raises(InvalidTraceContext):
                await s.send("strict", [Message("x", attributes=bad)])
        raw = await c.request(
            "POST",
            "/v1/queues/strict/messages",
            {"messages": [{"body": "x", "attributes": {"traceparent": BAD_PARENT}}]},
        )
        assert raw.status == 400
        assert raw.payload["error"]["code"] == "InvalidTraceContext"
        info = await c.get_queue("strict")
        assert info.stats.visible == 0 and info.stats.sent_total == 0


@pytest.fixture
def sqs(cluster: Traced, tmp_path: Path) -> Iterator[Any]:
    """A boto3 SQS client (JSON protocol) on node 1; closed after the test, so the server
    closes without waiting for its keep-alive connection."""
    client = sqs_helpers.client(cluster.urls[1], "json", tmp_path)
    yield client
    client.close()


XRAY = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


async def test_sqs_keeps_aws_trace_header_and_maps_it_for_native_consumers(
    cluster: Traced, sqs: Any
) -> None:
    url = (await asyncio.to_thread(sqs.create_queue, QueueName="sqs-traced"))["QueueUrl"]
    await asyncio.to_thread(
        sqs.send_message,
        QueueUrl=url,
        MessageBody="from sqs",
        MessageSystemAttributes={"AWSTraceHeader": {"DataType": "String", "StringValue": XRAY}},
    )
    async with Client(cluster.urls[2]) as native:
        [m] = await native.receive("sqs-traced", 1, wait_seconds=5)
        # The X-Ray header becomes the consumer's parent context.
        with cluster.tracer.start_as_current_span("process", context=m.trace_context()) as p:
            pass
        assert p.get_span_context().trace_id == 0x5759E988BD862E3FE1BE46A994272793
        assert p.parent is not None and p.parent.span_id == 0x53995C3F42CD8AD8
        [send] = cluster.spans("send sqs-traced")
        assert send.context.trace_id == p.get_span_context().trace_id
        await native.nack("sqs-traced", [m.receipt])
        # An SQS consumer gets the header verbatim...
        got = await asyncio.to_thread(
            sqs.receive_message,
            QueueUrl=url,
            MessageSystemAttributeNames=["AWSTraceHeader"],
            WaitTimeSeconds=5,
        )
        [again] = got["Messages"]
        assert again["Attributes"]["AWSTraceHeader"] == XRAY
        # ... and one of a message a native producer sent in a span, its traceparent as X-Ray.
        await native.create_queue("native-traced")
        with cluster.tracer.start_as_current_span("produce") as produce:
            await native.send("native-traced", ["from native"])
    native_url = (await asyncio.to_thread(sqs.get_queue_url, QueueName="native-traced"))["QueueUrl"]
    got = await asyncio.to_thread(
        sqs.receive_message,
        QueueUrl=native_url,
        MessageSystemAttributeNames=["AWSTraceHeader"],
        MessageAttributeNames=["All"],
        WaitTimeSeconds=5,
    )
    [msg] = got["Messages"]
    sc = produce.get_span_context()
    tid = f"{sc.trace_id:032x}"
    assert msg["Attributes"]["AWSTraceHeader"] == (
        f"Root=1-{tid[:8]}-{tid[8:]};Parent={sc.span_id:016x};Sampled=1"
    )
    assert msg["MessageAttributes"]["traceparent"]["StringValue"].startswith(f"00-{tid}-")
    # A malformed traceparent message attribute is refused with its code in the text.
    with pytest.raises(Exception) as refused:
        await asyncio.to_thread(
            sqs.send_message,
            QueueUrl=native_url,
            MessageBody="bad",
            MessageAttributes={"traceparent": {"DataType": "String", "StringValue": BAD_PARENT}},
        )
    assert sqs_helpers.code_of(refused) == "InvalidParameterValue"  # type: ignore[arg-type]
    assert "InvalidTraceContext" in str(refused.value)


async def test_otlp_provider_exports_to_the_collector() -> None:
    """`otlp_provider` (what ``--otlp-endpoint`` builds) posts OTLP/HTTP to ``/v1/traces``."""
    bodies: list[bytes] = []

    async def collect(request: web.Request) -> web.Response:
        bodies.append(await request.read())
        return web.Response(body=b"", content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", collect)
    server = TestServer(app)
    await server.start_server()
    try:
        provider = otlp_provider(str(server.make_url("")).rstrip("/"), node_id=7)
        with provider.get_tracer(TRACER_NAME).start_as_current_span("send q"):
            pass
        assert await asyncio.to_thread(provider.force_flush, 10_000)
        await asyncio.to_thread(provider.shutdown)
    finally:
        await server.close()
    assert len(bodies) == 1 and b"send q" in bodies[0] and b"cmq" in bodies[0]


async def test_empty_receives_make_no_span_and_a_failed_send_is_marked(cluster: Traced) -> None:
    async with Client(cluster.urls[3]) as c:
        await c.create_queue("quiet")
        assert await c.receive("quiet", 1, wait_seconds=0) == []
        with pytest.raises(QueueNotFound):
            await c.send("missing", ["x"])
    assert cluster.spans("receive quiet") == []
    [failed] = cluster.spans("send missing")
    assert failed.status.status_code == StatusCode.ERROR


def test_serve_takes_the_otlp_endpoint_from_the_flag_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import cmq.cli.server
    from cmq.cli.main import main

    seen: list[object] = []
    monkeypatch.setattr(
        cmq.cli.server, "run", lambda *_, **kw: seen.append(kw.get("otlp_endpoint")) or 0
    )
    monkeypatch.setenv("CMQ_SECRET", "tracing-cli-test-secret-0123456789")
    base = ["serve", "--node-id", "1", "--data-dir", str(tmp_path), "--peers", "1=127.0.0.1:1"]
    assert main([*base, "--otlp-endpoint", "http://collector:4318"]) == 0
    monkeypatch.setenv("CMQ_OTLP_ENDPOINT", "http://env-collector:4318")
    assert main(base) == 0
    monkeypatch.delenv("CMQ_OTLP_ENDPOINT")
    assert main(base) == 0
    assert seen == ["http://collector:4318", "http://env-collector:4318", None]
