"""The launcher of local node processes (`cmq.cli.launch`): a node's settings become the
`cmq serve` command line that `cmq dev`, the test clusters and the benchmarks run."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from cmq.cli.launch import SERVE_COMMAND, ServeSettings, founders, free_ports


def test_only_the_settings_given_become_flags(tmp_path: Path) -> None:
    nodes = founders(2, tmp_path, http_ports=[8001, 8002], peer_ports=[9001, 9002], groups=3)
    assert sorted(nodes) == [1, 2]
    two = nodes[2]
    assert two.url == "http://127.0.0.1:8002"
    assert two.command() == [
        *SERVE_COMMAND,
        "serve",
        *("--node-id", "2", "--http", "127.0.0.1:8002", "--peer", "127.0.0.1:9002"),
        *("--peers", "1=127.0.0.1:9001,2=127.0.0.1:9002"),
        *("--data-dir", str(tmp_path / "node2"), "--groups", "3"),
    ]
    joining = replace(two, peers={}, join=("http://a:1", "http://b:2"), rejoin=True)
    argv = joining.argv()
    assert "--peers" not in argv and argv[argv.index("--join") + 1] == "http://a:1,http://b:2"
    assert argv[-1] == "--rejoin"
    tls = replace(two, tls_cert="c.pem", tls_key="k.pem", anonymous=True, extra=("--zone", "z"))
    assert tls.url == "https://127.0.0.1:8002"
    assert tls.argv()[-3:] == ["--anonymous", "--zone", "z"]


def test_every_flag_is_one_cmq_serve_takes(tmp_path: Path) -> None:
    everything = ServeSettings(
        node_id=1,
        http="127.0.0.1:1",
        peer="127.0.0.1:2",
        data_dirs=("a", "b"),
        peers={1: "127.0.0.1:2"},
        join=("http://x",),
        groups=1,
        anonymous=True,
        http_workers=1,
        segment_max_bytes=1,
        segment_max_age=1.0,
        max_inflight_sends=1,
        replication=3,
        zone="z",
        rejoin=True,
        tls_cert="c",
        tls_key="k",
    )
    usage = subprocess.run(
        [sys.executable, "-m", "cmq", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    flags = {a for a in everything.argv() if a.startswith("--")}
    assert {f for f in flags if f not in usage} == set()


def test_free_ports_are_distinct() -> None:
    ports = free_ports(20)
    assert len(set(ports)) == 20 and all(0 < p < 65536 for p in ports)
