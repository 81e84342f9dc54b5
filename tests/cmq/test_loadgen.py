"""``cmq bench``: its pure parts on their own, then one run against three real node processes."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys

import pytest

from cmq.cli.main import main as cli_main
from cmq.loadgen import (
    HEADER_LEN,
    BenchConfig,
    BenchReport,
    LatencyHistogram,
    LatencySummary,
    ProgressSample,
    SendSchedule,
    SeqTracker,
    Stamp,
    decode_body,
    encode_body,
    format_progress,
    format_report,
    new_run_tag,
    report_to_json,
)
from tests.cmq.cluster import CmqCluster, unique_queue

pytestmark = pytest.mark.slow


# -- bodies ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", [HEADER_LEN, HEADER_LEN + 1, 1024, 65_536])
def test_body_round_trip_at_exact_size(size: int) -> None:
    stamp = Stamp(new_run_tag(), 0xFFFF, 2**48 - 1, 123_456_789)
    body = encode_body(stamp, size)
    assert len(body.encode()) == size and body.isascii() and body.isprintable()
    assert decode_body(body) == stamp


def test_body_encode_refuses_what_the_header_cannot_hold() -> None:
    tag = "0123abcd"
    with pytest.raises(ValueError):
        encode_body(Stamp(tag, 0, 0, 0), HEADER_LEN - 1)
    for bad in (
        Stamp("0123ABCD", 0, 0, 0),
        Stamp("0123abc", 0, 0, 0),
        Stamp(tag, 0x10000, 0, 0),
        Stamp(tag, 0, 2**48, 0),
        Stamp(tag, 0, 0, -1),
    ):
        with pytest.raises(ValueError):
            encode_body(bad, 100)


def test_decode_body_rejects_other_bodies() -> None:
    good = encode_body(Stamp("0123abcd", 7, 42, 99), 64)
    assert decode_body(good) == Stamp("0123abcd", 7, 42, 99)
    for other in (
        "",
        "hello",
        good[: HEADER_LEN - 1],
        "x" + good[1:],
        good.replace("0123abcd", "0123abcz"),
        good[: HEADER_LEN - 1] + "x" + good[HEADER_LEN:],  # the closing space
        good.replace(" 0007 ", " 07 x "),
    ):
        assert decode_body(other) is None, other


# -- histogram -------------------------------------------------------------------------------------
def _reference(sorted_values: list[int], q: float) -> int:
    return sorted_values[max(1, math.ceil(q / 100 * len(sorted_values))) - 1]


@pytest.mark.parametrize("seed", range(5))
def test_histogram_percentiles_within_bucket_error_of_a_sorted_list(seed: int) -> None:
    rng = random.Random(seed)
    h = LatencyHistogram()
    values = [int(rng.lognormvariate(8, 1.5)) for _ in range(20_000)]
    values += [rng.randrange(0, 200) for _ in range(1_000)]  # the exact range too
    for v in values:
        h.record(v)
    values.sort()
    bound = 2.0**-h.sub_bits
    for q in (0, 0.1, 1, 10, 50, 90, 99, 99.9, 99.99, 100):
        ref = _reference(values, q)
        assert abs(h.percentile(q) - ref) <= ref * bound, (q, h.percentile(q), ref)
    assert (h.count, h.min, h.max) == (len(values), values[0], values[-1])
    assert h.mean == pytest.approx(sum(values) / len(values))


def test_histogram_small_values_are_exact_and_counts_weigh() -> None:
    h = LatencyHistogram(sub_bits=3)
    h.record(5, n=3)
    h.record(9)
    h.record(0, n=0)  # nothing
    assert h.count == 4
    assert [h.percentile(q) for q in (25, 75, 100)] == [5, 5, 9]
    assert LatencyHistogram().percentile(50) == 0


def test_histogram_clamps_and_merges_and_is_bounded() -> None:
    h = LatencyHistogram(max_value=1_000_000)
    h.record(-5)
    h.record(10**12)
    assert (h.min, h.max) == (0, 1_000_000)
    buckets = len(h._counts)
    assert buckets < 1_000  # fixed, whatever is recorded
    a, b, both = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
    rng = random.Random(1)
    for i in range(5_000):
        v = rng.randrange(1, 10**7)
        (a if i % 2 else b).record(v)
        both.record(v)
    a.merge(b)
    assert [a.percentile(q) for q in (1, 50, 99.9)] == [both.percentile(q) for q in (1, 50, 99.9)]
    assert (a.count, a.min, a.max) == (both.count, both.min, both.max)
    with pytest.raises(ValueError):
        a.merge(LatencyHistogram(sub_bits=4))
    with pytest.raises(ValueError):
        a.percentile(101)


# -- open-loop schedule ----------------------------------------------------------------------------
def test_schedule_spaces_requests_at_the_rate_whatever_the_batch() -> None:
    sched = SendSchedule(rate=100, start=10.0)
    dues = [sched.claim(n) for n in (1, 1, 10, 1)]
    # Each request is due once the messages before it are: 0, 1, 2 then 12 messages in.
    assert dues == pytest.approx([10.0, 10.01, 10.02, 10.12])


def test_schedule_does_not_forgive_a_late_sender() -> None:
    # A sender that was busy for a second claims due times in the past: they are not moved,
    # so latency measured from them includes the wait (no coordinated omission).
    sched = SendSchedule(rate=10, start=0.0)
    assert sched.claim(1) == 0.0
    late = [sched.claim(1) for _ in range(3)]
    assert late == pytest.approx([0.1, 0.2, 0.3])
    sched.started(late[0], now=1.1)
    sched.started(late[1], now=1.0)
    assert sched.max_lag == pytest.approx(1.0)
    with pytest.raises(ValueError):
        SendSchedule(rate=0, start=0.0)


# -- sequence tracking -----------------------------------------------------------------------------
def test_seq_tracker_counts_settled_duplicates_missing_and_foreign() -> None:
    t = SeqTracker(producers=2)
    assert t.allocate(0, 3) == 0 and t.allocate(0, 2) == 3 and t.allocate(1, 1) == 0
    t.confirm(0, 0, 3)
    assert t.deliver(0, 1) is True  # confirmed first
    assert t.deliver(1, 0) is True  # received before its confirmation
    t.confirm(1, 0, 1)
    assert t.deliver(0, 1) is False  # a duplicate
    assert t.deliver(0, 4) is True  # received, never confirmed
    assert t.deliver(0, 5) is None and t.deliver(2, 0) is None and t.deliver(1, -1) is None
    t.confirm(0, 0, 3)  # confirming again counts nothing
    assert (t.confirmed, t.received, t.duplicates, t.settled) == (4, 3, 1, 2)
    assert t.missing == 2  # (0, 0) and (0, 2)
    assert t.unconfirmed_received == 1  # (0, 4)


def test_seq_tracker_grows_past_its_first_chunk() -> None:
    t = SeqTracker(producers=1)
    first = t.allocate(0, 100_000)
    t.confirm(0, first, 100_000)
    for seq in range(0, 100_000, 7):
        t.deliver(0, seq)
    assert t.missing == 100_000 - len(range(0, 100_000, 7))


# -- config, report and progress -------------------------------------------------------------------
def test_config_validation_names_the_setting() -> None:
    BenchConfig().validate()
    for bad, word in (
        (BenchConfig(size=HEADER_LEN - 1), "--size"),
        (BenchConfig(batch=101), "--batch"),
        (BenchConfig(batch=100, size=1_048_576), "--batch"),
        (BenchConfig(recv_batch=0), "--recv-batch"),
        (BenchConfig(producers=0, consumers=0), "producer or consumer"),
        (BenchConfig(seconds=None), "--messages"),
        (BenchConfig(rate=-1), "--rate"),
        (BenchConfig(urls=()), "--url"),
    ):
        with pytest.raises(ValueError, match=word):
            bad.validate()


def test_cli_registers_bench_with_its_flags(capsys: pytest.CaptureFixture[str]) -> None:
    # Bad settings are refused before any connection is made (exit status 2).
    assert cli_main(["bench", "--size", "10", "--url", "http://127.0.0.1:1"]) == 2
    assert "--size" in capsys.readouterr().err
    assert cli_main(["bench", "--batch", "0", "--messages", "5"]) == 2


def test_bench_leader_direct_is_the_default_and_can_be_turned_off() -> None:
    from cmq.cli.bench import config_from_args
    from cmq.cli.main import build_parser

    on = config_from_args(build_parser().parse_args(["bench"]))
    off = config_from_args(build_parser().parse_args(["bench", "--no-leader-direct"]))
    assert on.leader_direct is True and off.leader_direct is False
    assert report_to_json(_report(config=off))["config"]["leader_direct"] is False
    assert "no leader-direct" in format_report(_report(config=off))


def _report(**over: object) -> BenchReport:
    h = LatencyHistogram()
    for v in range(1, 1001):
        h.record(v * 1000)
    fields: dict[str, object] = {
        "queue": "bench-x",
        "created_queue": True,
        "deleted_queue": True,
        "config": BenchConfig(size=1024 * 1024 // 1024),
        "produce_seconds": 2.0,
        "consume_seconds": 4.0,
        "drain_seconds": 0.5,
        "sent": 2000,
        "confirmed": 2000,
        "failed": 0,
        "resent": 0,
        "received": 2000,
        "deliveries": 2001,
        "acked": 2000,
        "duplicates": 1,
        "missing": 0,
        "drain_result": "complete",
        "left_in_queue": None,
        "unconfirmed_received": 0,
        "foreign": 0,
        "errors": {"503 Overloaded": 2},
        "confirm_latency": LatencySummary.of(h),
        "e2e_latency": LatencySummary.of(LatencyHistogram()),
    }
    fields.update(over)
    return BenchReport(**fields)  # type: ignore[arg-type]


def test_report_text_and_json() -> None:
    r = _report()
    text = format_report(r)
    lines = dict(line.split("  ", 1) for line in text.splitlines())
    assert lines["confirmed"].split() == ["2,000", "msgs", "1,000", "msgs/s", "0.98", "MiB/s"]
    assert "p50 " in text and "p99.9 " in text
    assert lines["e2e latency ms"].strip() == "-"
    assert "503 Overloaded 2" in text and text.endswith("ok")
    j = report_to_json(r)
    json.dumps(j)  # plain JSON types only
    assert j["confirmed_msgs_per_s"] == 1000.0 and j["acked_msgs_per_s"] == 500.0
    assert set(j["confirm_latency_ms"]) == {"count", "p50", "p90", "p99", "p99.9", "max", "mean"}
    assert j["confirm_latency_ms"]["p50"] == pytest.approx(500, rel=1 / 64)
    assert j["confirm_latency_ms"]["p99.9"] == pytest.approx(999, rel=1 / 64)
    assert j["ok"] is True


def test_verdict() -> None:
    lost = _report(missing=3, drain_result="empty", left_in_queue={"visible": 0, "in_flight": 0})
    assert not lost.ok
    assert "LOST" in format_report(lost)
    assert "visible 0, in flight 0, delayed 0" in format_report(lost)
    # Messages still coming when the drain timed out: reported, not judged.
    assert _report(missing=3, drain_result="timeout").ok
    text = format_report(_report(missing=3, drain_result="timeout"))
    assert "not conclusive" in text and text.endswith(
        "ok (loss not checked: the drain did not finish)"
    )
    assert not _report(confirmed=0).ok
    assert _report(missing=None, drain_result="skipped").ok  # not drained: nothing to judge
    assert "not checked" in format_report(_report(missing=None))


def test_progress_line_shows_rates_over_the_interval() -> None:
    a = ProgressSample(at=1.0, sent=100, confirmed=90, consumed=50, errors=0)
    b = ProgressSample(at=3.0, sent=2100, confirmed=2090, consumed=1050, errors=4, phase="drain")
    line = format_progress(a, b)
    assert "3.0s drain" in line
    assert "sent     1,000/s" in line and "consumed       500/s" in line
    assert line.endswith("errors 4")
    assert "sent         0/s" in format_progress(b, b)


# -- end to end ------------------------------------------------------------------------------------
def _bench(cluster: CmqCluster, *args: str) -> tuple[int, dict[str, object], str]:
    urls = ",".join(cluster.urls)
    p = subprocess.run(
        [sys.executable, "-m", "cmq", "bench", "--url", urls, "--json", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert p.stdout.strip().startswith("{"), p.stderr
    return p.returncode, json.loads(p.stdout), p.stderr


def test_bench_against_a_real_cluster(cmq_cluster: CmqCluster) -> None:
    cluster = cmq_cluster
    rc, r, err = _bench(cluster, "--seconds", "3", "--producers", "2", "--window", "8")
    assert rc == 0, (r, err)
    assert r["confirmed"] > 0 and r["missing"] == 0 and r["duplicates"] == 0  # type: ignore[operator]
    assert r["acked"] == r["received"] == r["confirmed"] and r["drain_result"] == "complete"
    assert r["deleted_queue"] is True and r["ok"] is True
    assert r["confirm_latency_ms"]["count"] == r["confirmed"]  # type: ignore[index]
    assert r["e2e_latency_ms"]["p50"] > 0  # type: ignore[index,operator]
    assert "run" in err and "confirmed" in err  # progress lines on stderr

    rc, r, err = _bench(
        cluster, "--messages", "500", "--batch", "10", "--queue", unique_queue("exact500")
    )
    assert rc == 0, (r, err)
    assert r["sent"] == 500 and r["confirmed"] == 500 and r["received"] == 500
    assert r["missing"] == 0 and r["duplicates"] == 0 and r["failed"] == 0


def test_bench_over_the_streaming_protocol(cmq_cluster: CmqCluster) -> None:
    rc, r, err = _bench(
        cmq_cluster,
        "--protocol",
        "stream",
        "--messages",
        "2000",
        "--producers",
        "2",
        "--window",
        "32",
        "--consumers",
        "2",
    )
    assert rc == 0, (r, err)
    assert r["config"]["protocol"] == "stream"  # type: ignore[index]
    assert r["sent"] == r["confirmed"] == r["received"] == r["acked"] == 2000
    assert r["missing"] == 0 and r["duplicates"] == 0 and r["failed"] == 0
    assert r["drain_result"] == "complete" and r["errors"] == {}
