"""The run summaries' text and the shared exit codes (`cmq.archive.summary`): pure, no Spark."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest

from cmq.archive.compact import CompactSummary
from cmq.archive.errors import InvalidArgument, WriteFailed
from cmq.archive.job import Summary
from cmq.archive.summary import LazySpark, finish, render


def test_render_keeps_the_headline_and_only_the_notes_that_say_something() -> None:
    assert render("head") == "head"
    assert render("head", "", "a", "", "b") == "head\na\nb"


def test_the_archive_summary_reads_as_before() -> None:
    bare = Summary("b-1", 2, 1000, 2_000_000, 3_000_000, 2.0)
    assert bare.render() == (
        "batch b-1: 2 segments, 1000 rows, 2.00 MB Parquet (3.00 MB of segments) "
        "in 2.0 s (500 rows/s)"
    )
    full = Summary("b-1", 0, 0, 0, 0, 0.0, 3, ("b-0", "b-00"), 4, 1.5)
    assert full.render().splitlines() == [
        "batch b-1: 0 segments, 0 rows, 0.00 MB Parquet (0.00 MB of segments) in 0.0 s (0 rows/s)",
        "recovered: 3 segments of earlier batches marked archived",
        "removed the output of crashed batches: b-0, b-00",
        "skipped: 4 segments claimed by other batches",
        "of which 1.5 s starting Spark",
    ]


def test_the_compaction_summary_reads_as_before() -> None:
    s = CompactSummary("c-1", 1, 3, 1, 3_000_000, 2_500_000, 30, (2_500_000,), 0.5, 2, ("x",))
    assert s.render().splitlines() == [
        "compaction c-1: 1 queue-days, 3 files (3.00 MB) -> 1 files (2.50 MB), 30 rows in 0.5 s",
        "sizes (MB): 2.50",
        "removed 2 files retired by earlier compactions",
        "removed the output of crashed compactions: x",
    ]
    assert CompactSummary("c-1", 0, 0, 0, 0, 0, 0, (), 0.0).render().count("\n") == 0


@dataclass
class _Session:
    stopped: int = 0

    def stop(self) -> None:
        self.stopped += 1


def test_finish_prints_the_summary_and_stops_a_started_session(
    capsys: pytest.CaptureFixture[str],
) -> None:
    session = _Session()
    spark = LazySpark(lambda: session)  # type: ignore[arg-type,return-value]
    s = Summary("b-1", 1, 2, 3, 4, 1.0)

    def run() -> Summary:
        assert spark() is spark()  # type: ignore[comparison-overlap]
        return s

    assert finish(run, spark, as_json=True) == 0
    assert json.loads(capsys.readouterr().out)["batch_id"] == "b-1"
    assert session.stopped == 1
    assert finish(lambda: s, LazySpark(lambda: session), as_json=False) == 0  # type: ignore[arg-type,return-value]
    assert capsys.readouterr().out == s.render() + "\n"
    assert session.stopped == 1  # never started: never stopped


def test_finish_exits_1_on_an_error_and_invalid_exit_on_a_bad_argument(
    capsys: pytest.CaptureFixture[str],
) -> None:
    session = _Session()

    def failing(e: Exception) -> Summary:
        spark()
        raise e

    spark = LazySpark(lambda: session)  # type: ignore[arg-type,return-value]
    assert finish(lambda: failing(WriteFailed("boom")), spark, False) == 1
    assert capsys.readouterr().err == "error: write_failed: boom\n"
    assert session.stopped == 1
    spark = LazySpark(lambda: session)  # type: ignore[arg-type,return-value]
    assert finish(lambda: failing(InvalidArgument("no")), spark, False) == 1
    assert finish(lambda: failing(InvalidArgument("no")), spark, False, invalid_exit=2) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith("error: invalid_argument: no")
