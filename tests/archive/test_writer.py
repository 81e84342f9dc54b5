"""Parquet written by the Python workers (`cmq.archive.writer`): in process against the test
double (a task called as Spark would call it), a re-run or a failed attempt leaves exactly one
file per task and day, the footer check catches what a task did not write; with Spark: the
files a Spark writer and the pyarrow writer produce read back alike (pyarrow and Spark), and the
job writes with pyarrow on a local root."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cmq.archive.errors import InvalidArgument
from cmq.archive.job import ArchiveJob, JobConfig
from cmq.archive.readback import FileRows
from cmq.archive.records import SegmentTask, VerifiedSegment, plan_tasks, read_segments
from cmq.archive.remote import ClusterClient
from cmq.archive.source import encode_tasks
from cmq.archive.storage import LocalStorage
from cmq.archive.writer import (
    FILE_SCHEMA,
    SPARK_ROW_METADATA,
    WriteSpec,
    days,
    decode_stats,
    footer_check,
    part_name,
    remove_temporaries,
    segments_per_task,
    write_group,
)
from tests.archive.conftest import NEEDS_JAVA
from tests.archive.fake_cluster import FakeCluster
from tests.archive.output import check_exactly_once, manifests

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BATCH = "b-test"
STAGING = "_staging/b-test"


def tasks_of(fake: FakeCluster, queue: str = "q") -> list[SegmentTask]:
    return plan_tasks(ClusterClient(fake.urls, 5), [queue])


def files_under(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_a_task_writes_one_file_a_day_and_reports_what_it_wrote(
    fake: FakeCluster, tmp_path: Path
) -> None:
    fake.add_segments("q", [50, 70, 3])  # the segments straddle UTC days
    tasks = tasks_of(fake)
    spec = WriteSpec(str(tmp_path), STAGING, BATCH, timeout=5)
    stats = decode_stats(spec(encode_tasks(tasks)))
    expected = fake.records("q")
    want_days = sorted(
        {
            dt.datetime.fromtimestamp(r["sent_at_ms"] / 1000, dt.UTC).date().isoformat()
            for r in expected
        }
    )
    assert len(want_days) >= 2
    written = files_under(tmp_path / STAGING)
    assert sorted(written) == [
        f"queue=q/date={d}/batch_id={BATCH}/{part_name(tasks[0].first_seq)}" for d in want_days
    ]
    assert sum(f.rows for f in stats) == len(expected) == 123
    assert {f.rel for f in stats} == set(written)
    last = {t.first_seq: t.last_seq for t in tasks}
    for f in stats:
        path = tmp_path / STAGING / f.rel
        table = pq.read_table(path)
        assert table.schema == FILE_SCHEMA
        assert f.size == path.stat().st_size
        assert f.segment is not None
        mine = [s for s in table.column("seq").to_pylist() if f.segment <= s <= last[f.segment]]
        assert f.rows == f.distinct == len(mine) and (f.min_seq, f.max_seq) == (
            min(mine),
            max(mine),
        )
    by_segment = {
        t.first_seq: sum(f.rows for f in stats if f.segment == t.first_seq) for t in tasks
    }
    assert by_segment == {t.first_seq: t.count for t in tasks}


def test_a_rerun_replaces_the_files_and_a_failed_attempt_leaves_none(
    fake: FakeCluster, tmp_path: Path
) -> None:
    """A retried or speculative attempt of a task writes the same names: one file per task and
    day, byte-identical; an attempt that fails part-way publishes nothing, and what a killed
    one left (a hidden temporary file) is removed by the driver."""
    fake.add_segments("q", [40, 40])
    tasks = tasks_of(fake)
    spec = WriteSpec(str(tmp_path), STAGING, BATCH, timeout=5)
    first = decode_stats(spec(encode_tasks(tasks)))
    before = files_under(tmp_path)
    again = decode_stats(spec(encode_tasks(tasks)))
    assert again == first and files_under(tmp_path) == before

    storage = LocalStorage(str(tmp_path / "other"))

    def dies_after_one() -> Iterator[VerifiedSegment]:
        segments = read_segments(tasks, 5)
        yield next(segments)
        raise RuntimeError("the executor went away")

    with pytest.raises(RuntimeError):
        write_group(storage, STAGING, BATCH, dies_after_one())
    assert files_under(tmp_path / "other") == {}  # nothing published, no temporary left

    # A killed attempt's temporary file sits beside the files: removed, the rest kept.
    rel = first[0].rel
    directory = f"{STAGING}/{rel.rsplit('/', 1)[0]}"
    left = tmp_path / directory / f".{part_name(0)}-0123456789ab.tmp"
    left.write_bytes(b"half a file")
    root = LocalStorage(str(tmp_path))
    assert remove_temporaries(root, [directory]) == [f"{directory}/{left.name}"]
    assert files_under(tmp_path) == before


def test_the_footer_check_catches_what_no_task_wrote(fake: FakeCluster, tmp_path: Path) -> None:
    fake.add_segments("q", [30, 30])
    tasks = tasks_of(fake)
    storage = LocalStorage(str(tmp_path))
    stats = write_group(storage, "", BATCH, read_segments(tasks, 5))
    listed = {f.rel: f.size for f in stats}
    assert footer_check(storage, stats, listed) == []
    extra = dict(listed, **{"queue=q/date=2026-01-01/batch_id=b-test/part-x.parquet": 10})
    assert "a file no task reported" in footer_check(storage, stats, extra)[0]
    assert "not in the output" in footer_check(storage, stats, {})[0]
    f = stats[0]
    more = [
        FileRows(
            f.rel,
            f.queue,
            f.date,
            f.segment,
            f.rows + 1,
            f.distinct + 1,
            f.min_seq,
            f.max_seq,
            f.size,
        ),
        *stats[1:],
    ]
    assert "the footer counts" in footer_check(storage, more, listed)[0]
    wider = [
        FileRows(
            f.rel, f.queue, f.date, f.segment, f.rows, f.distinct, f.min_seq - 1, f.max_seq, f.size
        ),
        *stats[1:],
    ]
    assert "seqs" in footer_check(storage, wider, listed)[0]
    resized = dict(listed, **{f.rel: f.size + 1})
    assert "bytes, the task reported" in footer_check(storage, stats, resized)[0]


def test_rows_are_split_by_their_utc_day() -> None:
    ms = [-1, 0, 86_399_999, 86_400_000, 1_790_000_000_000]
    table = pa.table(
        {
            "seq": pa.array(range(5), pa.int64()),
            "sent_at": pa.array([m * 1000 for m in ms], pa.timestamp("us", tz="UTC")),
        }
    )
    got = {d: t.column("seq").to_pylist() for d, t in days(table).items()}
    assert got == {
        "1969-12-31": [0],
        "1970-01-01": [1, 2],
        "1970-01-02": [3],
        "2026-09-21": [4],
    }
    assert days(table.slice(1, 2)).keys() == {"1970-01-01"}
    assert days(table.slice(0, 0)) == {}


def test_a_batch_is_spread_over_the_slots_in_one_wave() -> None:
    """As few tasks as keep every slot busy: ``ceil(segments / slots)`` a task, at most
    ``most``; never 0 (an empty batch, a nonsense slot count)."""
    assert segments_per_task(42, 2) == 21  # two tasks, not six of 8 in three waves
    assert segments_per_task(43, 2) == 22
    assert segments_per_task(1, 2) == 1 and segments_per_task(2, 2) == 1
    assert segments_per_task(3, 4) == 1
    assert segments_per_task(1000, 2) == 64 and segments_per_task(1000, 2, most=10) == 10
    assert segments_per_task(0, 2) == 1 and segments_per_task(5, 0) == 5


def test_a_bad_writer_is_refused_before_anything_runs(fake: FakeCluster, tmp_path: Path) -> None:
    cfg = JobConfig(urls=tuple(fake.urls), out=str(tmp_path), writer="arrow")

    def no_spark() -> SparkSession:
        raise AssertionError("Spark started")

    with pytest.raises(InvalidArgument, match="writer 'arrow'"):
        ArchiveJob(no_spark, cfg)


def test_a_late_attempts_staging_beside_a_committed_batch_is_removed(
    fake: FakeCluster, tmp_path: Path
) -> None:
    """A task attempt that outlived its batch's commit may recreate ``_staging/<batch>``: the
    next run removes it (never the committed files), without asking about claims."""
    late = tmp_path / "_staging" / BATCH / "queue=q" / "date=2026-01-01" / f"batch_id={BATCH}"
    late.mkdir(parents=True)
    (late / part_name(0)).write_bytes(b"late")
    kept = tmp_path / "queue=q" / "date=2026-01-01" / f"batch_id={BATCH}" / part_name(0)
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"committed")

    def no_spark() -> SparkSession:
        raise AssertionError("Spark started")

    job = ArchiveJob(no_spark, JobConfig(urls=tuple(fake.urls), out=str(tmp_path)))
    assert job.collect_garbage({BATCH}) == ()
    assert not (tmp_path / "_staging" / BATCH).exists() and kept.read_bytes() == b"committed"


@NEEDS_JAVA
@pytest.mark.slow
def test_pyarrow_and_spark_files_read_back_alike(spark: SparkSession, tmp_path: Path) -> None:
    """The same segments archived by Spark's writer and by default (a local root: pyarrow's):
    pyarrow and Spark read the outputs with the same schema and rows (but ``batch_id``); one
    file per task and day."""
    outputs: dict[str, Path] = {}
    for writer in ("spark", "auto"):
        with FakeCluster() as fake:
            fake.add_segments("q", [60, 1, 90])
            fake.add_segments("r", [33])
            expected = fake.records()
            out = outputs[writer] = tmp_path / writer
            # 8 segments a task for both writers (pyarrow's default would spread q's 3 over
            # the 2 slots): one task per queue, so one file per queue and day.
            cfg = JobConfig(
                urls=tuple(fake.urls), out=str(out), timeout=10, writer=writer, segments_per_task=8
            )
            s = ArchiveJob(lambda: spark, cfg).run()
            assert (s.segments, s.rows) == (4, 184)
            check_exactly_once(out, expected)
    created = {
        w: {pq.read_metadata(p).created_by.split()[0] for p in out.rglob("*.parquet")}
        for w, out in outputs.items()
    }
    assert created == {"spark": {"parquet-mr"}, "auto": {"parquet-cpp-arrow"}}
    (m,) = manifests(outputs["auto"])
    per_day = [(f["queue"], f["date"]) for f in m["files"]]
    assert len(per_day) == len(set(per_day))  # one task per queue here: one file a day

    def pyarrow_read(out: Path) -> pa.Table:
        import pyarrow.dataset as pads

        t = pads.dataset(str(out), format="parquet", partitioning="hive").to_table()
        return t.drop_columns(["batch_id"]).sort_by([("queue", "ascending"), ("seq", "ascending")])

    a, b = pyarrow_read(outputs["spark"]), pyarrow_read(outputs["auto"])
    assert a.schema == b.schema and a.equals(b)
    by_spark = next(outputs["spark"].rglob("*.parquet"))
    key = b"org.apache.spark.sql.parquet.row.metadata"
    assert pq.read_metadata(by_spark).metadata[key] == SPARK_ROW_METADATA.encode()
    for f in outputs["auto"].rglob("*.parquet"):
        assert pq.read_schema(f) == pq.read_schema(by_spark)
        assert pq.read_metadata(f).metadata[key] == SPARK_ROW_METADATA.encode()

    def spark_read(out: Path) -> tuple[str, list[tuple[object, ...]]]:
        df = spark.read.parquet(str(out)).drop("batch_id")
        rows = [tuple(r) for r in df.orderBy("queue", "seq").collect()]
        return df.schema.simpleString(), rows

    assert spark_read(outputs["spark"]) == spark_read(outputs["auto"])

    # By default pyarrow's tasks spread the batch over local[2]'s 2 slots: ceil(4 / 2) = 2
    # segments a task, never across queues: q's 3 segments in 2 tasks, r's 1 in one.
    with FakeCluster() as fake:
        fake.add_segments("q", [60, 1, 90])
        fake.add_segments("r", [33])
        expected = fake.records()
        out = tmp_path / "spread"
        cfg = JobConfig(urls=tuple(fake.urls), out=str(out), timeout=10)
        assert ArchiveJob(lambda: spark, cfg).run().rows == 184
        check_exactly_once(out, expected)
    names = {(p.parts[-4], p.name) for p in out.rglob("*.parquet")}
    assert sorted(q for q, _ in names) == ["queue=q", "queue=q", "queue=r"]
