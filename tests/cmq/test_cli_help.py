"""The ``cmq`` command line itself: a help line for every subcommand, plain-text help, and
shell completion through argcomplete's protocol (in-process, and as the shell runs it)."""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
from pathlib import Path

import argcomplete
import argcomplete.finders
import argcomplete.io
import pytest

from cmq.cli.completion import complete, script
from cmq.cli.main import build_parser

SUBCOMMANDS = {
    "archive", "serve", "dev", "queue", "send", "receive", "node", "key", "cluster", "backup",
    "restore", "status", "bench", "top", "completion",
}  # fmt: skip
MARKUP = ("`", "``", "**", "\\\\")


def subcommand_helps(parser: argparse.ArgumentParser) -> dict[str, str | None]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {a.dest: a.help for a in sub._choices_actions} | {
        name: None for name in sub.choices if name not in {a.dest for a in sub._choices_actions}
    }


def test_every_subcommand_has_a_help_line_and_the_help_is_plain_text() -> None:
    parser = build_parser()
    helps = subcommand_helps(parser)
    assert set(helps) == SUBCOMMANDS
    assert all(helps.values()), [name for name, h in helps.items() if not h]
    text = parser.format_help()
    assert not any(m in text for m in MARKUP), text
    for name, line in helps.items():
        assert f"    {name}" in text and str(line).split()[0] in text


def test_cmq_help_lists_every_subcommand() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "cmq", "--help"], capture_output=True, text=True, check=True
    ).stdout
    listed = {
        line.split()[0]
        for line in out.splitlines()
        if line.startswith("    ") and not line.startswith("     ") and line.split()
    }
    assert listed == SUBCOMMANDS, out
    assert "`" not in out


def completions(line: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What argcomplete answers for ``line`` (the cursor at its end), in-process."""
    monkeypatch.setenv("_ARGCOMPLETE", "1")
    monkeypatch.setenv("COMP_LINE", line)
    monkeypatch.setenv("COMP_POINT", str(len(line)))
    monkeypatch.delenv("_ARGCOMPLETE_SHELL", raising=False)
    # argcomplete writes its debug output to file descriptor 9, which is pytest's here.
    monkeypatch.setattr(
        argcomplete.finders.CompletionFinder,
        "_init_debug_stream",
        lambda self: setattr(argcomplete.io, "debug_stream", io.StringIO()),
    )
    out = io.StringIO()
    exits: list[int] = []
    complete(build_parser(), output_stream=out, exit_method=exits.append)
    assert exits == [0]
    return out.getvalue().split("\013")


def test_completion_of_a_subcommand_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    assert completions("cmq s", monkeypatch) == ["serve", "send", "status"]
    assert completions("cmq re", monkeypatch) == ["receive", "restore"]
    assert completions("cmq queue ", monkeypatch)[-6:] == [
        "create",
        "set",
        "list",
        "stats",
        "delete",
        "rewind",
    ]
    assert completions("cmq serve --log", monkeypatch) == ["--log-format "]  # the only one
    assert completions("cmq completion ", monkeypatch)[-2:] == ["bash", "zsh"]


def test_no_completion_request_returns_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("_ARGCOMPLETE", raising=False)
    complete(build_parser(), exit_method=lambda code: pytest.fail("exited"))


def test_the_shell_protocol_through_the_entry(tmp_path: Path) -> None:
    """As bash's hook runs it: ``cmq`` with the request in the environment, the answer in a
    file, the process exiting 0 before parsing anything."""
    answer = tmp_path / "answer"
    env = dict(
        os.environ,
        _ARGCOMPLETE="1",
        COMP_LINE="cmq to",
        COMP_POINT="6",
        _ARGCOMPLETE_STDOUT_FILENAME=str(answer),
    )
    p = subprocess.run(
        [sys.executable, "-m", "cmq"], check=False, env=env, capture_output=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    assert answer.read_text() == "top "  # the only candidate, completed with its space


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_cmq_completion_prints_the_registration_script(shell: str) -> None:
    text = script(shell)
    assert "_ARGCOMPLETE" in text and "cmq" in text
    out = subprocess.run(
        [sys.executable, "-m", "cmq", "completion", shell],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out == text
