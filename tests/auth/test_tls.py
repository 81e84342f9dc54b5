"""HTTPS: a real node serving ``--tls-cert``/``--tls-key`` made by a throwaway CA (made here),
reached by the client and the CLI with ``--ca-file`` / ``CMQ_CA_FILE``; a client that does not
trust the CA, or plain HTTP, is refused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cmq.client import SyncClient
from cmq.errors import CmqError
from tests.cmq.cluster import CmqCluster, unique_queue
from tests.tlsca import TestCA


def make_ca_and_cert(root: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) files for 127.0.0.1."""
    ca = TestCA(root, "https")
    cert_file, key_file = ca.issue("127.0.0.1")
    return ca.ca_file, cert_file, key_file


def test_https_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca_file, cert_file, key_file = make_ca_and_cert(tmp_path)
    (tmp_path / "cluster").mkdir()
    cluster = CmqCluster(tmp_path / "cluster", n=1, groups=1)
    cluster.configure(1, tls_cert=str(cert_file), tls_key=str(key_file))
    https = cluster.http[1]
    assert https.startswith("https://")
    monkeypatch.setenv("CMQ_CA_FILE", str(ca_file))  # the harness's own readiness checks
    try:
        cluster.start_all()
        queue = unique_queue("tls")
        with SyncClient(https, ca_file=str(ca_file)) as client:
            client.create_queue(queue)
            client.send_one(queue, "over tls")
            assert client.get_queue(queue).stats.visible == 1
        monkeypatch.delenv("CMQ_CA_FILE")
        with SyncClient(https, timeout=5) as untrusting, pytest.raises(CmqError):
            untrusting.list_queues()
        plain_url = https.replace("https://", "http://")
        with SyncClient(plain_url, timeout=5) as plain, pytest.raises(CmqError):
            plain.list_queues()
        cli = subprocess.run(
            [
                *(sys.executable, "-m", "cmq", "--ca-file", str(ca_file)),
                *("queue", "list", "--url", https, "--json"),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert cli.returncode == 0, cli.stderr
        assert queue in cli.stdout
        assert f"serving {https}" in (cluster.root / "node1.log").read_text()
    finally:
        cluster.stop_all()
