"""The SLO gates and load shapes as pure functions (Locust is not imported: it monkey-patches)."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from loadtest import shapes, slo
from loadtest.shapes import Stage

GOOD = slo.Observed(
    requests=1000, failures=5, send_count=400, send_p99_ms=300.0, e2e_count=4000, e2e_p99_ms=500.0
)


def test_locust_is_not_imported_by_the_pure_modules() -> None:
    assert "locust" not in sys.modules
    assert "gevent" not in sys.modules


def test_a_good_run_passes_the_defaults() -> None:
    assert slo.evaluate(slo.Slo(), GOOD) == []


def test_thresholds_are_inclusive() -> None:
    edge = slo.Slo(max_failure_ratio=0.005, send_p99_ms=300.0, e2e_p99_ms=500.0)
    assert slo.evaluate(edge, GOOD) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"failures": 11}, "failure ratio 0.0110 (11/1000) > 0.01"),
        ({"send_p99_ms": 1000.5}, "send p99 1000.5 ms > 1000 ms"),
        ({"e2e_p99_ms": 2100.0}, "e2e p99 2100 ms > 2000 ms"),
        ({"requests": 0, "failures": 0}, "failure ratio: no HTTP request was made"),
        ({"send_count": 0, "send_p99_ms": None}, "send p99: no send request was made"),
        ({"e2e_count": 0, "e2e_p99_ms": None}, "e2e p99: no message made it"),
    ],
)
def test_each_gate_fails_on_its_own(change: dict[str, object], expected: str) -> None:
    observed = dataclasses.replace(GOOD, **change)
    breaches = slo.evaluate(slo.Slo(), observed)
    assert len(breaches) == 1
    assert breaches[0].startswith(expected)


def test_an_impossible_send_slo_fails() -> None:
    strict = slo.slo_from_env({"SLO_SEND_P99_MS": "0.001"})
    assert strict.send_p99_ms == 0.001
    assert slo.evaluate(strict, GOOD) == ["send p99 300 ms > 0.001 ms"]
    verdict = slo.report(strict, GOOD, slo.evaluate(strict, GOOD))
    assert verdict["passed"] is False
    assert verdict["observed"]["send_p99_ms"] == 300.0


def test_slo_from_env_defaults_and_overrides() -> None:
    assert slo.slo_from_env({}) == slo.Slo(
        max_failure_ratio=0.01, send_p99_ms=1000, e2e_p99_ms=2000
    )
    env = {"SLO_MAX_FAILURE_RATIO": "0", "SLO_SEND_P99_MS": " 250 ", "SLO_E2E_P99_MS": ""}
    assert slo.slo_from_env(env) == slo.Slo(max_failure_ratio=0, send_p99_ms=250, e2e_p99_ms=2000)


@pytest.mark.parametrize("raw", ["fast", "-1", "nan"])
def test_slo_from_env_refuses_bad_values(raw: str) -> None:
    with pytest.raises(ValueError, match="SLO_E2E_P99_MS"):
        slo.slo_from_env({"SLO_E2E_P99_MS": raw})


def test_steps_plan_is_bounded() -> None:
    plan = shapes.plan_from_env({"LOADTEST_SECONDS": "60"})
    assert plan == [Stage(20.0, 10, 10.0), Stage(40.0, 20, 10.0), Stage(60.0, 40, 10.0)]
    assert shapes.target(plan, 0) == (10, 10.0)
    assert shapes.target(plan, 20.0) == (20, 10.0)
    assert shapes.target(plan, 59.9) == (40, 10.0)
    assert shapes.target(plan, 60.0) is None


def test_soak_plan_and_none() -> None:
    env = {"LOADTEST_SHAPE": "soak", "LOADTEST_SECONDS": "1800", "LOADTEST_USERS": "8"}
    plan = shapes.plan_from_env(env)
    assert plan == [Stage(1800.0, 8, 10.0)]
    assert shapes.target(plan, 1799) == (8, 10.0)
    assert shapes.target(plan, 1800) is None
    assert shapes.plan_from_env({"LOADTEST_SHAPE": "none"}) is None


@pytest.mark.parametrize(
    "env", [{"LOADTEST_SHAPE": "ramp"}, {"LOADTEST_STEPS": "10,0"}, {"LOADTEST_SECONDS": "0"}]
)
def test_bad_plans_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        shapes.plan_from_env(env)


def test_latencies_are_bucketed_like_locust() -> None:
    assert [slo.bucket_ms(v) for v in (0.4, 12.6, 99.4, 123.0, 999.0, 1234.0, 56789.0)] == [
        0,
        13,
        99,
        120,
        1000,
        1200,
        57000,
    ]


def test_series_percentiles_and_stage_table() -> None:
    series = slo.Series()
    assert series.percentile(0.99) is None
    for ms in range(1, 101):  # 1..100 ms
        series.add(float(ms), failed=ms == 100)
    assert (series.percentile(0.5), series.percentile(0.99), series.percentile(1.0)) == (
        50,
        99,
        100,
    )
    assert series.failures == 1

    stage = slo.Stage(users=10, first_s=100.0, last_s=110.0, send=series, http=series)
    row = stage.summary(batch=10)
    assert row["send_per_s"] == 10.0
    assert row["messages_per_s"] == 99
    assert row["e2e_p99_ms"] is None
    table = slo.stage_table([row]).splitlines()
    assert table[2] == "| 10 | 10 | 99 | 50 / 99 | - / - | 1/100 |"
