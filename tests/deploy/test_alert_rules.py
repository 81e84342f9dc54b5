"""The chart's alert rules under promtool: ``promtool check rules`` on the rendered PrometheusRule,
and ``promtool test rules`` with synthetic series for every alert, each shown firing where it
should and silent where it should not (a queue that is busy, small, fresh or folded; a repair or
clock step that heals in time). The dashboard's queries are checked to parse. A planted bug in a
rule is shown to fail the tests, so they can catch one.

Series are written in promtool's expanding notation (``a+bxn``: n further samples stepping by b;
``_`` a missing sample) at a 1-minute interval, labelled as the chart's selector expects:
namespace ``default``, pods ``q-cmq-N`` (release ``q``)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart import ALL_ON, MONITORING_APIS, one, render
from tests.deploy.promtoolbin import PromtoolUnavailable, ensure_promtool

NS = "default"


def _s(metric: str, values: str, **labels: str) -> dict[str, str]:
    """One input series of ``metric`` with the chart's namespace and ``labels``."""
    inner = ",".join(f'{k}="{v}"' for k, v in {"namespace": NS, **labels}.items())
    return {"series": f"{metric}{{{inner}}}", "values": values}


def _fires(alert: str, at: str, *alerts: dict[str, str]) -> dict[str, Any]:
    """An alert_rule_test: at ``at`` exactly ``alerts`` (label sets, severity included) fire."""
    return {
        "eval_time": at,
        "alertname": alert,
        "exp_alerts": [{"exp_labels": {"namespace": NS, **a}} for a in alerts],
    }


def _case(
    alert: str,
    severity: str,
    series: list[dict[str, str]],
    silent_at: str,
    fires: dict[str, list[dict[str, str]]],
) -> tuple[str, dict[str, Any]]:
    """``alert``'s case: its input ``series``, the alert silent at ``silent_at``, and at each time
    of ``fires`` exactly the listed label sets firing (at ``severity``)."""
    checks = [_fires(alert, silent_at)]
    checks += [
        _fires(alert, at, *({**a, "severity": severity} for a in f)) for at, f in fires.items()
    ]
    return alert, {"input_series": series, "alert_rule_test": checks}


VISIBLE = "cmq_queue_messages_visible"
RECEIVES = "cmq_queue_receives_total"
WAITING = "cmq_queue_consumers_waiting"
AGE = "cmq_queue_oldest_message_age_seconds"
DEAD = "cmq_queue_dead_letters_total"
REPAIR = "cmq_group_needs_repair"
REPAIRS = "cmq_repairs_started_total"
FINDINGS = "cmq_scrub_findings_total"
LEADER = "cmq_raft_has_leader"
LAG = "cmq_raft_follower_lag_entries"
AVAILABLE = "kubelet_volume_stats_available_bytes"
CAPACITY = "kubelet_volume_stats_capacity_bytes"
FSYNC = "cmq_wal_fsync_seconds_bucket"


def _no_consumers(
    pod: str, queue: str, visible: str, receives: str, waiting: str | None
) -> list[dict[str, str]]:
    """A queue's series for CmqQueueNoConsumers (``waiting`` None: that gauge not exported)."""
    out = [_s(VISIBLE, visible, pod=pod, queue=queue), _s(RECEIVES, receives, pod=pod, queue=queue)]
    if waiting is not None:
        out.append(_s(WAITING, waiting, pod=pod, queue=queue))
    return out


CASES: dict[str, dict[str, Any]] = dict(
    [
        _case(
            "CmqQueueGrowing",
            "warning",
            [
                _s(VISIBLE, "0+100x60", pod="q-cmq-0", queue="orders"),
                _s(VISIBLE, "5000x60", pod="q-cmq-0", queue="flat"),
                _s(VISIBLE, "0+10x60", pod="q-cmq-1", queue="tiny"),
                # the queue's group changes leader at minute 20: one source at a time, still growing
                _s(VISIBLE, "0+100x20 _x40", pod="q-cmq-0", queue="moved"),
                _s(VISIBLE, "_x20 2100+100x40", pod="q-cmq-1", queue="moved"),
            ],
            "20m",
            {"45m": [{"queue": "orders"}, {"queue": "moved"}]},
        ),
        _case(
            "CmqQueueOldestMessage",
            "warning",
            [
                _s(AGE, "0+60x30", pod="q-cmq-0", queue="stale"),
                _s(AGE, "5x30", pod="q-cmq-1", queue="fresh"),
            ],
            "13m",
            {"20m": [{"queue": "stale"}]},
        ),
        _case(
            "CmqQueueNoConsumers",
            "warning",
            [
                *_no_consumers("q-cmq-0", "stuck", "10x30", "0x30", "0x30"),
                *_no_consumers("q-cmq-0", "busy", "10x30", "0+50x30", "0x30"),
                *_no_consumers("q-cmq-1", "polled", "10x30", "0x30", "2x30"),
                *_no_consumers("q-cmq-1", "empty", "0x30", "0x30", None),
                *_no_consumers("q-cmq-2", "_other", "10x30", "0x30", None),
            ],
            "5m",
            {"25m": [{"queue": "stuck"}]},
        ),
        _case(
            "CmqDeadLetters",
            "warning",
            [
                _s(DEAD, "0x10 1+1x20", pod="q-cmq-0", queue="poison"),
                _s(DEAD, "3x30", pod="q-cmq-1", queue="calm"),
            ],
            "5m",
            {"15m": [{"queue": "poison"}]},
        ),
        _case(
            "CmqReplicaNeedsRepair",
            "warning",
            [
                _s(REPAIR, "1x30", pod="q-cmq-1", group="3"),
                _s(REPAIR, "1x3 _x27", pod="q-cmq-2", group="4"),
            ],
            "10m",
            {"20m": [{"pod": "q-cmq-1"}]},
        ),
        _case(
            "CmqStorageDamageFound",
            "info",
            [
                *(_s(m, v, pod="q-cmq-1") for m, v in ((REPAIRS, "0x10 1x20"), (FINDINGS, "0x30"))),
                *(_s(m, v, pod="q-cmq-2") for m, v in ((REPAIRS, "0x30"), (FINDINGS, "0x20 2x10"))),
                *(_s(m, v, pod="q-cmq-0") for m, v in ((REPAIRS, "4x30"), (FINDINGS, "1x30"))),
            ],
            "5m",
            {"15m": [{"pod": "q-cmq-1"}], "25m": [{"pod": "q-cmq-1"}, {"pod": "q-cmq-2"}]},
        ),
        _case(
            "CmqClockUnsafe",
            "warning",
            [
                _s("cmq_clock_unsafe", "0x5 1x20", pod="q-cmq-2"),
                _s("cmq_clock_unsafe", "0 1 0x24", pod="q-cmq-0"),
            ],
            "6m",
            {"15m": [{"pod": "q-cmq-2"}]},
        ),
        _case(
            "CmqDiskFailed",
            "critical",
            [
                _s("cmq_disk_failed", "0x5 1x10", pod="q-cmq-0", dir="1"),
                _s("cmq_disk_failed", "0x15", pod="q-cmq-0", dir="0"),
            ],
            "4m",
            {"10m": [{"pod": "q-cmq-0", "dir": "1"}]},
        ),
        _case(
            "CmqDiskFull",
            "critical",
            [
                _s("cmq_disk_full", "0x5 1x10", pod="q-cmq-1", dir="0"),
                _s("cmq_disk_full", "0 1 0x13", pod="q-cmq-2", dir="0"),
            ],
            "3m",
            {"10m": [{"pod": "q-cmq-1", "dir": "0"}]},
        ),
        _case(
            "CmqGroupWithoutLeader",
            "critical",
            [
                _s(LEADER, "1x5 0x10", pod="q-cmq-0", group="2"),
                _s(LEADER, "1x15", pod="q-cmq-0", group="1"),
            ],
            "5m",
            {"10m": [{"pod": "q-cmq-0", "group": "2"}]},
        ),
        _case(
            "CmqReplicationLag",
            "warning",
            [
                _s(LAG, "50000x20", pod="q-cmq-0", group="2", peer="3"),
                _s(LAG, "20x20", pod="q-cmq-0", group="2", peer="2"),
            ],
            "3m",
            {"10m": [{"pod": "q-cmq-0", "group": "2", "peer": "3"}]},
        ),
        _case(
            "CmqDiskFilling",
            "warning",
            [
                _s(metric, values, persistentvolumeclaim=f"data-q-cmq-{pod}")
                for pod, available in ((0, "10x20"), (1, "60x20"))
                for metric, values in ((AVAILABLE, available), (CAPACITY, "100x20"))
            ],
            "5m",
            {"15m": [{"persistentvolumeclaim": "data-q-cmq-0"}]},
        ),
        _case(
            "CmqSlowFsync",
            "warning",
            [
                *[
                    _s(FSYNC, v, pod="q-cmq-0", dir="0", le=le)
                    for le, v in (
                        ("0.01", "0x30"),
                        ("0.1", "0x30"),
                        ("1", "0+60x30"),
                        ("+Inf", "0+60x30"),
                    )
                ],
                *[
                    _s(FSYNC, "0+60x30", pod="q-cmq-1", dir="0", le=le)
                    for le in ("0.01", "0.1", "1", "+Inf")
                ],
            ],
            "8m",
            {"20m": [{"pod": "q-cmq-0", "dir": "0"}]},
        ),
    ]
)


@pytest.fixture(scope="module")
def promtool() -> Path:
    try:
        return ensure_promtool()
    except PromtoolUnavailable as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def chart_docs() -> list[dict[str, Any]]:
    return render(ALL_ON, api_versions=MONITORING_APIS)


def _rules(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The PrometheusRule's ``spec``: a plain Prometheus rule file's content."""
    spec: dict[str, Any] = one(docs, "PrometheusRule")["spec"]
    return spec


def _run(promtool: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(promtool), *args], capture_output=True, text=True, check=False, timeout=120
    )


def _test_rules(
    promtool: Path, tmp: Path, rules: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """``promtool test rules`` of `CASES` against ``rules`` with their annotations left out
    (promtool compares annotations too; the cases are about when and for what an alert fires,
    `test_rules_pass_promtool_check` checks that the annotation templates parse)."""
    bare = json.loads(json.dumps(rules))
    for group in bare["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp / "rules.yaml").write_text(yaml.safe_dump(bare, sort_keys=False))
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", **case} for case in CASES.values()],
    }
    (tmp / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    return _run(promtool, "test", "rules", str(tmp / "tests.yaml"))


def test_rules_pass_promtool_check(
    promtool: Path, chart_docs: list[dict[str, Any]], tmp_path: Path
) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(_rules(chart_docs), sort_keys=False))
    out = _run(promtool, "check", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(r"SUCCESS: \d+ rules found", out.stdout), out.stdout


def test_every_alert_fires_and_stays_silent_on_synthetic_series(
    promtool: Path, chart_docs: list[dict[str, Any]], tmp_path: Path
) -> None:
    alerts = {r["alert"] for g in _rules(chart_docs)["groups"] for r in g["rules"] if "alert" in r}
    assert alerts == set(CASES), "every alert of the chart has a case here, and only those"
    for name, case in CASES.items():
        checks = case["alert_rule_test"]
        assert any(c["exp_alerts"] for c in checks), f"{name}: no case where it fires"
        assert any(not c["exp_alerts"] for c in checks), f"{name}: no case where it is silent"
    out = _test_rules(promtool, tmp_path, _rules(chart_docs))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def _plant(rules: dict[str, Any], alert: str, old: str, new: str) -> dict[str, Any]:
    planted = json.loads(json.dumps(rules))
    for group in planted["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == alert:
                assert old in rule["expr"], (alert, rule["expr"])
                rule["expr"] = rule["expr"].replace(old, new)
                return planted
    raise AssertionError(f"no alert {alert}")


@pytest.mark.parametrize(
    "plant",
    [
        # a queue with a waiting consumer counted as consumer-less
        ("CmqQueueNoConsumers", "cmq_queue_consumers_waiting", "cmq_queue_consumers_absent"),
        # a steady deep queue counted as growing
        ("CmqQueueGrowing", "[15m])) > 0", "[15m])) >= 0"),
        # no depth floor: every small queue that grows pages
        ("CmqQueueGrowing", "> 1000", "> 0"),
        # a dead-letter count that stands still pages
        ("CmqDeadLetters", "> 0", ">= 0"),
        # a full disk never pages
        ("CmqDiskFull", "== 1", "> 1"),
    ],
)
def test_a_planted_rule_bug_fails_the_rule_tests(
    promtool: Path, chart_docs: list[dict[str, Any]], tmp_path: Path, plant: tuple[str, str, str]
) -> None:
    alert, old, new = plant
    out = _test_rules(promtool, tmp_path, _plant(_rules(chart_docs), alert, old, new))
    assert out.returncode != 0, f"the rule tests missed a planted bug in {alert}"
    assert alert in out.stdout + out.stderr


def _dashboard_queries(docs: list[dict[str, Any]]) -> list[str]:
    board = json.loads(one(docs, "ConfigMap", "-dashboard")["data"]["cmq.json"])
    panels = list(board["panels"])
    for p in board["panels"]:
        panels += p.get("panels", [])  # collapsed rows hold theirs
    return [t["expr"] for p in panels for t in p.get("targets", []) if "expr" in t]


def test_dashboard_queries_parse(
    promtool: Path, chart_docs: list[dict[str, Any]], tmp_path: Path
) -> None:
    queries = _dashboard_queries(chart_docs)
    assert any("cmq_queue_" in q for q in queries), "the dashboard has per-queue panels"
    concrete = {"$namespace": NS, "$queue": "orders", "$__rate_interval": "5m", "$pod": "q-cmq-0"}
    rules = []
    for i, query in enumerate(queries):
        expr = query
        for var, value in concrete.items():
            expr = expr.replace(var, value)
        assert "$" not in expr, f"an unknown dashboard variable in {query}"
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    path = tmp_path / "dashboard_rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = _run(promtool, "check", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr
