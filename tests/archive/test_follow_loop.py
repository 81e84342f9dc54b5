"""`cmq.archive.follow.Follower`, in process with scripted batches (no Spark, no cluster): the
lines it prints, its waits, retries and stops."""

from __future__ import annotations

import json
import threading

from cmq.archive.errors import (
    ApiError,
    ArchiveError,
    ClusterUnavailable,
    NewerManifest,
    WriteFailed,
)
from cmq.archive.follow import Follower
from cmq.archive.job import Summary
from cmq.archive.pacing import Backoff, Policy

POLICY = Policy(4, idle=Backoff(1.0, 8.0, jitter=0.0), failure=Backoff(2.0, 16.0, jitter=0.0))


class Script:
    """Batches that return or raise what the script says; records the waits asked for."""

    def __init__(self, steps: list[Summary | ArchiveError], stop: threading.Event) -> None:
        self.steps = list(steps)
        self.stop = stop
        self.waits: list[float] = []
        self.calls = 0

    def batch(self) -> Summary:
        self.calls += 1
        step = self.steps.pop(0)
        if not self.steps:
            self.stop.set()  # the script is done: as if SIGTERM arrived during this batch
        if isinstance(step, ArchiveError):
            raise step
        return step


class RecordingEvent(threading.Event):
    """A stop event whose waits return at once, recording how long was asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.asked.append(timeout or 0.0)
        return self.is_set()


def summary(segments: int, rows: int = 10, recovered: int = 0) -> Summary:
    return Summary("b-x", segments, rows, 1000, 2000, 1.5, recovered=recovered)


def follower(
    steps: list[Summary | ArchiveError], as_json: bool = True
) -> tuple[Follower, Script, RecordingEvent, list[str], list[str]]:
    stop = RecordingEvent()
    script = Script(steps, stop)
    out: list[str] = []
    err: list[str] = []
    f = Follower(script.batch, POLICY, stop, as_json, out.append, err.append, lambda: 0.5)
    return f, script, stop, out, err


def test_work_idle_and_failures_give_one_line_each_and_the_right_waits() -> None:
    steps: list[Summary | ArchiveError] = [
        summary(4),  # full: next at once
        summary(2),  # partial: the first idle step
        summary(0),
        summary(0),
        ClusterUnavailable("no URL answered"),
        WriteFailed("boom"),
        summary(0, rows=0),  # the failure streak resets; the idle streak went on
        summary(1),
        summary(0),  # the stop is requested during this one
    ]
    f, script, stop, out, err = follower(steps)
    assert f.run() == 0
    assert script.calls == 9
    # The last wait ends at once: the stop was requested during the batch before it.
    assert stop.asked == [1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 1.0, 1.0]
    lines = [json.loads(x) for x in out]
    assert len(lines) == 9
    assert [x["ok"] for x in lines] == [True] * 4 + [False, False] + [True] * 3
    assert [x["next_in"] for x in lines] == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 1.0, 1.0]
    assert lines[0]["segments"] == 4 and lines[0]["batch_id"] == "b-x"
    assert (lines[4]["code"], lines[4]["message"]) == ("cluster_unavailable", "no URL answered")
    assert err[:2] == ["error: cluster_unavailable: no URL answered", "error: write_failed: boom"]
    assert err[-1] == "stopped after 9 batches"


def test_a_permanent_failure_ends_the_loop_with_status_1() -> None:
    newer = NewerManifest("_manifests/b.json: version 9, this release reads 1")
    f, script, _, out, err = follower([summary(0), newer, summary(1)])
    assert f.run() == 1
    assert script.calls == 2  # nothing after it
    assert json.loads(out[-1]) == {
        "ok": False,
        "code": "manifest_newer",
        "message": "_manifests/b.json: version 9, this release reads 1",
        "next_in": None,
    }
    assert err == ["error: manifest_newer: _manifests/b.json: version 9, this release reads 1"]


def test_an_api_refusal_of_the_key_is_permanent_a_missing_queue_is_not() -> None:
    f, script, _, _, _ = follower([ApiError(404, "queue_not_found", "q"), summary(0)])
    assert f.run() == 0 and script.calls == 2
    f, script, _, _, _ = follower([ApiError(403, "AccessDenied", "no grant"), summary(0)])
    assert f.run() == 1 and script.calls == 1


def test_a_stop_during_a_wait_ends_it_at_once() -> None:
    stop = threading.Event()
    calls = []

    def batch() -> Summary:
        calls.append(1)
        threading.Timer(0.2, stop.set).start()
        return summary(0)

    # A long first wait: the stop ends it long before.
    policy = Policy(4, idle=Backoff(30.0, 30.0, jitter=0.0))
    out: list[str] = []
    f = Follower(batch, policy, stop, False, out.append, lambda s: None)
    import time

    start = time.monotonic()
    assert f.run() == 0
    assert time.monotonic() - start < 5 and calls == [1]
    assert out[0].endswith("next batch in 30.0 s")


def test_the_text_line_is_one_line_with_what_follows() -> None:
    f, _, _, out, _ = follower(
        [
            Summary("b-1", 4, 100, 2_000_000, 3_000_000, 2.0, recovered=1, spark_seconds=0.5),
            ClusterUnavailable("x"),
        ],
        as_json=False,
    )
    assert f.run() == 0
    assert out[0] == (
        "batch b-1: 4 segments, 100 rows, 2.00 MB Parquet (3.00 MB of segments) in 2.0 s "
        "(50 rows/s); recovered 1; 0.5 s starting Spark; next batch at once"
    )
    assert out[1] == "batch failed: cluster_unavailable; next batch in 2.0 s"
