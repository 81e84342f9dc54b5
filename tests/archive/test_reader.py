"""`cmq.archive.reader`: the live files by the manifests (named by a committed manifest and
retired by no committed compaction), the pyarrow Table and Dataset, Spark's paths, the versions
it reads and refuses, and a read that a compaction's commit overtakes (read again, exact)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cmq.archive import compact as cp
from cmq.archive import job as jobmod
from cmq.archive import manifest as mf
from cmq.archive import reader
from cmq.archive.errors import InvalidArgument, ManifestInvalid, NewerManifest
from cmq.archive.job import ArchiveJob, JobConfig
from cmq.archive.storage import LocalStorage
from tests.archive.conftest import NEEDS_JAVA
from tests.archive.fake_cluster import FakeCluster
from tests.archive.synthetic import add_batch, check_exact, read_exact, small_files

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MIB = 1024 * 1024


def test_the_live_files_are_the_committed_ones_less_the_retired(tmp_path: Path) -> None:
    keys = add_batch(tmp_path, "b-1", [("q", "2026-11-20", 0, 10), ("r", "2026-11-21", 0, 5)])
    keys += add_batch(tmp_path, "b-2", [("q", "2026-11-21", 10, 7)])
    # An uncommitted batch (its manifest not renamed into place yet): never read.
    add_batch(tmp_path, "b-3", [("q", "2026-11-21", 17, 4)])
    (tmp_path / mf.manifest_path("b-3")).rename(tmp_path / mf.temp_path("b-3"))
    # A compaction manifest retiring b-2's file for a file of its own.
    ms = reader.read_manifests(LocalStorage(str(tmp_path)))
    (old,) = [f for m in ms for f in m.files if m.batch_id == "b-2"]
    new = mf.ManifestFile(old.path.replace("b-2", "c-1"), "q", "2026-11-21", 7, old.bytes, 10, 16)
    (tmp_path / new.path).parent.mkdir(parents=True)
    (tmp_path / old.path).rename(tmp_path / new.path)
    m = mf.Manifest(
        mf.VERSION, "c-1", 0, "", 7, old.bytes, [], [new], kind=mf.COMPACTION, retires=[old]
    )
    (tmp_path / mf.manifest_path("c-1")).write_bytes(mf.encode(m))
    live = reader.live_files(str(tmp_path))
    assert [(f.path.split("/")[2], f.queue, f.date) for f in live] == [
        ("batch_id=b-1", "q", "2026-11-20"),
        ("batch_id=c-1", "q", "2026-11-21"),
        ("batch_id=b-1", "r", "2026-11-21"),
    ]
    assert [
        f.path for f in reader.live_files(str(tmp_path), queues=["q"], dates=["2026-11-21"])
    ] == [new.path]
    table = reader.read_table(str(tmp_path))
    check_exact(table, keys)
    assert table.schema.field("queue").type == pa.string()
    assert sorted(set(table.column("batch_id").to_pylist())) == ["b-1", "c-1"]
    got = reader.read_table(f"file://{tmp_path}", queues=["r"], columns=["queue", "seq"])
    assert (got.column_names, len(got)) == (["queue", "seq"], 5)
    assert reader.dataset(str(tmp_path), dates=["2026-11-20"]).count_rows() == 10
    paths = reader.spark_paths(str(tmp_path), queues=["q"])
    assert paths == [f"file://{tmp_path}/{f.path}" for f in live if f.queue == "q"]
    assert reader.base_path(str(tmp_path)) == f"file://{tmp_path}"


def test_an_empty_archive_reads_as_no_rows(tmp_path: Path) -> None:
    assert reader.live_files(str(tmp_path)) == []
    assert reader.spark_paths(str(tmp_path)) == []
    assert len(reader.read_table(str(tmp_path))) == 0
    with pytest.raises(ManifestInvalid, match="no live files"):
        reader.dataset(str(tmp_path))


def test_versions_read_and_refused(tmp_path: Path) -> None:
    small_files(tmp_path, 3)
    (tmp_path / mf.MANIFESTS / "c-9.json").write_text(json.dumps({"version": 3}))
    with pytest.raises(NewerManifest, match=r"c-9\.json: archive manifest version 3"):
        reader.live_files(str(tmp_path))
    (tmp_path / mf.MANIFESTS / "c-9.json").write_text('{"version": 2, "batch_id": ')
    with pytest.raises(ManifestInvalid, match=r"c-9\.json"):
        reader.read_table(str(tmp_path))
    with pytest.raises(InvalidArgument, match="Storage"):
        reader.live_files("hdfs://namenode/archive")


def test_a_read_overtaken_by_a_compaction_reads_again_and_is_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader's snapshot is taken, then a compaction commits and removes the files it
    named: the read finds a file missing, takes a new snapshot and reads exact rows."""
    keys = small_files(tmp_path, 12, rows=40)
    snapshots = []
    real = reader.live_files

    def live_then_compact(*args: object, **kw: object) -> list[mf.ManifestFile]:
        files = real(*args, **kw)  # type: ignore[arg-type]
        snapshots.append(len(files))
        if len(snapshots) == 1:
            storage = LocalStorage(str(tmp_path))
            s = cp.Compaction(storage, cp.CompactConfig(str(tmp_path), target_bytes=MIB)).run()
            assert s.files_in == 12
        return files

    monkeypatch.setattr(reader, "live_files", live_then_compact)
    check_exact(reader.read_table(str(tmp_path), columns=["queue", "seq"]), keys)
    assert snapshots == [12, 1]
    monkeypatch.undo()
    read_exact(tmp_path, keys)


class Stop(BaseException):
    """Stands for the archive job crashing right after its manifest's rename."""


@NEEDS_JAVA
@pytest.mark.slow
def test_the_jobs_output_compacted_reads_exact_with_pyarrow_and_spark(
    spark: SparkSession, fake: FakeCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark's own files (one per segment), a batch whose job crashed after its manifest, a
    compaction of all of them, then: both readers exact and byte-identical, and the job's next
    run recovers the crashed batch (its files retired, legitimately missing) and archives the
    rest."""
    for queue, sizes in (("orders", [40] * 8), ("invoices", [15] * 3)):
        for n in sizes:  # every segment on one day (the double spreads them over days)
            fake.add_queue(queue)
            first = fake.queues[queue].next_seq
            fake.add_segments(queue, [n], day_ms=1_790_000_000_000 - first * 20_000_000)
    expected = fake.records()  # archived segments leave the double's listing
    cfg = JobConfig(urls=tuple(fake.urls), out=str(tmp_path), timeout=10, segments_per_task=1)
    ArchiveJob(lambda: spark, replace(cfg, max_segments=6)).run()

    def stop_at(step: str) -> None:
        if step == "after-manifest":
            raise Stop

    monkeypatch.setattr(jobmod, "crash_point", stop_at)
    with pytest.raises(Stop):
        ArchiveJob(lambda: spark, cfg).run()
    monkeypatch.undo()
    assert fake.remaining("orders") or fake.remaining("invoices")  # manifest, not marked
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.parquet"))
    storage = LocalStorage(str(tmp_path))
    s = cp.Compaction(storage, cp.CompactConfig(str(tmp_path), target_bytes=MIB)).run()
    assert (s.files_in, len(before), s.files_out, s.groups) == (11, 11, 2, 2)
    import base64

    want = {(r["queue"], r["seq"]): base64.b64decode(r["body_b64"]) for r in expected}
    table = reader.read_table(str(tmp_path), columns=["queue", "seq", "body", "date", "sent_at"])
    check_exact(table, want)
    assert {
        (q, s_): bytes(b)
        for q, s_, b in zip(*[table[c].to_pylist() for c in ("queue", "seq", "body")], strict=True)
    } == want
    paths = reader.spark_paths(str(tmp_path))
    assert len(paths) == 2
    df = spark.read.option("basePath", reader.base_path(str(tmp_path))).parquet(*paths)
    rows = df.select("queue", "seq", "body", "sent_at").collect()
    assert {(r.queue, r.seq): bytes(r.body) for r in rows} == want and len(rows) == len(want)
    assert dict(df.dtypes)["sent_at"] == "timestamp"
    again = ArchiveJob(lambda: spark, cfg).run()
    assert again.recovered == 5 and again.segments == 0
    assert fake.remaining("orders") == [] and fake.remaining("invoices") == []


@pytest.mark.parametrize("newer_first", [True, False])
def test_files_before_and_after_the_priority_column_read_together(
    tmp_path: Path, newer_first: bool
) -> None:
    keys = small_files(tmp_path, 3, rows=5)  # synthetic files: no ``priority`` column
    live = [tmp_path / f.path for f in reader.live_files(str(tmp_path))]
    newer = live[0] if newer_first else live[-1]
    t = pq.read_table(newer)
    pq.write_table(t.append_column("priority", pa.array([7] * t.num_rows, pa.int32())), newer)
    got = reader.read_table(str(tmp_path))
    assert got.num_rows == len(keys)
    levels = dict(
        zip(got.column("seq").to_pylist(), got.column("priority").to_pylist(), strict=True)
    )
    marked = set(t.column("seq").to_pylist())
    assert levels == {seq: (7 if seq in marked else None) for seq in levels}
