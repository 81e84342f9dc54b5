"""The archive job and the ``cmq`` data source on Spark local[2] (one session for the whole test
session), against the test double of the cluster; the output is read back with pyarrow.

Covered: the data source alone; a run then a second run (nothing new); claims held by another
batch; a segment bad on every replica (the job fails, nothing archived, no output left); a
manifest whose file went missing (recovery refuses); two jobs at once; a hard crash (a
subprocess exiting at the step) before the write, after the write, after the manifest, each
followed by a rerun: every record exactly once, every segment archived.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from cmq.archive import job as jobmod
from cmq.archive.errors import ManifestInvalid, WriteFailed
from cmq.archive.job import CRASH_ENV, CRASH_EXIT, ArchiveJob, JobConfig, Summary
from cmq.archive.remote import ClusterClient
from tests.archive.conftest import NEEDS_JAVA
from tests.archive.fake_cluster import FakeCluster
from tests.archive.output import check_exactly_once, manifests, rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [NEEDS_JAVA, pytest.mark.slow]  # one JVM for the session; subprocess jobs


def run_job(spark: SparkSession, fake: FakeCluster, out: Path, **kw: object) -> Summary:
    cfg = JobConfig(urls=tuple(fake.urls), out=str(out), timeout=10, **kw)  # type: ignore[arg-type]
    return ArchiveJob(lambda: spark, cfg).run()


def test_the_data_source_reads_released_segments_alone(
    spark: SparkSession, fake: FakeCluster
) -> None:
    fake.add_segments("q", [50, 70])
    fake.add_segments("q", [9], state="sealed")
    fake.faults[2].bad_crc.add(("q", 0))
    df = spark.read.format("cmq").option("url", ",".join(fake.urls)).option("queues", "q").load()
    assert df.rdd.getNumPartitions() == 1  # up to 8 segments of a queue per partition
    one_each = (
        spark.read.format("cmq")
        .option("url", ",".join(fake.urls))
        .option("queues", "q")
        .option("segments_per_partition", "1")
        .load()
    )
    assert one_each.rdd.getNumPartitions() == 2
    got = sorted(
        (r.seq, bytes(r.body), r.outcome) for r in df.select("seq", "body", "outcome").collect()
    )
    import base64

    want = sorted(
        (r["seq"], base64.b64decode(r["body_b64"]), r["outcome"])
        for r in fake.records("q")
        if r["seq"] < 120
    )
    assert got == want
    assert fake.remaining("q") == [0, 50, 120]  # reading never archives


def test_a_run_archives_everything_once_and_a_second_run_nothing(
    spark: SparkSession, fake: FakeCluster, tmp_path: Path
) -> None:
    fake.add_segments("orders", [200, 150, 1, 300])
    fake.add_segments("invoices", [40])
    fake.add_queue("plain", archive=False)
    fake.queues["plain"].archive = False
    fake.add_segments("plain", [5])
    expected = fake.records("orders") + fake.records("invoices")
    s = run_job(spark, fake, tmp_path)
    assert (s.segments, s.rows, s.skipped) == (5, 691, 0)
    assert s.bytes == sum(f.stat().st_size for f in tmp_path.rglob("*.parquet"))
    assert fake.remaining("orders") == [] and fake.remaining("invoices") == []
    assert fake.remaining("plain") == [0]  # archive=false: not this job's
    check_exactly_once(tmp_path, expected)
    (m,) = manifests(tmp_path)
    assert m["batch_id"] == s.batch_id and m["rows"] == 691
    assert sorted((x["queue"], x["first_seq"], x["count"]) for x in m["segments"]) == [
        ("invoices", 0, 40),
        ("orders", 0, 200),
        ("orders", 200, 150),
        ("orders", 350, 1),
        ("orders", 351, 300),
    ]
    again = run_job(spark, fake, tmp_path)
    assert (again.segments, again.rows, again.recovered, again.garbage) == (0, 0, 0, ())
    assert len(manifests(tmp_path)) == 1
    # New segments later: a new batch beside the first, still once each.
    fake.add_segments("orders", [25])
    expected += fake.records("orders")
    third = run_job(spark, fake, tmp_path, max_segments=5)
    assert (third.segments, third.rows) == (1, 25)
    check_exactly_once(tmp_path, expected)
    assert len(manifests(tmp_path)) == 2


@pytest.mark.parametrize("form", ["json_lines", "mixed"])
def test_a_run_reads_the_json_lines_of_nodes_without_the_binary_form(
    spark: SparkSession, fake: FakeCluster, tmp_path: Path, form: str
) -> None:
    """``--json-read`` (every node asked for JSON lines), or a cluster mixing nodes with and
    without the binary form: the same rows, once each."""
    fake.add_segments("q", [60, 45, 80, 10])
    expected = fake.records("q")
    if form == "mixed":
        fake.faults[2].json_only = True  # an older node among newer ones
        s = run_job(spark, fake, tmp_path)
    else:
        s = run_job(spark, fake, tmp_path, binary=False)
    assert (s.segments, s.rows) == (4, 195)
    assert fake.remaining("q") == []
    check_exactly_once(tmp_path, expected)
    if form == "mixed":  # node 2 answered its share as JSON lines, node 3 in binary
        assert set(fake.forms) == {"json", "binary"}
    else:
        assert set(fake.forms) == {"json"}


def test_a_corrupted_byte_on_every_replica_fails_the_run_loudly(
    spark: SparkSession, fake: FakeCluster, tmp_path: Path
) -> None:
    fake.add_segments("q", [20, 20])
    for nid in (1, 2, 3):
        fake.faults[nid].flipped.add(("q", 20))
    with pytest.raises(WriteFailed) as err:
        run_job(spark, fake, tmp_path)
    assert "segment q/20: every replica failed" in err.value.message
    assert "the listing's checksum is" in err.value.message
    assert fake.remaining("q") == [0, 20] and not manifests(tmp_path)
    assert not rows(tmp_path)


def test_segments_claimed_by_another_live_batch_are_left_to_it(
    spark: SparkSession, fake: FakeCluster, tmp_path: Path
) -> None:
    fake.add_segments("q", [10, 20, 30])
    client = ClusterClient(fake.urls, timeout=5)
    assert client.claim("q", "other-batch", [10], ttl_ms=600_000).claimed == [10]
    assert client.claim("q", "expired-batch", [30], ttl_ms=1).claimed == [30]
    time.sleep(0.01)
    expected = [r for r in fake.records("q") if not 10 <= r["seq"] < 30]
    s = run_job(spark, fake, tmp_path)
    assert (s.segments, s.rows, s.skipped) == (2, 40, 1)
    assert fake.remaining("q") == [10]
    check_exactly_once(tmp_path, expected)


def test_a_segment_bad_on_every_replica_fails_the_run_and_archives_nothing(
    spark: SparkSession, fake: FakeCluster, tmp_path: Path
) -> None:
    fake.add_segments("q", [30, 40])
    fake.faults[1].bad_checksum.add(("q", 30))
    fake.faults[2].torn.add(("q", 30))
    fake.faults[3].bad_crc.add(("q", 30))
    with pytest.raises(WriteFailed, match="every replica failed"):
        run_job(spark, fake, tmp_path)
    assert fake.mark_calls == []
    assert fake.remaining("q") == [0, 30]
    assert manifests(tmp_path) == [] and rows(tmp_path) == []
    assert not list(tmp_path.rglob("*.parquet"))
    # The replica heals: the next run (after the failed batch's claims expire) archives both.
    fake.faults[1].bad_checksum.clear()
    for seg in fake.queues["q"].segments.values():
        seg.claim = None
    expected = fake.records("q")
    assert run_job(spark, fake, tmp_path).rows == 70
    check_exactly_once(tmp_path, expected)


class Stop(BaseException):
    """Stands for a crash inside this process (tests of what recovery refuses)."""


def test_recovery_refuses_a_manifest_whose_file_is_missing(
    spark: SparkSession, fake: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.add_segments("q", [30])

    def stop_at(step: str) -> None:
        if step == "after-manifest":
            raise Stop

    monkeypatch.setattr(jobmod, "crash_point", stop_at)
    with pytest.raises(Stop):
        run_job(spark, fake, tmp_path)
    monkeypatch.undo()
    (m,) = manifests(tmp_path)
    (tmp_path / m["files"][0]["path"]).unlink()
    with pytest.raises(ManifestInvalid, match="missing"):
        run_job(spark, fake, tmp_path)
    assert fake.mark_calls == [] and fake.remaining("q") == [0]


def test_two_jobs_at_once_never_archive_a_segment_twice(
    spark: SparkSession, fake: FakeCluster, tmp_path: Path
) -> None:
    fake.add_segments("a", [40] * 6)
    fake.add_segments("b", [25] * 4)
    expected = fake.records()
    results: list[Summary | BaseException] = []
    barrier = threading.Barrier(2)

    def one() -> None:
        try:
            barrier.wait()
            results.append(run_job(spark, fake, tmp_path))
        except BaseException as e:  # reported below
            results.append(e)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert all(isinstance(r, Summary) for r in results), results
    summaries = [r for r in results if isinstance(r, Summary)]
    assert sum(s.rows for s in summaries) == len(expected)
    assert sum(s.segments for s in summaries) == 10
    assert fake.remaining("a") == [] and fake.remaining("b") == []
    check_exactly_once(tmp_path, expected)
    marked = [(q, first) for q, _, firsts in fake.mark_calls for first in firsts]
    assert len(marked) == len(set(marked)) == 10


def crash_run(fake: FakeCluster, out: Path, step: str) -> subprocess.Popen[str]:
    env = dict(os.environ, **{CRASH_ENV: step})
    args = [sys.executable, "-m", "cmq.archive", "--url", ",".join(fake.urls), "--out", str(out)]
    return subprocess.Popen(
        [*args, "--timeout", "10"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_crash_at_each_step_then_a_rerun_archives_each_record_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    steps = ("before-write", "after-write", "after-manifest")
    fakes = {s: FakeCluster() for s in steps}
    try:
        expected = {}
        procs = {}
        for step, fake in fakes.items():
            fake.start()
            fake.add_segments("q", [60, 1, 90])
            fake.add_segments("r", [33])
            expected[step] = fake.records()
            procs[step] = crash_run(fake, tmp_path / step, step)  # three processes at once
        for step, proc in procs.items():
            stdout, stderr = proc.communicate(timeout=300)
            assert proc.returncode == CRASH_EXIT, (step, stdout, stderr[-3000:])
        for step, fake in fakes.items():
            out = tmp_path / step
            crashed = {
                c[0] for q in fake.queues.values() for s in q.segments.values() if (c := s.claim)
            }
            if step == "after-manifest":
                (m,) = manifests(out)
                assert fake.mark_calls == [] and len(fake.remaining("q")) == 3
                # Recovery marks the manifest's segments with its batch id, writing nothing.
                s = run_job(spark, fake, out)
                assert (s.recovered, s.segments, s.rows) == (4, 0, 0)
                assert {b for _, b, _ in fake.mark_calls} == {m["batch_id"]}
            else:
                assert manifests(out) == [] and len(crashed) == 1
                if step == "after-write":
                    assert rows(out), "the crashed batch wrote its files"
                # While the crashed batch's claims live, its segments and output stay untouched.
                early = run_job(spark, fake, out)
                assert (early.segments, early.skipped, early.garbage) == (0, 4, ())
                fake.expire_claims()  # as if the claim TTL (600 s) went by
                s = run_job(spark, fake, out)
                assert (s.segments, s.rows) == (4, len(expected[step]))
                if step == "after-write":
                    assert s.garbage == tuple(crashed)
                assert not (out / "_staging" / next(iter(crashed))).exists()
            assert fake.remaining("q") == [] and fake.remaining("r") == []
            check_exactly_once(out, expected[step])
            assert len(manifests(out)) == 1
    finally:
        for fake in fakes.values():
            fake.stop()


def test_the_hadoop_storage_behaves_like_the_local_one(spark: SparkSession, tmp_path: Path) -> None:
    """Roots other than local paths go through Hadoop's FileSystem: the same operations, here on
    a file: URI (what hdfs:, s3a: ... get)."""
    from cmq.archive.storage import HadoopStorage, LocalStorage

    for store in (HadoopStorage(spark, f"file://{tmp_path}/h"), LocalStorage(str(tmp_path / "l"))):
        store.mkdirs("a/b")
        store.write("a/b/_tmp.json", b'{"x": 1}')
        assert store.rename("a/b/_tmp.json", "a/b/m.json")
        assert store.read("a/b/m.json") == b'{"x": 1}' and store.size("a/b/m.json") == 8
        store.write("a/other", b"")
        assert not store.rename("a/other", "a/b/m.json")  # never over an existing file
        names = [(e.name, e.is_dir) for e in store.list("a") if not e.name.startswith(".")]
        assert names == [("b", True), ("other", False)]
        assert store.list("missing") == [] and store.size("a/b") is None
        store.delete("a/b")
        assert not store.exists("a/b/m.json") and store.exists("a/other")
        store.delete("nothing-here")
