"""HTTPS: a real node serving ``--tls-cert``/``--tls-key`` made by a throwaway CA (made here),
reached by the client and the CLI with ``--ca-file`` / ``CMQ_CA_FILE``; a client that does not
trust the CA, or plain HTTP, is refused."""

from __future__ import annotations

import datetime
import ipaddress
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from cmq.client import SyncClient
from cmq.errors import CmqError
from tests.cmq.cluster import CmqCluster, unique_queue


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca_and_cert(root: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) files for 127.0.0.1."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("cmq test CA"))
        .issuer_name(_name("cmq test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_file, cert_file, key_file = root / "ca.pem", root / "server.pem", root / "server.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca_file, cert_file, key_file


def test_https_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca_file, cert_file, key_file = make_ca_and_cert(tmp_path)
    (tmp_path / "cluster").mkdir()
    cluster = CmqCluster(tmp_path / "cluster", n=1, groups=1)
    cluster.args[1] += ["--tls-cert", str(cert_file), "--tls-key", str(key_file)]
    https = cluster.http[1].replace("http://", "https://")
    cluster.http[1] = https
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
