"""Mutual TLS for peer (Raft) traffic: the TLS contexts of the peer transport, from files.

Every node holds a certificate chain and its private key, signed by the cluster's CA, and the
CA bundle (``cmq serve --peer-tls-cert/--peer-tls-key/--peer-tls-ca``). Each peer connection is
TLS 1.2 or later, and both ends present a certificate the other verifies against the CA: the
accepting node requires one (``CERT_REQUIRED``), the dialing node verifies the accepting one's.
The cluster-secret handshake still runs inside the TLS connection (defence in depth).

Host names are not checked: being signed by the cluster's CA is what authenticates a peer.
Peers are often addressed by IP address, or by names a shared certificate (one Kubernetes
Secret mounted into every pod) cannot list ahead of scaling; and a name would not prove the
node id anyway (any holder of a cluster certificate may claim any id, which the cluster secret
and the Raft membership bound). So the CA must be the cluster's own, signing nothing else.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from cmq.errors import InvalidParameter


@dataclass(frozen=True, slots=True)
class PeerTlsFiles:
    """PEM files: this node's certificate chain, its private key, and the cluster's CA bundle."""

    cert: str
    key: str
    ca: str

    @staticmethod
    def of(cert: str | None, key: str | None, ca: str | None) -> PeerTlsFiles | None:
        """The three files, or None when none is given; `InvalidParameter` when only some
        are (peer TLS is all or nothing: a node half configured must not start)."""
        given = {"cert": cert, "key": key, "ca": ca}
        if not any(given.values()):
            return None
        missing = [f"--peer-tls-{name}" for name, v in given.items() if not v]
        if missing:
            raise InvalidParameter(
                "peer TLS needs --peer-tls-cert, --peer-tls-key and --peer-tls-ca together "
                f"(CMQ_PEER_TLS_CERT/_KEY/_CA); missing: {', '.join(missing)}"
            )
        assert cert and key and ca
        return PeerTlsFiles(cert, key, ca)

    def contexts(self) -> tuple[ssl.SSLContext, ssl.SSLContext]:
        """(server, client) contexts for `raftlog.transport.peer.TransportConfig`: TLS 1.2+,
        each side's certificate required and verified against the CA, no host name check.
        Raises `OSError` or `ssl.SSLError` when a file is missing or unreadable."""
        server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=self.ca)
        server.verify_mode = ssl.CERT_REQUIRED
        client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca)
        client.check_hostname = False  # see the module docstring
        client.verify_mode = ssl.CERT_REQUIRED
        for context in (server, client):
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(self.cert, self.key)
        return server, client
