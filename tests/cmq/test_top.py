"""``cmq top``: the rows and rates from two polls (pure), and ``--once`` against real nodes."""

from __future__ import annotations

import json
import time

import pytest

from cmq.cli.main import main
from cmq.cli.top import Sample, poll, rate, table_rows
from cmq.client import SyncClient
from tests.cmq.cluster import CmqCluster, unique_queue


def sample(name: str, visible: int = 0, sent: int = 0, acked: int = 0, **kw: int) -> Sample:
    return Sample(
        name,
        visible,
        kw.get("in_flight", 0),
        kw.get("delayed", 0),
        kw.get("oldest_age_ms", 0),
        sent,
        acked,
    )


def test_rate_of_a_counter() -> None:
    assert rate(10, 30, 2.0) == 10.0
    assert rate(5, 5, 1.0) == 0.0
    assert rate(None, 30, 2.0) is None  # first sight
    assert rate(30, 10, 2.0) is None  # went back: the queue was made again
    assert rate(1, 2, 0.0) is None


def test_rows_are_deepest_first_with_rates_from_two_polls() -> None:
    before = {"a": sample("a", 1, sent=100, acked=90), "b": sample("b", 5, sent=0)}
    after = {
        "a": sample("a", 2, sent=140, acked=130, in_flight=10, oldest_age_ms=2500),
        "b": sample("b", 5, sent=0, delayed=1),
        "c": sample("c", 12, sent=12),
        "d": sample("d", 12, sent=3),
    }
    rows = table_rows(before, after, 4.0)
    assert [r.name for r in rows] == ["a", "c", "d", "b"]  # 12, 12, 12, 6: ties by name
    a = rows[0]
    assert (a.depth, a.visible, a.in_flight, a.delayed) == (12, 2, 10, 0)
    assert (a.send_rate, a.ack_rate, a.oldest_age_s) == (10.0, 10.0, 2.5)
    assert rows[1].send_rate is None and rows[1].ack_rate is None  # c: seen once
    assert rows[3].send_rate == 0.0 and rows[3].depth == 6
    assert table_rows({}, {}, 1.0) == []


@pytest.mark.slow
def test_once_shows_a_queue_with_its_depth_and_rates(
    cmq_cluster: CmqCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    name = unique_queue("top")
    url = cmq_cluster.urls[0]
    with SyncClient(cmq_cluster.urls) as client:
        client.create_queue(name)
        client.send(name, ["a", "b", "c"])
        before, at = poll(client, 500), time.monotonic()
        client.send(name, ["d", "e"])
        got = client.receive(name, 1)
        client.ack(name, [m.receipt for m in got])
        after, now = poll(client, 500), time.monotonic()
    (row,) = [r for r in table_rows(before, after, now - at) if r.name == name]
    assert (row.depth, row.visible, row.in_flight) == (4, 4, 0)
    assert row.send_rate is not None and row.send_rate == pytest.approx(2 / (now - at))
    assert row.ack_rate == pytest.approx(1 / (now - at))

    assert main(["top", "--once", "--url", url, "--interval", "0.2", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["queues"]}
    assert rows[name]["depth"] == 4 and rows[name]["visible"] == 4
    assert rows[name]["send_rate"] == 0.0 and rows[name]["oldest_age_s"] >= 0

    assert main(["top", "--once", "--url", url, "--interval", "0.2"]) == 0
    table = capsys.readouterr().out
    (line,) = [line for line in table.splitlines() if name in line]
    cells = [c.strip() for c in line.strip("│| \n").split("│")]
    assert cells[:5] == [name, "4", "4", "0", "0"], line
    assert "cmq top" in table and "sent/s" in table
