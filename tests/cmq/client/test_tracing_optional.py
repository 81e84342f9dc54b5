"""The client without OpenTelemetry installed: a script whose import of ``opentelemetry`` fails
sends and receives through `SyncClient` against the in-process server as before, no trace
attributes added, and the tracing helpers answer None. With it installed, a send inside a span
carries the span's context, a message's own ``traceparent`` wins, and one with its 10
attributes goes without."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap

from opentelemetry.sdk.trace import TracerProvider

from cmq.client import Client, Message, tracing

SCRIPT = textwrap.dedent(
    """
    import sys

    class Blocked:
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ImportError("opentelemetry is not installed (blocked)")
            return None

    sys.meta_path.insert(0, Blocked())
    from cmq.client import SyncClient, tracing

    with SyncClient(sys.argv[1]) as c:
        c.create_queue("no-otel")
        c.send("no-otel", ["plain"])
        [m] = c.receive("no-otel", 1, wait_seconds=5)
        assert m.body == "plain", m
        assert "traceparent" not in m.attributes, m.attributes
        assert m.trace_context() is None
        assert tracing.extract(m) is None and tracing.span_context(m) is None
        c.ack("no-otel", [m.receipt])
    assert tracing.current() == {}
    assert not any(n.startswith("opentelemetry") for n in sys.modules)
    print("ok")
    """
)


async def test_client_works_without_opentelemetry(url: str) -> None:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SCRIPT,
        url,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip() == "ok"


async def test_send_in_a_span_carries_it_and_own_traceparent_wins(url: str) -> None:
    tracer = TracerProvider().get_tracer("test")
    own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    async with Client(url) as c:
        await c.create_queue("spans")
        await c.send("spans", ["outside"])
        with tracer.start_as_current_span("produce") as span:
            assert tracing.current()["traceparent"].split("-")[2] == (
                f"{span.get_span_context().span_id:016x}"
            )
            full = Message("full", attributes={f"a{i}": "v" for i in range(10)})
            await c.send("spans", ["inside", Message("own", attributes={"traceparent": own}), full])
        got = await c.receive("spans", 4, wait_seconds=5)
    by_body = {m.body: m for m in got}
    assert "traceparent" not in by_body["outside"].attributes
    assert by_body["outside"].trace_context() is None
    assert by_body["own"].attributes["traceparent"] == own
    assert by_body["full"].attributes == {f"a{i}": "v" for i in range(10)}, "no room: no context"
    sc = tracing.span_context(by_body["inside"])
    assert sc is not None and sc.span_id == span.get_span_context().span_id
    assert sc.is_remote
