"""`cmq node ...` and the scale-out flags of `cmq serve`, without a cluster: argument checks and
the error a user sees when no node answers (the commands against a cluster are exercised by
the HTTP and process tests)."""

from __future__ import annotations

import argparse
import json

import pytest

from cmq.cli.main import main
from cmq.cli.nodes import add_serve_arguments, serve_settings
from cmq.cli.settings import SERVE_SETTINGS, add_settings, resolve


def test_node_commands_report_an_unreachable_node_in_one_line_or_as_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["node", "drain", "2", "--url", "http://127.0.0.1:1", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["error"]["code"] and out["error"]["message"]
    assert main(["node", "list", "--url", "http://127.0.0.1:1"]) == 1
    got = capsys.readouterr()
    assert not got.out
    lines = got.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error ") and "Traceback" not in got.err


def test_node_list_renders_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    from cmq.cli import output as cli_output

    row = {"id": 4, "state": "draining", "zone": "b", "address": "10.0.0.4:9080"}
    row |= {"http": "10.0.0.4:8080", "replicas": [2, 5], "incoming": [], "leaders": [5]}
    cli_output.render("node list", {"nodes": [row | {"meta": "learner", "lag": 1234}]})
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.strip().startswith("4"))
    for cell in ("draining", "10.0.0.4:9080", "2, 5", "learner", "1,234"):
        assert cell in line, out


def test_node_ids_must_be_integers() -> None:
    with pytest.raises(SystemExit) as info:
        main(["node", "remove", "two"])
    assert info.value.code == 2


def serve_args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_serve_arguments(p)
    add_settings(p, SERVE_SETTINGS)
    return p.parse_args(list(argv))


def test_serve_settings_from_flags_and_file() -> None:
    args = serve_args("--join", "http://a:1, http://b:2", "--zone", "z")
    got = serve_settings(args, {}, "h:1", 4)
    assert got == {"join": ("http://a:1", "http://b:2"), "http": "h:1"}
    values = resolve(args, {}, SERVE_SETTINGS, environ={})
    assert values["zone"] == "z" and values["replication"] == 3
    conf = {"replication": 5, "zone": "y"}
    values = resolve(serve_args(), conf, SERVE_SETTINGS, environ={})
    assert values["replication"] == 5 and values["zone"] == "y"
    assert serve_settings(serve_args(), conf, "h:1", 4)["join"] == ()
    for bad in ("2", "4", "7", "three"):
        with pytest.raises(SystemExit, match="replication"):
            resolve(serve_args("--replication", bad), {}, SERVE_SETTINGS, environ={})


def test_drain_wait_polls_until_the_node_holds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from cmq.cli import nodes as cli_nodes
    from cmq.cli import output as cli_output

    monkeypatch.setattr(cli_nodes.time, "sleep", lambda s: None)
    holding = {"id": 3, "replicas": [1], "incoming": [], "leaders": [], "meta": "learner"}
    voting = holding | {"replicas": [], "meta": "voter"}
    empty = voting | {"meta": "learner"}

    class Lists:
        def __init__(self, *answers: dict[str, object]) -> None:
            self.answers = list(answers)

        def list_nodes(self) -> list[dict[str, object]]:
            return [self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]]

    client = Lists(holding, voting, empty)
    assert cli_nodes._wait_drained(client, 3, 60, cli_output) == "drained"
    assert client.answers == [empty]
    assert cli_nodes._wait_drained(Lists(holding), 3, -1, cli_output) == "draining (timed out)"
