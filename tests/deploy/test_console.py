"""The web console (/ui) in a real browser: Debian's chromium, headless, driven by Playwright,
against the session's 3-node cluster. It shows the nodes and groups, a queue's depth changes
after sends, and the queue page peeks at the head without leasing. Also the read-only peek API
itself, and the metrics the chart's alerts are written against."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cmq.client import Message, SyncClient
from cmq.errors import QueueNotFound
from cmq.upgrade.release import RELEASE
from tests.cmq.cluster import CmqCluster, blocking, request, unique_queue
from tests.deploy.chart import ALL_ON, MONITORING_APIS, one, render

pytestmark = pytest.mark.slow

T = TypeVar("T")


def test_console_shows_nodes_and_queue_depth_changes(
    cmq_cluster: CmqCluster, browser_page: object, tmp_path: Path, console_artifacts: Path
) -> None:
    from playwright.sync_api import Page, expect

    page = browser_page
    assert isinstance(page, Page)
    queue = unique_queue("console")
    url = cmq_cluster.urls[0]

    def call(f: Callable[[SyncClient], T]) -> T:
        # Playwright's sync API runs an event loop in this thread: the client gets another.
        def run() -> T:
            with SyncClient(cmq_cluster.urls) as client:
                return f(client)

        return blocking(run)

    retry = {"initial_seconds": 5, "multiplier": 2, "max_seconds": 600}
    attrs = {
        "visibility_timeout": 60,
        "max_delay_seconds": 7200,
        "retry": retry,
        "retain_acked_seconds": 3600,
        "priorities": 4,
    }
    call(lambda c: c.create_queue(queue, attrs))
    try:
        page.goto(url + "/ui")
        assert page.url.endswith("/ui/")
        expect(page.locator("#nodes .node")).to_have_count(3, timeout=15_000)
        expect(page.locator("#nodes .node.self")).to_have_attribute("data-node", "1")
        expect(page.locator("#health")).to_have_text("ready")
        # An anonymous node: no sign-in asked, nothing hidden.
        expect(page.locator("#who")).to_have_text(re.compile("anonymous node"))
        expect(page.locator("#sign-out")).to_be_hidden()
        expect(page.locator("#clock-state .pill")).to_have_attribute("data-state", "ok")
        expect(page.locator("#repair-state .pill")).to_have_attribute("data-state", "ok")
        expect(page.locator("#disks tbody tr")).to_have_count(1)
        # Each node's release (every node of the session's cluster runs this one).
        releases = page.locator("#nodes .node .badge.release")
        expect(releases).to_have_count(3)
        for i in range(3):
            expect(releases.nth(i)).to_have_text(f"release {RELEASE}", timeout=15_000)
        expect(page.locator("#releases")).to_have_text(f"releases: {RELEASE} (nodes 1, 2, 3)")
        # Every group has a leader badge, none is leaderless.
        expect(page.locator("#groups tbody tr").first).to_be_visible()
        assert page.locator("#groups .pill.bad").count() == 0
        row = page.locator(f'#queues tr[data-queue="{queue}"]')
        expect(row.locator("td.depth")).to_have_text("0", timeout=15_000)

        call(lambda c: c.send(queue, [f"console message {i}" for i in range(7)]))
        expect(row.locator("td.depth")).to_have_text("7", timeout=15_000)
        expect(row.locator("td.spark svg polyline").first).to_be_attached()
        # Scheduling: the delayed count, the queue's max delay, retention and retry policy.
        call(lambda c: c.send(queue, [Message("console later", delay_seconds=3600)]))
        expect(row.locator("td.delayed")).to_have_text("1", timeout=15_000)
        expect(row.locator("td.max-delay")).to_have_text("2 h")
        expect(row.locator("td.retention")).to_have_text("4 d")
        expect(row.locator("td.retry")).to_have_text("5 s \u00d72, at most 10 min")
        page.screenshot(path=str(tmp_path / "console-overview.png"), full_page=True)

        # The queue page: stats, attributes, and the head of the queue, peeked.
        row.locator("a.q").click()
        expect(page.locator("#q-name")).to_have_text(queue)
        peeked = page.locator("#q-peek tbody tr")
        expect(peeked).to_have_count(7, timeout=15_000)
        expect(peeked.first.locator("td.body")).to_have_text("console message 0")
        attr = page.locator('#q-attributes tr[data-key="visibility_timeout"] td').nth(1)
        expect(attr).to_have_text("60")
        cell = page.locator('#q-attributes tr[data-key="retry"] td').nth(1)
        expect(cell).to_have_text("5 s \u00d72, at most 10 min")
        cell = page.locator('#q-attributes tr[data-key="max_delay_seconds"] td').nth(1)
        expect(cell).to_have_text("7200 (2 h)")
        expect(page.locator('#q-stats tr[data-key="delayed"] td').nth(1)).to_have_text("1")
        expect(page.locator("#purge")).to_be_visible()
        expect(page.locator('#q-stats tr[data-key="visible"] td').nth(1)).to_have_text("7")
        page.screenshot(path=str(tmp_path / "console-queue.png"), full_page=True)

        # Peeking leased nothing: the first receive is each message's first delivery.
        got = call(lambda c: c.receive(queue, 7, wait_seconds=5))
        assert [m.receive_count for m in got] == [1] * 7
        call(lambda c: c.ack(queue, [m.receipt for m in got]))
        expect(page.locator("#q-empty")).to_be_visible(timeout=15_000)

        # Rewind to an hour ago (the browser's local time): the seven acked messages come back.
        page.eval_on_selector(
            "#rewind-since",
            "e => { const d = new Date(Date.now() - 3600e3);"
            " d.setMinutes(d.getMinutes() - d.getTimezoneOffset());"
            " e.value = d.toISOString().slice(0, 19); }",
        )
        page.click("#rewind")
        expect(page.locator("#confirm-text")).to_contain_text(queue)
        page.click("#confirm-ok")
        expect(page.locator("#q-action-result")).to_have_text(
            "rewound: 7 messages delivered again", timeout=15_000
        )
        again = call(lambda c: c.receive(queue, 7, wait_seconds=5))
        assert sorted(m.body for m in again) == sorted(m.body for m in got)
        call(lambda c: c.ack(queue, [m.receipt for m in again]))
        expect(page.locator("#q-empty")).to_be_visible(timeout=15_000)
        page.goto(url + "/ui/#/")
        row = page.locator(f'#queues tr[data-queue="{queue}"]')
        expect(row.locator("td.depth")).to_have_text("0", timeout=15_000)
        expect(row.locator("td.acked-rate")).to_have_text(re.compile(r"^[0-9.,]+$"))

        # Priorities and tenants: the levels shown, a send from the form at level 3, a tenant's
        # message sent by a client, the level-3 message received first; the levels set.
        row.locator("a.q").click()
        expect(page.locator("#q-levels-summary")).to_have_text(
            re.compile(r"^4 priority levels: 0 \(lowest\) to 3 \(highest\)")
        )
        expect(page.locator("#send-dedup-label")).to_be_hidden()  # a standard queue's form
        page.fill("#send-body", "console urgent")
        page.select_option("#send-priority", "3")
        page.click("#send")
        expect(page.locator("#send-result")).to_have_text(re.compile(r"^sent \S+ .* priority 3$"))
        call(lambda c: c.send(queue, [Message("console tenant", group_id="tenant-a")]))
        level = page.locator('#q-levels tr[data-level="3"] td.num')
        expect(level).to_have_text("1", timeout=15_000)
        expect(page.locator('#q-levels tr[data-level="0"] td.num')).to_have_text("1")
        # tenant-a and the messages without a group id (the level-3 one), one tenant each
        tenants = page.locator("#q-tenants")
        expect(tenants).to_have_attribute("data-tenants", "2")
        expect(tenants).to_have_text(re.compile("^fair queue: 2 tenants with messages ready"))
        first = call(lambda c: c.receive(queue, 1, wait_seconds=5))
        assert [(m.body, m.priority) for m in first] == [("console urgent", 3)]
        expect(tenants).to_have_attribute("data-tenants", "1", timeout=15_000)
        page.fill("#attr-priorities", "8")
        page.click("#attr-save")
        expect(page.locator("#attr-result")).to_have_text("saved: priorities 8", timeout=15_000)
        cell = page.locator('#q-attributes tr[data-key="priorities"] td').nth(1)
        expect(cell).to_have_text("8", timeout=15_000)
        expect(page.locator("#q-levels tbody tr")).to_have_count(8)
        page.screenshot(path=str(tmp_path / "console-levels.png"), full_page=True)
    finally:
        # Idempotent clean-up: a delete retried after a lost reply finds the queue gone.
        with contextlib.suppress(QueueNotFound):
            call(lambda c: c.delete_queue(queue))
    shot = tmp_path / "console-overview.png"
    assert shot.stat().st_size > 10_000
    print(f"console screenshots: {tmp_path}/console-overview.png, {tmp_path}/console-queue.png")
    for name in ("console-overview.png", "console-queue.png"):
        shutil.copy(tmp_path / name, console_artifacts / f"anonymous-{name}")
    keep = os.environ.get("CMQ_CONSOLE_SCREENSHOT_DIR")
    if keep:
        for name in ("console-overview.png", "console-queue.png"):
            shutil.copy(tmp_path / name, Path(keep) / name)


def test_peek_reads_the_head_without_leasing(cmq_cluster: CmqCluster) -> None:
    queue = unique_queue("peek")
    with SyncClient(cmq_cluster.urls) as client:
        client.create_queue(queue, {})
        try:
            client.send(queue, ["a", "b", "c"])
            for url in cmq_cluster.urls:  # any node answers (forwarded to the leader)
                status, body = request(url, "GET", f"/v1/queues/{queue}/messages?peek=2")
                assert status == 200, body
                assert [m["body"] for m in body["messages"]] == ["a", "b"]
                assert "receipt" not in body["messages"][0]
            assert client.get_queue(queue).stats.in_flight == 0
            status, body = request(
                cmq_cluster.urls[0], "GET", f"/v1/queues/{queue}/messages?peek=0"
            )
            assert (status, body["error"]["code"]) == (400, "InvalidParameter")
            status, body = request(
                cmq_cluster.urls[0], "GET", "/v1/queues/no-such-q/messages?peek=1"
            )
            assert (status, body["error"]["code"]) == (404, "QueueNotFound")
        finally:
            client.delete_queue(queue)


def test_alert_metrics_exist_on_a_real_node(cmq_cluster: CmqCluster) -> None:
    """Every cmq_* series the PrometheusRule and the dashboard query is exported by a node (a
    family with no sample yet counts: a gauge such as cmq_group_needs_repair has none while
    nothing is under repair). A queue with a message makes its leader export the per-queue
    families."""
    docs = render(ALL_ON, api_versions=MONITORING_APIS)
    exprs = [r["expr"] for r in one(docs, "PrometheusRule")["spec"]["groups"][0]["rules"]]
    exprs.append(one(docs, "ConfigMap", "-dashboard")["data"]["cmq.json"])
    wanted = {m for e in exprs for m in re.findall(r"\bcmq_[a-z_]+", e)}
    assert {"cmq_raft_has_leader", "cmq_queue_oldest_message_age_seconds"} <= wanted
    client = SyncClient(cmq_cluster.urls[0])
    queue = unique_queue("alerts")
    client.create_queue(queue)
    try:
        client.send(queue, [b"m"])
        exported: set[str] = set()
        for url in cmq_cluster.urls:  # lag and the per-queue series come from the leaders
            with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
                text = resp.read().decode()
            for fam in text_string_to_metric_families(text):
                exported.add(fam.name)
                if fam.type == "counter":
                    exported.add(fam.name + "_total")
                exported.update(s.name for s in fam.samples)
        missing = {m for m in wanted if m not in exported}
        assert not missing, missing
    finally:
        with contextlib.suppress(QueueNotFound):
            client.delete_queue(queue)
