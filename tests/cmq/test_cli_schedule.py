"""The command line's scheduling options (`cmq.cli.schedule`): ``cmq queue create|set
--max-delay --retry``, ``cmq send --delay | --deliver-at, --ttl``, parsed on their own and run
against an in-process node (what the node stored is read back from it)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cmq.cli.main import main
from cmq.cli.schedule import attribute_value, outgoing, parse_deliver_at, parse_retry
from cmq.client import Message
from cmq.errors import InvalidParameter
from cmq.model import RetryPolicy
from tests.cmq.helpers import one_node
from tests.cmq.release_helpers import serve_app


def test_retry_takes_initial_multiplier_max_or_off() -> None:
    assert parse_retry("5,2,300") == {"initial_seconds": 5, "multiplier": 2.0, "max_seconds": 300}
    assert parse_retry(" 1, 1.5 ,10") == {
        "initial_seconds": 1,
        "multiplier": 1.5,
        "max_seconds": 10,
    }
    assert parse_retry("off") is None and parse_retry("none") is None
    for bad, why in (
        ("5,2", "INITIAL,MULTIPLIER,MAX"),
        ("a,2,3", "whole seconds"),
        ("5,2,1", "max_seconds must be at least"),
        ("5,11,300", "multiplier must be in"),
        ("0,2,300", "initial_seconds must be in"),
    ):
        with pytest.raises(InvalidParameter, match=why):
            parse_retry(bad)


def test_deliver_at_needs_a_zone_and_attribute_values_are_typed() -> None:
    assert parse_deliver_at("2026-12-01T09:00:00Z") == datetime(2026, 12, 1, 9, tzinfo=UTC)
    got = parse_deliver_at("2026-12-01 10:00:00.5+01:00")
    assert got == datetime(2026, 12, 1, 9, 0, 0, 500_000, tzinfo=UTC)
    for bad in ("2026-12-01T09:00:00", "tomorrow", "2026-12-01"):
        with pytest.raises(InvalidParameter, match="RFC 3339"):
            parse_deliver_at(bad)
    assert attribute_value("fifo", "true") is True
    assert attribute_value("visibility_timeout", "30") == 30
    assert attribute_value("dead_letter_queue", "123") == "123"
    assert attribute_value("dead_letter_queue", "null") is None
    assert outgoing(["a"]) == ["a"]
    assert outgoing(["a"], delay=5, ttl=60) == [Message("a", delay_seconds=5, ttl_seconds=60)]
    for kwargs, why in (
        ({"delay": 1, "deliver_at": "2026-12-01T09:00:00Z"}, "not both"),
        ({"delay": -1}, "negative"),
        ({"ttl": 0}, "at least 1"),
    ):
        with pytest.raises(InvalidParameter, match=why):
            outgoing(["a"], **kwargs)  # type: ignore[arg-type]


def test_bad_options_fail_in_one_line_and_send_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    # No node listens there: the parse fails first, so the error is the option's.
    url = "http://127.0.0.1:1"
    assert main(["send", "q", "x", "--deliver-at", "soon", "--url", url, "--json"]) == 1
    err = json.loads(capsys.readouterr().out)["error"]
    assert err["code"] == "InvalidParameter" and "RFC 3339" in err["message"]
    assert main(["queue", "create", "q", "--retry", "1,2", "--url", url]) == 1
    got = capsys.readouterr()
    assert "InvalidParameter" in got.err and len(got.err.strip().splitlines()) == 1
    with pytest.raises(SystemExit):  # argparse: --delay and --deliver-at exclude each other
        main(["send", "q", "x", "--delay", "1", "--deliver-at", "2026-12-01T09:00:00Z"])


async def test_queue_and_send_options_against_a_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with one_node(tmp_path / "n", 0.05) as node:
        url, stop = await serve_app(node)
        try:

            def cli(*argv: str) -> int:
                return main([*argv, "--url", url, "--json"])

            async def run(*argv: str) -> dict[str, object]:
                assert await asyncio.to_thread(cli, *argv) == 0
                out: dict[str, object] = json.loads(capsys.readouterr().out)
                return out

            made = await run("queue", "create", "later", "--max-delay", "7200", "-a", "fifo=false")
            assert made["created"] is True
            attrs, _ = await node.get_queue("later")
            assert attrs.max_delay_seconds == 7200 and attrs.retry is None

            await run("queue", "set", "later", "--retry", "2,1.5,60", "-a", "visibility_timeout=5")
            attrs, _ = await node.get_queue("later")
            assert attrs.retry == RetryPolicy(2, 1.5, 60) and attrs.visibility_timeout == 5

            at = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
            await run("send", "later", "in-an-hour", "--deliver-at", at)
            await run("send", "later", "in-1000-s", "--delay", "1000")  # beyond 900: allowed
            await run("send", "later", "short-lived", "--ttl", "1")
            _, stats = await node.get_queue("later")
            assert (stats.delayed, stats.visible) == (2, 1)
            await asyncio.sleep(1.2)  # the time to live runs out: never delivered
            assert await node.receive("later", 10, 5, 0) == []

            # Past the queue's max_delay_seconds: the server refuses, nothing is stored.
            assert await asyncio.to_thread(cli, "send", "later", "x", "--delay", "7201") == 1
            assert "InvalidParameter" in capsys.readouterr().out
            assert (await node.get_queue("later"))[1].sent_total == 3

            await run("queue", "set", "later", "--retry", "off")
            assert (await node.get_queue("later"))[0].retry is None
        finally:
            await stop()
