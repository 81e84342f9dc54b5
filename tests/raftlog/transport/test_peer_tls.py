"""Mutual TLS between peers, on loopback, with a throwaway CA (`tests.tlsca`) and the contexts
cmq builds (`cmq.node.peer_tls`): TLS peers exchange frames and replicate; a peer whose certificate
another CA signed, a peer without a certificate, and a plain-TCP peer are refused at the
handshake (the cluster secret is right every time: TLS alone refuses them), nothing they send
reaches the other side, the refusal is logged once and counted by the dialing node (the one
that sees TLS failures: `raftlog.transport.peer`), and no task is left behind.

Every scenario runs on asyncio's default event loop and on the loop node processes use
(`raftlog.runtime.new_event_loop`: uvloop where installed)."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

from cmq.node.peer_tls import PeerTlsFiles
from raftlog.runtime import MultiRaft, RuntimeConfig, new_event_loop
from raftlog.runtime.applog import AppendLog
from raftlog.transport.codec import FrameKind
from raftlog.transport.peer import Address, Transport, TransportConfig
from tests.ports import free_ports
from tests.raftlog.runtime.nodes import wait_applied, wait_leader
from tests.raftlog.transport.peer_nodes import Node, addresses, exchange_all, running
from tests.tlsca import TestCA

SECRET = b"the-same-secret-everywhere"

LOOPS = pytest.mark.parametrize(
    "loop_factory", [asyncio.new_event_loop, new_event_loop], ids=["asyncio", "node-loop"]
)


def run(
    loop_factory: Callable[[], asyncio.AbstractEventLoop], coro: Coroutine[Any, Any, Any]
) -> Any:
    loop = loop_factory()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


@pytest.fixture
def cas(tmp_path: Path) -> tuple[TestCA, TestCA]:
    """The cluster's CA and a foreign one."""
    return TestCA(tmp_path / "cluster", "cluster"), TestCA(tmp_path / "foreign", "foreign")


def tls(files: PeerTlsFiles, **kw: Any) -> TransportConfig:
    server, client = files.contexts()
    return TransportConfig(server_ssl=server, client_ssl=client, backoff_max=0.1, **kw)


def without_client_certificate(ca: TestCA) -> TransportConfig:
    """Verifies servers against the cluster CA but has no certificate to show."""
    client = ssl.create_default_context(cafile=str(ca.ca_file))
    client.check_hostname = False
    server, _ = ca.files("x").contexts()
    return TransportConfig(server_ssl=server, client_ssl=client, backoff_max=0.1)


def other_tasks() -> set[asyncio.Task[Any]]:
    return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]


@LOOPS
def test_tls_peers_exchange_frames_over_mutually_authenticated_connections(
    loop_factory: Callable[[], asyncio.AbstractEventLoop], cas: tuple[TestCA, TestCA]
) -> None:
    ca, _ = cas

    async def scenario() -> None:
        addrs = addresses(3)
        nodes = {i: Node(i, addrs, SECRET, tls(ca.files(f"node{i}"))) for i in addrs}
        async with running(*nodes.values()):
            assert all(nd.t.tls for nd in nodes.values())
            await exchange_all(nodes)
            for nd in nodes.values():
                for peer in nd.t.peers.values():
                    assert peer.writer is not None
                    tls_object = peer.writer.get_extra_info("ssl_object")
                    assert tls_object.version() in ("TLSv1.2", "TLSv1.3")
                    # Both ends saw a verified certificate: the dialer's too (mutual).
                    subject = dict(x[0] for x in tls_object.getpeercert()["subject"])
                    assert subject["commonName"] == f"node{peer.id}"
                assert nd.t.refused == 0
                assert all(s.handshake_failures == 0 for s in nd.t.stats().values())
        assert not other_tasks()

    run(loop_factory, scenario())


def _bad_dialer(kind: str, ca: TestCA, foreign: TestCA) -> tuple[TransportConfig, TransportConfig]:
    """(node 1's config, node 2's config): node 1 (the dialer) or node 2 misconfigured."""
    good = tls(ca.files("good"))
    if kind == "client-cert-from-another-ca":
        return tls(foreign.files("intruder", trust=ca)), good
    if kind == "no-client-cert":
        return without_client_certificate(ca), good
    if kind == "plain-client":
        return TransportConfig(backoff_max=0.1), good
    if kind == "server-cert-from-another-ca":
        return good, tls(foreign.files("impostor", trust=ca))
    assert kind == "plain-server"
    return good, TransportConfig(backoff_max=0.1)


@LOOPS
@pytest.mark.parametrize(
    "kind",
    [
        "client-cert-from-another-ca",
        "no-client-cert",
        "plain-client",
        "server-cert-from-another-ca",
        "plain-server",
    ],
)
def test_a_peer_failing_tls_is_refused_logged_once_and_counted(
    kind: str,
    loop_factory: Callable[[], asyncio.AbstractEventLoop],
    cas: tuple[TestCA, TestCA],
    caplog: pytest.LogCaptureFixture,
) -> None:
    ca, foreign = cas
    cfg1, cfg2 = _bad_dialer(kind, ca, foreign)

    async def scenario() -> None:
        addrs = addresses(2)
        one, two = Node(1, addrs, SECRET, cfg1), Node(2, addrs, SECRET, cfg2)
        async with running(two, one):
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 1.5
            most_tasks = 0
            while loop.time() < deadline:  # node 1 redials every 0.1 s at most
                one.t.send(2, FrameKind.RAFT, b"from 1")
                two.t.send(1, FrameKind.RAFT, b"from 2")
                most_tasks = max(most_tasks, len(other_tasks()))
                await asyncio.sleep(0.05)
            assert one.got == [] and two.got == []
            assert not one.t.is_connected(2) and not two.t.is_connected(1)
            # Node 1 (the dialer) saw its handshake fail every time; a plain node 2 refused
            # every connection at the secret handshake (it reads no hello).
            assert one.t.stats()[2].handshake_failures >= 6
            assert two.t.refused >= (6 if kind == "plain-server" else 0)
            assert one.t.stats()[2].connects == two.t.stats()[1].connects == 0
            # Writers, the dialer, the attempt under way (wait_for wraps it in a task) and a
            # refusal on the other side: none pile up (six leaked would be nine).
            assert most_tasks <= 8
        assert not other_tasks()

    with caplog.at_level(logging.WARNING, logger="raftlog.transport"):
        run(loop_factory, scenario())
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    failed = [m for m in warnings if m.startswith("handshake with node 2 failed")]
    refused = [m for m in warnings if m.startswith("refused a peer connection")]
    # Logged when the reason changes, not on every redial (a redial can race the other side's
    # close and end in a different error once: at most two reasons).
    assert 1 <= len(failed) <= 2, warnings
    assert len(refused) == (1 if kind == "plain-server" else 0), warnings
    if kind == "plain-client":
        assert "IncompleteReadError" in failed[0], warnings  # no TLS spoken by node 1
    elif kind in ("client-cert-from-another-ca", "no-client-cert"):
        # TLS 1.3: node 2 refuses node 1's certificate after node 1's side of the handshake.
        assert "did it refuse this node's certificate" in failed[0], warnings
    else:
        assert failed[0].startswith("handshake with node 2 failed: TLS"), warnings


def test_half_a_tls_configuration_is_refused(cas: tuple[TestCA, TestCA]) -> None:
    server, _ = cas[0].files("n").contexts()
    addrs = addresses(1)
    with pytest.raises(ValueError, match="both"):
        Transport(
            1, addrs[1], addrs, SECRET, lambda *_: None, cfg=TransportConfig(server_ssl=server)
        )


@LOOPS
def test_multiraft_groups_replicate_over_tls(
    loop_factory: Callable[[], asyncio.AbstractEventLoop],
    cas: tuple[TestCA, TestCA],
    tmp_path: Path,
) -> None:
    ca, _ = cas

    async def scenario() -> None:
        ports = free_ports(3)
        peers = {i + 1: Address("127.0.0.1", p) for i, p in enumerate(ports)}
        nodes = {}
        for nid, addr in peers.items():
            d = tmp_path / f"n{nid}"
            d.mkdir()
            nodes[nid] = MultiRaft(
                RuntimeConfig(
                    node_id=nid,
                    listen=addr,
                    peers=peers,
                    secret=SECRET,
                    data_dirs=(str(d),),
                    tick_interval=0.02,
                    seed=nid,
                    transport=tls(ca.files(f"node{nid}")),
                )
            )
        try:
            for nd in nodes.values():
                await nd.start()
                await nd.open_group(1, AppendLog(), voters=list(nodes))
            leader = await wait_leader(nodes, 1)
            cmds = [b"c%d" % k for k in range(50)]
            await asyncio.gather(*(nodes[leader].propose(1, c, timeout=10) for c in cmds))
            await wait_applied(nodes, 1, len(cmds))
            for nd in nodes.values():
                assert nd.transport.tls
                stats = nd.stats()
                assert stats.refused_connections == 0
                assert all(p.connects >= 1 and p.handshake_failures == 0 for p in stats.peers)
        finally:
            for nd in nodes.values():
                await nd.close()

    run(loop_factory, scenario())
