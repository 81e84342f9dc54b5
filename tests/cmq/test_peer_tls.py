"""Mutual TLS between real ``cmq serve`` processes: a cluster with peer TLS sends and receives
(its status says ``peer_tls``); a node holding a certificate from another CA never joins its
peers (they refuse it at the TLS handshake, log it and count it) while the other two serve."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cmq.client import SyncClient
from cmq.node.peer_tls import PeerTlsFiles
from tests.cmq.cluster import CmqCluster, request, unique_queue
from tests.tlsca import TestCA

pytestmark = pytest.mark.slow


def _flags(files: PeerTlsFiles) -> list[str]:
    return ["--peer-tls-cert", files.cert, "--peer-tls-key", files.key, "--peer-tls-ca", files.ca]


def _env(files: PeerTlsFiles) -> dict[str, str]:
    return {
        "CMQ_PEER_TLS_CERT": files.cert,
        "CMQ_PEER_TLS_KEY": files.key,
        "CMQ_PEER_TLS_CA": files.ca,
    }


def _send_and_receive(url: str) -> None:
    name = unique_queue("tls")
    with SyncClient(url, timeout=10) as client:
        client.create_queue(name)
        client.send(name, ["over mutual TLS"])
        got = client.receive(name, 1, wait_seconds=5)
        assert [m.body for m in got] == ["over mutual TLS"]
        client.ack(name, [m.receipt for m in got])


def _metric(url: str, name: str, peer: str) -> float:
    with SyncClient(url, timeout=10) as client:
        text = client.metrics()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("peer") == peer:
                return float(sample.value)
    raise AssertionError(f"no {name}{{peer={peer}}}")


def test_a_cluster_with_peer_tls_sends_and_receives(tmp_path: Path) -> None:
    ca = TestCA(tmp_path / "ca")
    files = {n: ca.files(f"node{n}") for n in (1, 2, 3)}
    # Nodes 1 and 2 take the files as flags, node 3 from the environment.
    cluster = CmqCluster(
        tmp_path,
        node_args={1: _flags(files[1]), 2: _flags(files[2])},
        node_env={3: _env(files[3])},
    )
    try:
        cluster.start_all()
        _send_and_receive(cluster.http[2])
        for n in (1, 2, 3):
            status, body = request(cluster.http[n], "GET", "/v1/status")
            assert status == 200 and body["peer_tls"] is True
        for n, peer in ((1, "2"), (1, "3"), (2, "3")):
            assert _metric(cluster.http[n], "cmq_peer_connects_total", peer) >= 1
    finally:
        cluster.stop_all()


def test_a_node_with_a_certificate_from_another_ca_never_joins(tmp_path: Path) -> None:
    ca, foreign = TestCA(tmp_path / "ca"), TestCA(tmp_path / "foreign", "foreign")
    files = {n: ca.files(f"node{n}") for n in (1, 2, 3)}
    cluster = CmqCluster(tmp_path, node_args={n: _flags(f) for n, f in files.items()})
    try:
        # The cluster is founded by all three (its data groups need three nodes); node 3 then
        # restarts holding a certificate from another CA, in the same files.
        cluster.start_all()
        cluster.kill(3)
        impostor = foreign.files("node3", trust=ca)
        Path(files[3].cert).write_bytes(Path(impostor.cert).read_bytes())
        Path(files[3].key).write_bytes(Path(impostor.key).read_bytes())
        cluster.start(3)
        cluster.wait_ready(nodes=[1, 2])
        _send_and_receive(cluster.http[1])
        deadline = time.monotonic() + 25  # node 3 serves HTTP once its transport listens
        while request(cluster.http[3], "GET", "/healthz")[0] != 200:
            assert time.monotonic() < deadline, "node 3 did not start"
            time.sleep(0.1)
        # Nodes 1 and 2 dial node 3 (the smaller id dials) and refuse its certificate.
        line = "handshake with node 3 failed: TLS: SSLCertVerificationError"
        logs = {n: tmp_path / f"node{n}.log" for n in (1, 2)}
        while not all(line in log.read_text() for log in logs.values()):
            assert time.monotonic() < deadline, "node 3's certificate was never refused"
            time.sleep(0.1)
        time.sleep(2.0)  # a few more redials (every 0.5 s at most)
        assert request(cluster.http[3], "GET", "/readyz")[0] != 200
        for n, log in logs.items():
            assert _metric(cluster.http[n], "cmq_peer_connects_total", "3") == 1  # before
            attempts = _metric(cluster.http[n], "cmq_peer_handshake_failures_total", "3")
            # Each reason logged once until node 3 connects again, not on every redial.
            text = log.read_text()
            assert text.count(line) == 1 and attempts >= 4, (attempts, text)
        assert _metric(cluster.http[3], "cmq_peer_connects_total", "1") == 0
        assert request(cluster.http[3], "GET", "/readyz")[0] != 200
    finally:
        cluster.stop_all()


def test_half_a_peer_tls_configuration_does_not_start(tmp_path: Path) -> None:
    ca = TestCA(tmp_path / "ca")
    files = ca.files("node1")
    cluster = CmqCluster(
        tmp_path, n=1, node_args={1: ["--peer-tls-cert", files.cert, "--peer-tls-ca", files.ca]}
    )
    cluster.start(1)
    proc = cluster.procs.pop(1)
    assert proc.wait(30) == 1
    log = (tmp_path / "node1.log").read_text()
    assert "InvalidParameter" in log and "--peer-tls-key" in log, log
