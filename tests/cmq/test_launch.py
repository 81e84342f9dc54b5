"""The launcher of local node processes (`cmq.cli.launch`): a node's settings become the
`cmq serve` command line that `cmq dev`, the test clusters and the benchmarks run."""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from cmq.cli.launch import PORT_RANGE_ENV, SERVE_COMMAND, ServeSettings, founders, free_ports
from tests.ports import worker_range


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


def test_free_ports_come_from_the_range_and_skip_a_port_in_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    low = free_ports(1)[0]  # this worker's range, or the kernel's
    monkeypatch.setenv(PORT_RANGE_ENV, f"{low}-{low + 3}")
    taken = socket.socket()
    taken.bind(("127.0.0.1", low + 1))
    try:
        got = [p for _ in range(3) for p in free_ports(1)]
        assert low + 1 not in got and set(got) <= {low, low + 2, low + 3}
        assert len(set(got)) == 3  # successive calls move on through the range
        with pytest.raises(RuntimeError, match="fewer than 4 free ports"):
            free_ports(4)
    finally:
        taken.close()


@pytest.mark.parametrize("text", ["20000", "a-b", "30000-20000", "80-90", "20000-70000"])
def test_a_malformed_port_range_is_refused(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, text)
    with pytest.raises(ValueError, match=PORT_RANGE_ENV):
        free_ports(1)


def test_each_test_worker_has_its_own_port_range() -> None:
    one = worker_range(None, None)
    a, b = worker_range("gw0", "2"), worker_range("gw1", "2")
    bounds = [tuple(map(int, r.split("-"))) for r in (one, a, b)]
    assert bounds[0] == (20_000, 31_999)
    assert bounds[1][1] < bounds[2][0] and bounds[1][0] == 20_000 and bounds[2][1] <= 31_999


def test_threads_picking_ports_at_once_get_distinct_ones() -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        picks = list(pool.map(lambda _: free_ports(2), range(32)))
    ports = [p for pick in picks for p in pick]
    assert len(set(ports)) == len(ports)
