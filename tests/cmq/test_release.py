"""What release this is (`cmq.upgrade.release`): the version agrees with pyproject.toml and with the
releases file, `cmq --version`, the ``cmq_build_info`` metric, the release call between nodes
(`cmq.admin.peer_releases`, also against a node that predates it), and the release columns of
``cmq status`` and ``cmq node list`` against an in-process cluster."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tomllib
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from cmq.admin.peer_releases import UNREPORTED_RELEASE, PeerReleases
from cmq.catalog.meta import CatalogMachine
from cmq.catalog.placement import NodeInfo
from cmq.cli import output as cli_output
from cmq.cli.main import main
from cmq.node.metrics import BuildInfoCollector
from cmq.routing import rpc
from cmq.routing.rpc import ReleaseCall, ReleaseInfo
from cmq.upgrade.release import (
    PEER_PROTOCOL_MAX,
    PEER_PROTOCOL_MIN,
    RELEASE,
    SOURCE_RELEASE,
    describe,
    version_line,
)
from raftlog.errors import PeerUnavailable
from tests.cmq.helpers import configs, running, wait_until
from tests.cmq.release_helpers import old_node_answer, serve_app

ROOT = Path(__file__).resolve().parents[2]


def _pyproject_version() -> str:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def _releases() -> list[dict[str, Any]]:
    with open(ROOT / "RELEASES.toml", "rb") as f:
        entries: list[dict[str, Any]] = tomllib.load(f)["release"]
    return entries


# -- the version ---------------------------------------------------------------------------------
def test_the_release_is_pyprojects_version() -> None:
    assert _pyproject_version() == SOURCE_RELEASE
    # Whatever metadata the environment holds (an editable install of another tree), the
    # running code reports the release of its own tree.
    assert RELEASE == SOURCE_RELEASE
    assert describe() == {
        "release": RELEASE,
        "protocol": {"min": PEER_PROTOCOL_MIN, "max": PEER_PROTOCOL_MAX},
    }
    assert 1 <= PEER_PROTOCOL_MIN <= PEER_PROTOCOL_MAX


def test_cmq_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"cmq {RELEASE} (peer protocol 1-1)\n"
    assert version_line() == f"cmq {RELEASE} (peer protocol 1-1)"


# -- the releases file ---------------------------------------------------------------------------
def _key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def test_the_releases_file_parses_and_its_newest_release_is_this_one() -> None:
    entries = _releases()
    versions = [e["version"] for e in entries]
    assert versions == sorted(versions, key=_key) and len(set(versions)) == len(versions)
    assert versions[-1] == _pyproject_version()
    for e in entries:
        assert isinstance(e["commit"], str) and isinstance(e["notes"], str) and e["notes"].strip()
        lo, hi = e["protocol"]
        assert 1 <= lo <= hi
    # Only the newest may be unreleased (no commit yet); every other names its commit.
    assert all(e["commit"] for e in entries[:-1])
    assert entries[-1]["protocol"] == [PEER_PROTOCOL_MIN, PEER_PROTOCOL_MAX]
    assert entries[0] == entries[0] | {"version": "0.1.0", "commit": "63ccab1"}


def test_every_recorded_commit_is_in_the_history() -> None:
    """Read from the releases file, never from tags (a clone may carry none)."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the recorded commits cannot be looked up")
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [git, "-C", str(ROOT), *args]
        return subprocess.run(cmd, check=False, capture_output=True, text=True)

    if run("rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        pytest.skip("a shallow clone: older commits are not in its history")
    for e in _releases():
        if e["commit"]:
            got = run("cat-file", "-e", f"{e['commit']}^{{commit}}")
            assert got.returncode == 0, f"release {e['version']}: no commit {e['commit']}"
            ancestor = run("merge-base", "--is-ancestor", e["commit"], "HEAD")
            assert ancestor.returncode == 0, f"release {e['version']} is not in HEAD's history"


# -- the metric ----------------------------------------------------------------------------------
def test_build_info_metric() -> None:
    registry = CollectorRegistry()
    registry.register(BuildInfoCollector())
    text = generate_latest(registry).decode()
    (family,) = text_string_to_metric_families(text)
    assert family.name == "cmq_build_info"
    (sample,) = family.samples
    assert sample.labels == {"version": RELEASE, "protocol_min": "1", "protocol_max": "1"}
    assert sample.value == 1


# -- the release call ----------------------------------------------------------------------------
def test_the_reply_is_a_map_a_later_release_may_extend() -> None:
    call = ReleaseCall(0)
    later = msgspec.msgpack.encode(
        {"release": "9.0.0", "protocol_min": 1, "protocol_max": 3, "flavour": ["x"]}
    )
    assert call.decode_reply(later) == ReleaseInfo("9.0.0", 1, 3)
    assert rpc.decode_call(call.encode()) == call


class _Clock:
    """Clocks that move only when a test moves them (``now[0]``, seconds)."""

    def __init__(self, now: list[float]) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now[0]

    def wall_ms(self) -> int:
        return round(self.now[0] * 1000)


class _Raft:
    """The runtime's ``call``, answered by ``answer(peer, payload)``."""

    def __init__(self, answer: Callable[[int, bytes], bytes]) -> None:
        self.answer = answer

    async def call(self, peer: int, payload: bytes, timeout: float) -> bytes:
        return self.answer(peer, payload)


async def test_peer_releases_mixed_cluster_and_silent_nodes() -> None:
    catalog = CatalogMachine()
    for n in (1, 2, 3, 4):
        catalog.nodes[n] = NodeInfo(address=f"h:{n}", data_dirs=("/d",))
    now = [100.0]

    def answer(peer: int, payload: bytes) -> bytes:
        if peer == 3:
            return old_node_answer(payload)
        if peer == 4:
            raise PeerUnavailable("node 4 is unreachable", outcome_unknown=False)
        return ReleaseCall(0).encode_reply(ReleaseInfo("0.2.0", 1, 1))

    seen = PeerReleases(1, _Raft(answer), catalog, clock=_Clock(now))  # type: ignore[arg-type]
    await seen.poll()
    got = seen.releases()
    assert got[1] == describe() | {"reported": True}
    assert got[2] == {"release": "0.2.0", "protocol": {"min": 1, "max": 1}, "reported": True}
    assert got[3] == {"release": UNREPORTED_RELEASE, "protocol": {"min": 1, "max": 1},
                      "reported": False}  # fmt: skip
    assert 4 not in got
    # A node that stops answering keeps its last release for a while, then is unknown.
    seen._raft = _Raft(lambda p, b: answer(4, b))  # type: ignore[assignment]
    now[0] += 30
    await seen.poll()
    assert seen.releases()[2]["release"] == "0.2.0"
    now[0] += 31
    assert 2 not in seen.releases()


# -- the command line's release columns ----------------------------------------------------------
def test_releases_line() -> None:
    line, mixed = cli_output.releases_line({1: "0.2.0", 2: "0.2.0", 3: "0.1.0"})
    assert line == "releases: 0.1.0 (node 3), 0.2.0 (nodes 1, 2)" and mixed
    line, mixed = cli_output.releases_line({1: "0.2.0", 2: "unknown"})
    assert line == "releases: 0.2.0 (node 1), unknown (node 2)" and not mixed


async def test_status_and_node_list_show_each_nodes_release(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Node 3 acts as a 0.1.0 node: it answers the release call as a node without it does."""
    async with running(configs(tmp_path)) as nodes:
        handler = nodes[3].raft._call_handler
        assert handler is not None

        async def old_serve(peer: int, payload: bytes) -> bytes:
            try:
                decoded = rpc.decode_call(payload)
            except Exception:
                decoded = None
            if isinstance(decoded, ReleaseCall):
                return old_node_answer(payload)
            return await handler(peer, payload)

        nodes[3].raft.set_call_handler(old_serve)

        def releases() -> dict[str, Any]:
            return {n: i.get("release") for n, i in nodes[1].status()["nodes"].items()}

        await wait_until(lambda: releases() == {"1": RELEASE, "2": RELEASE, "3": "0.1.0"})
        status = nodes[1].status()
        assert status["release"] == RELEASE
        assert status["protocol"] == {"min": 1, "max": 1}
        assert status["nodes"]["3"]["reported"] is False

        url, stop = await serve_app(nodes[1])
        try:
            assert await asyncio.to_thread(main, ["status", "--url", url]) == 0
            out = capsys.readouterr().out
            assert "mixed releases" in out
            assert f"releases: 0.1.0 (node 3), {RELEASE} (nodes 1, 2)" in out
            row = next(x for x in out.splitlines() if x.strip().startswith("3 "))
            assert "0.1.0" in row

            assert await asyncio.to_thread(main, ["node", "list", "--url", url]) == 0
            out = capsys.readouterr().out
            assert f"releases: 0.1.0 (node 3), {RELEASE} (nodes 1, 2)" in out
            rows = [x for x in out.splitlines() if x.strip()[:2] in ("1 ", "2 ", "3 ")]
            assert len(rows) == 3 and "0.1.0" in rows[2] and RELEASE in rows[0]

            assert await asyncio.to_thread(main, ["node", "list", "--url", url, "--json"]) == 0
            listed = json.loads(capsys.readouterr().out)["nodes"]
            assert [r["release"] for r in listed] == [RELEASE, RELEASE, "0.1.0"]

            assert await asyncio.to_thread(main, ["status", "--url", url, "--json"]) == 0
            assert json.loads(capsys.readouterr().out)["release"] == RELEASE

            def metrics() -> str:
                with urllib.request.urlopen(url + "/metrics") as resp:
                    return str(resp.read().decode())

            families = text_string_to_metric_families(await asyncio.to_thread(metrics))
            info = next(f for f in families if f.name == "cmq_build_info")
            assert [(s.labels["version"], s.value) for s in info.samples] == [(RELEASE, 1)]
        finally:
            await stop()
