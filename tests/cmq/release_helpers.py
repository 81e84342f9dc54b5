"""Shared by the release and feature-flag tests: a node that answers as a release without the
release call (0.1.0), and the native HTTP app of an in-process node on a free port."""

from __future__ import annotations

import functools
import operator
import typing
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from aiohttp import web
from prometheus_client import CollectorRegistry

from api.app import make_app
from cmq.cli.launch import free_ports
from cmq.failure import Failure
from cmq.node.metrics import register_node_metrics
from cmq.node.queue_node import QueueNode
from cmq.routing import rpc
from cmq.routing.rpc import ReleaseCall, encode_failure
from raftlog.runtime.config import RemoteCallError

_OLD_CALLS = [c for c in typing.get_args(rpc.AnyCall) if c is not ReleaseCall]
_old_decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(
    functools.reduce(operator.or_, _OLD_CALLS)
)
"""The calls a 0.1.0 node decodes: every call but `ReleaseCall`."""


def old_node_answer(payload: bytes) -> bytes:
    """What a node without the release call (0.1.0) answers: its router's reply to a call it
    cannot decode."""
    try:
        _old_decoder.decode(payload)
    except msgspec.DecodeError as e:
        error = encode_failure(
            Failure("InvalidParameter", f"malformed forwarded call: {e}"), packed=False
        )
        raise RemoteCallError(error) from None
    raise AssertionError("an old node decoded a call it does not know")


async def serve_app(node: QueueNode) -> tuple[str, Callable[[], Awaitable[None]]]:
    registry = CollectorRegistry()
    register_node_metrics(registry, node.raft)
    runner = web.AppRunner(make_app(node, registry=registry))
    await runner.setup()
    (port,) = free_ports(1)
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return f"http://127.0.0.1:{port}", runner.cleanup
