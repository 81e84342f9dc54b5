"""``cmq serve``'s value settings (`cmq.cli.settings`): one table gives the flags, the
variables, the TOML keys and the defaults, which are `NodeConfig`'s own. Fast: argparse only."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from cmq.cli.main import main
from cmq.cli.settings import SERVE_SETTINGS, add_settings, node_settings, resolve
from cmq.node.config import NodeConfig


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_settings(p, SERVE_SETTINGS)
    return p.parse_args(list(argv))


def test_unset_settings_are_the_node_configs_defaults() -> None:
    values = node_settings(resolve(parse(), {}, SERVE_SETTINGS, environ={}))
    fields = {f.name: f.default for f in dataclasses.fields(NodeConfig)}
    assert values and all(values[k] == fields[k] for k in values), values


def test_a_flag_beats_the_environment_which_beats_the_file() -> None:
    conf = {"groups": 6, "max_inflight_sends": 30, "coalesce_sends": False}
    env = {"CMQ_GROUPS": "5", "CMQ_SCRUB_RATE": "0.5"}
    got = resolve(parse("--groups", "7"), conf, SERVE_SETTINGS, environ=env)
    assert got["groups"] == 7 and got["max_inflight_sends"] == 30
    assert got["coalesce_sends"] is False and got["scrub_rate"] == 0.5 * (1 << 20)
    got = resolve(parse(), conf, SERVE_SETTINGS, environ=env)
    assert got["groups"] == 5
    got = resolve(parse("--coalesce-sends", "off"), {}, SERVE_SETTINGS, environ={})
    assert got["coalesce_sends"] is False


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("groups", "0"),
        ("max_inflight_sends", "many"),
        ("disk_reserve_bytes", "-1"),
        ("slow_fsync_seconds", "0"),
        ("segment_max_age", "-3"),
        ("coalesce_sends", "maybe"),
        ("http_workers", "-2"),
        ("log_format", "xml"),
    ],
)
def test_a_bad_value_exits_naming_the_flag(name: str, value: str) -> None:
    flag = "--" + name.replace("_", "-")
    with pytest.raises(SystemExit, match=flag):
        resolve(parse(), {}, SERVE_SETTINGS, environ={"CMQ_" + name.upper(): value})


def test_help_names_each_default_and_variable() -> None:
    p = argparse.ArgumentParser()
    add_settings(p, SERVE_SETTINGS)
    text = " ".join(p.format_help().split())
    assert "(default 24; env CMQ_MAX_INFLIGHT_SENDS)" in text
    assert "(default on; env CMQ_COALESCE_SENDS)" in text
    assert "(default 2; env CMQ_SCRUB_RATE)" in text  # NodeConfig's 2 MiB/s in MB/s


def test_building_the_parser_imports_no_node_module() -> None:
    """Every ``cmq`` command (and shell completion) builds the whole parser."""
    code = (
        "import sys; from cmq.cli.main import build_parser; build_parser(); "
        "print(sorted(m for m in sys.modules if m.startswith(('cmq.node', 'raftlog.runtime'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_a_bad_setting_stops_serve_before_anything_is_stored(tmp_path: Path) -> None:
    data = tmp_path / "d1"
    argv = ["serve", "--node-id", "1", "--data-dir", str(data), "--groups", "0"]
    with pytest.raises(SystemExit, match="--groups must be at least 1"):
        main(argv)
    assert not data.exists()
