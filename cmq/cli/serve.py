"""``cmq serve``: run one node, its settings read from flags, then ``CMQ_*`` environment
variables, then a TOML file (``--config``). The value settings are `cmq.cli.settings`' table;
the ones here are those that are not one value: addresses, data directories, the cluster secret
(``CMQ_SECRET`` or ``--secret-file``, shared by all nodes: peer authentication and receipt
signing), peer TLS (``--peer-tls-cert``, ``--peer-tls-key``, ``--peer-tls-ca``: all three or
none, `cmq.node.peer_tls`), ``--rejoin``, and the HTTP security options (`cmq.cli.keys`).
"""

from __future__ import annotations

import argparse
import os
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cmq.cli.keys import add_serve_security
from cmq.cli.launch import DEFAULT_HTTP_PORT, DEFAULT_PEER_PORT
from cmq.cli.nodes import add_serve_arguments, serve_settings
from cmq.cli.settings import SERVE_SETTINGS, add_settings, node_settings, resolve

if TYPE_CHECKING:
    from cmq.node.peer_tls import PeerTlsFiles


def add_serve_command(sub: Any) -> None:
    """``cmq serve`` and its flags."""
    s = sub.add_parser("serve", help="run one node")
    s.add_argument("--node-id", type=int)
    s.add_argument("--http", help="HOST:PORT of the HTTP API")
    s.add_argument("--peer", help="HOST:PORT for peer traffic")
    s.add_argument("--peers", help="ID=HOST:PORT,... for every node (this one included)")
    s.add_argument("--data-dir", action="append", help="a data directory (repeat for more disks)")
    s.add_argument("--secret-file")
    s.add_argument(
        "--peer-tls-cert",
        help="mutual TLS for peer traffic: this node's certificate chain (PEM), signed by the "
        "cluster CA (env CMQ_PEER_TLS_CERT; with --peer-tls-key and --peer-tls-ca)",
    )
    s.add_argument(
        "--peer-tls-key", help="the peer certificate's private key (PEM; env CMQ_PEER_TLS_KEY)"
    )
    s.add_argument(
        "--peer-tls-ca",
        help="the cluster CA bundle (PEM) peers' certificates must be signed by "
        "(env CMQ_PEER_TLS_CA)",
    )
    s.add_argument(
        "--rejoin",
        action="store_true",
        help="this node's data was lost: rejoin under the same id without voting until caught "
        "up (required after wiping a node's disk; never on a healthy node)",
    )
    s.add_argument("--config", help="TOML file with the same settings")
    add_settings(s, SERVE_SETTINGS)
    add_serve_arguments(s)
    add_serve_security(s)
    s.set_defaults(func=_serve)


def _setting(args: argparse.Namespace, conf: dict[str, Any], name: str, default: Any = None) -> Any:
    value = getattr(args, name, None)
    if value not in (None, []):
        return value
    env = os.environ.get("CMQ_" + name.upper())
    if env is not None:
        return env
    return conf.get(name, default)


def _read_secret(args: argparse.Namespace, conf: dict[str, Any]) -> bytes:
    if os.environ.get("CMQ_SECRET"):
        return os.environ["CMQ_SECRET"].encode()
    path = _setting(args, conf, "secret_file")
    if path:
        return Path(path).read_bytes().strip()
    raise SystemExit("the cluster secret is missing: set CMQ_SECRET or --secret-file")


def _peer_tls(args: argparse.Namespace, conf: dict[str, Any]) -> PeerTlsFiles | None:
    """The peer TLS files (``peer_tls_cert``, ``peer_tls_key``, ``peer_tls_ca``): all three,
    or None for plain peer traffic; `InvalidParameter` when only some are set. The files are
    read (and checked) when the node starts."""
    from cmq.node.peer_tls import PeerTlsFiles

    return PeerTlsFiles.of(
        _setting(args, conf, "peer_tls_cert"),
        _setting(args, conf, "peer_tls_key"),
        _setting(args, conf, "peer_tls_ca"),
    )


def _serve(args: argparse.Namespace) -> int:
    from cmq.node.config import NodeConfig
    from raftlog.transport import Address, parse_peers

    conf: dict[str, Any] = {}
    if args.config:
        with open(args.config, "rb") as f:
            conf = tomllib.load(f)
    node_id = int(_setting(args, conf, "node_id", 0))
    http = Address.parse(str(_setting(args, conf, "http", f"127.0.0.1:{DEFAULT_HTTP_PORT}")))
    peer = Address.parse(str(_setting(args, conf, "peer", f"127.0.0.1:{DEFAULT_PEER_PORT}")))
    peers_text = _setting(args, conf, "peers")
    peers = parse_peers(peers_text) if peers_text else {node_id: peer}
    scale = serve_settings(args, conf, f"{http.host}:{http.port}", node_id)
    dirs = _setting(args, conf, "data_dir")
    data_dirs = tuple([dirs] if isinstance(dirs, str) else dirs or [])
    if not node_id or not data_dirs or node_id not in peers:
        raise SystemExit("need --node-id, --data-dir and --peers that include this node")
    values = resolve(args, conf, SERVE_SETTINGS)  # a bad value exits before a directory is made
    for d in data_dirs:
        os.makedirs(d, exist_ok=True)
    cfg = NodeConfig(
        node_id=node_id,
        peer=peer,
        peers=peers,
        data_dirs=data_dirs,
        secret=_read_secret(args, conf),
        rejoin=bool(args.rejoin),
        **scale,
        **node_settings(values),
        peer_tls=_peer_tls(args, conf),
    )

    from cmq.cli.keys import serve_security
    from cmq.cli.server import run
    from cmq.errors import InvalidParameter
    from cmq.node.queue_metrics import QueueMetricsSettings

    try:
        queue_metrics = QueueMetricsSettings.parse(
            values["metrics_queues"], values["metrics_top_queues"]
        )
    except InvalidParameter as e:
        raise SystemExit(e.message) from None

    security = serve_security(args, conf)

    from cmq.logs import log_format

    try:
        fmt = log_format(values["log_format"])
    except ValueError as e:
        raise SystemExit(str(e)) from None
    workers, otlp = values["http_workers"], values["otlp_endpoint"] or None
    return run(cfg, http, security, workers, fmt, queue_metrics=queue_metrics, otlp_endpoint=otlp)
