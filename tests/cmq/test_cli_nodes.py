"""`cmq node ...` and the scale-out flags of `cmq serve`, without a cluster: argument checks and
the error a user sees when no node answers (the commands against a cluster are exercised by
the HTTP and process tests)."""

from __future__ import annotations

import argparse
import json

import pytest

from cmq.cli import main
from cmq.cli_nodes import add_serve_arguments, serve_settings


def test_node_commands_report_an_unreachable_node_as_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["node", "drain", "2", "--url", "http://127.0.0.1:1"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["error"]["code"] and out["error"]["message"]


def test_node_ids_must_be_integers() -> None:
    with pytest.raises(SystemExit) as info:
        main(["node", "remove", "two"])
    assert info.value.code == 2


def serve_args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    return p.parse_args(list(argv))


def test_serve_settings_from_flags_and_file() -> None:
    got = serve_settings(
        serve_args("--join", "http://a:1, http://b:2", "--zone", "z"), {}, "h:1", 4
    )
    assert got == {
        "join": ("http://a:1", "http://b:2"),
        "zone": "z",
        "replication": 3,
        "http": "h:1",
    }
    conf = {"replication": 5, "zone": "y"}
    got = serve_settings(serve_args(), conf, "h:1", 4)
    assert got["replication"] == 5 and got["zone"] == "y" and got["join"] == ()
    for bad in ("2", "4", "7"):
        with pytest.raises(SystemExit, match="replication"):
            serve_settings(serve_args("--replication", bad), {}, "h:1", 4)
