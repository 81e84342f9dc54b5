"""``cmq archive compact`` (`cmq.archive.compact`) on synthetic archives (pyarrow only, no Spark):
the plan (never across queues or days), the sizes it reaches, a reader at every step of a
compaction and beside a running one, a hard crash at each step then a rerun, the archive job's
recovery and garbage collection beside compactions, and bad arguments (exit 2, nothing changed).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cmq.archive import compact as cp
from cmq.archive import manifest as mf
from cmq.archive import reader
from cmq.archive.errors import ManifestInvalid, VerificationFailed
from cmq.archive.job import CRASH_ENV, CRASH_EXIT, ArchiveJob, JobConfig
from cmq.archive.storage import LocalStorage
from tests.archive.fake_cluster import FakeCluster
from tests.archive.synthetic import (
    SCHEMA,
    add_batch,
    check_exact,
    listing_keys,
    read_exact,
    small_files,
    tree,
)

MIB = 1024 * 1024


def compaction(root: Path, **kw: object) -> cp.Compaction:
    return cp.Compaction(LocalStorage(str(root)), cp.CompactConfig(str(root), **kw))  # type: ignore[arg-type]


def f(path: str, queue: str, date: str, size: int, first: int) -> mf.ManifestFile:
    return mf.ManifestFile(path, queue, date, 10, size, first, first + 9)


def test_the_plan_packs_small_files_per_queue_and_day_near_the_target() -> None:
    files = [f(f"a{i}", "a", "2026-11-20", 30, i * 10) for i in range(10)]
    files += [f(f"b{i}", "b", "2026-11-20", 30, i * 10) for i in range(3)]
    files += [f(f"c{i}", "a", "2026-11-21", 30, i * 10) for i in range(1)]  # alone: left
    files += [f("big", "a", "2026-11-20", 60, 500)]  # not small (>= half the target)
    bins = cp.plan(files, target=100)
    for b in bins:
        assert {(x.queue, x.date) for x in b.files} == {(b.queue, b.date)}
    assert [(b.queue, b.date, [x.path for x in b.files]) for b in bins] == [
        ("a", "2026-11-20", ["a0", "a1", "a2"]),
        ("a", "2026-11-20", ["a3", "a4", "a5"]),
        ("a", "2026-11-20", ["a6", "a7", "a8"]),
        ("b", "2026-11-20", ["b0", "b1", "b2"]),
    ]  # a9 alone at the end: left as it is
    assert [b.bytes for b in bins] == [90, 90, 90, 90]
    (whole, b) = cp.plan(files, target=10_000)  # "big" is small too against 10,000 bytes
    assert (len(whole.files), whole.bytes, len(b.files)) == (11, 360, 3)
    assert cp.plan([], target=100) == []


def test_200_small_files_become_a_few_of_about_the_target(tmp_path: Path) -> None:
    keys = small_files(tmp_path, 200)  # 25 rows of 1 KB each: ~26 KB a file
    before = {p: s for p, s in tree(tmp_path).items() if p.endswith(".parquet")}
    schema = pq.read_schema(tmp_path / next(iter(before)))
    assert schema.metadata[b"written_by"] == SCHEMA.metadata[b"written_by"]
    s = compaction(tmp_path, target_bytes=MIB).run()
    print("\n" + s.render())
    assert (s.groups, s.files_in, s.rows) == (1, 200, 5000)
    assert s.bytes_in == sum(before.values())
    assert 4 <= s.files_out <= 6, s.sizes
    for size in s.sizes[:-1]:
        assert 0.75 * MIB <= size <= 1.25 * MIB, s.sizes
    assert sum(s.sizes) <= s.bytes_in  # one file's overhead instead of 200
    live = reader.live_files(str(tmp_path))
    assert [x.bytes for x in live] == list(s.sizes)
    assert all(
        x.path.startswith(f"queue=q/date=2026-11-20/batch_id={s.compaction_id}/") for x in live
    )
    # The retired files and their directories are gone; the reader and a listing agree.
    files = [p for p in tree(tmp_path) if p.endswith(".parquet")]
    assert sorted(files) == sorted(x.path for x in live)
    read_exact(tmp_path, keys)
    assert set(listing_keys(tmp_path).values()) == {1}
    # Same schema (and metadata) as the small files; rows sorted by seq.
    for x in live:
        t = pq.read_table(tmp_path / x.path)
        assert t.schema.equals(schema, check_metadata=True)
        seqs = t.column("seq").to_pylist()
        assert seqs == sorted(seqs) and (seqs[0], seqs[-1]) == (x.min_seq, x.max_seq)
    (m,) = [m for m in reader.read_manifests(LocalStorage(str(tmp_path))) if m.retires]
    assert (m.version, m.kind, len(m.retires), m.segments) == (2, "compaction", 200, [])
    # A second run finds nothing to do.
    again = compaction(tmp_path, target_bytes=MIB).run()
    assert (again.files_in, again.files_out) == (0, 0)
    assert len(reader.read_manifests(LocalStorage(str(tmp_path)))) == 201


def test_a_compaction_never_joins_queues_or_days_and_honours_the_selection(tmp_path: Path) -> None:
    keys = []
    for q in ("a", "b"):
        for k, d in enumerate(("2026-11-20", "2026-11-21")):
            keys += small_files(tmp_path, 6, queue=q, date=d, rows=5, first=k * 100)
    # One batch holding two queues and two days (as the job writes them).
    keys += add_batch(
        tmp_path,
        "b-mixed",
        [("a", "2026-11-20", 1000, 5), ("a", "2026-11-21", 2000, 5), ("b", "2026-11-20", 1000, 5)],
    )
    s = compaction(tmp_path, queues=("a",), dates=("2026-11-20",), target_bytes=MIB).run()
    assert (s.groups, s.files_in, s.files_out) == (1, 7, 1)
    read_exact(tmp_path, keys)
    s = compaction(tmp_path, target_bytes=MIB).run()
    assert (s.groups, s.files_out) == (3, 3)
    read_exact(tmp_path, keys)  # checks each row's date partition against its sent day
    for x in reader.live_files(str(tmp_path)):
        t = pq.read_table(tmp_path / x.path, columns=["seq", "sent_at"])
        assert {v.date().isoformat() for v in t.column("sent_at").to_pylist()} == {x.date}
    got = reader.read_table(str(tmp_path), columns=["queue", "seq", "batch_id"])
    assert len(got) == len(keys)
    # The archive's first file of b-mixed, "a" 2026-11-21, was retired with its day's files.
    assert not (tmp_path / "queue=a/date=2026-11-21/batch_id=b-mixed").exists()


class Watching(LocalStorage):
    """Runs ``check`` after every change to the files: a reader at every step."""

    def __init__(self, root: str, check: object) -> None:
        super().__init__(root)
        self.check = check
        self.changes = 0

    def _after(self) -> None:
        self.changes += 1
        self.check()  # type: ignore[operator]

    def write(self, rel: str, data: bytes) -> None:
        super().write(rel, data)
        self._after()

    def rename(self, src: str, dst: str) -> bool:
        ok = super().rename(src, dst)
        self._after()
        return ok

    def delete(self, rel: str) -> None:
        super().delete(rel)
        self._after()


def test_a_reader_sees_every_row_once_at_every_step_of_a_compaction(tmp_path: Path) -> None:
    keys = small_files(tmp_path, 16, rows=120)
    seen = []

    def check() -> None:
        read_exact(tmp_path, keys)
        seen.append(sum(listing_keys(tmp_path).values()) - len(keys))

    storage = Watching(str(tmp_path), check)
    s = cp.Compaction(storage, cp.CompactConfig(str(tmp_path), target_bytes=MIB)).run()
    assert (s.files_in, s.files_out) == (16, 2) and storage.changes > 16
    # A listing reader saw every row twice from the commit until the removal (and never partial
    # files: the new files appear complete, under their names, before the commit).
    assert max(seen) == len(keys) and seen[-1] == 0


def test_an_archive_batch_committed_during_a_compaction_is_left_alone(tmp_path: Path) -> None:
    """`cmq archive` commits a batch of the same queue and day while a compaction runs: the
    compaction never touches it (it was not in the manifests it read); the next one packs it."""
    keys = small_files(tmp_path, 10, rows=30)
    late: list[tuple[str, int]] = []

    def commit_a_batch() -> None:
        if not late:
            late.extend(add_batch(tmp_path, "b-late", [("q", "2026-11-20", 5000, 100)]))

    storage = Watching(str(tmp_path), commit_a_batch)
    s = cp.Compaction(storage, cp.CompactConfig(str(tmp_path), target_bytes=MIB)).run()
    assert (s.files_in, s.files_out) == (10, 1)
    assert (tmp_path / "queue=q/date=2026-11-20/batch_id=b-late").is_dir()
    read_exact(tmp_path, keys + late)
    s = compaction(tmp_path, target_bytes=MIB).run()
    assert (s.files_in, s.files_out) == (2, 1)  # the first compaction's file and the late one
    assert not (tmp_path / "queue=q/date=2026-11-20/batch_id=b-late").exists()
    read_exact(tmp_path, keys + late)


def test_a_reader_running_beside_compactions_reads_exact_rows(tmp_path: Path) -> None:
    keys = []
    for k, d in enumerate(("2026-11-20", "2026-11-21", "2026-11-22")):
        keys += small_files(tmp_path, 30, date=d, rows=40, first=k * 10_000)
    stop = threading.Event()
    reads: list[int] = []
    errors: list[BaseException] = []

    def read_loop() -> None:
        try:
            while not stop.is_set():
                read_exact(tmp_path, keys)
                reads.append(1)
        except BaseException as e:  # reported below
            errors.append(e)

    t = threading.Thread(target=read_loop)
    t.start()
    try:
        for d in ("2026-11-20", "2026-11-21", "2026-11-22"):
            compaction(tmp_path, dates=(d,), target_bytes=MIB).run()
    finally:
        stop.set()
        t.join(60)
    assert not errors, errors
    assert reads
    read_exact(tmp_path, keys)


def run_compact(
    root: Path, *args: str, crash: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop(CRASH_ENV, None)
    if crash:
        env[CRASH_ENV] = crash
    return subprocess.run(
        [sys.executable, "-m", "cmq.archive", "compact", "--out", str(root), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("step", cp.CRASH_POINTS)
def test_a_crash_at_each_step_then_a_rerun_leaves_the_rows_exact_and_no_leftovers(
    tmp_path: Path, step: str
) -> None:
    keys = small_files(tmp_path, 60, rows=30)
    keys += small_files(tmp_path, 5, queue="r", rows=30, date="2026-11-21")
    crashed = run_compact(tmp_path, "--target-bytes", str(MIB), crash=step)
    assert crashed.returncode == CRASH_EXIT, crashed.stderr
    read_exact(tmp_path, keys)
    listed = listing_keys(tmp_path)
    assert set(listed) == set(keys)
    if step == "compact-before-manifest":
        committed = {m.batch_id for m in reader.read_manifests(LocalStorage(str(tmp_path)))}
        left = [p for p in tree(tmp_path) if "batch_id=c-" in p]
        assert left and not any(p.split("batch_id=")[1].split("/")[0] in committed for p in left)
        assert max(listed.values()) == 2  # a listing reader sees the uncommitted copies too
    elif step == "compact-after-manifest":
        assert max(listed.values()) == 2  # a listing reader: retired files still there
    rerun = run_compact(tmp_path, "--target-bytes", str(MIB), "--json")
    assert rerun.returncode == 0, rerun.stderr
    read_exact(tmp_path, keys)
    assert set(listing_keys(tmp_path).values()) == {1}
    ms = reader.read_manifests(LocalStorage(str(tmp_path)))
    live = {x.path for x in mf.live_files(ms)}
    parquet = {p for p in tree(tmp_path) if p.endswith(".parquet")}
    assert parquet == live  # the retired and the uncommitted files collected
    assert not [p for p in tree(tmp_path) if "_tmp-" in p]
    assert not any(
        (tmp_path / x.path).parent.exists() and not any((tmp_path / x.path).parent.iterdir())
        for m in ms
        for x in m.retires
    )  # no empty batch directory left
    if step == "compact-before-manifest":
        assert '"garbage":["queue=q/date=2026-11-20/batch_id=c-' in rerun.stdout
    else:
        assert '"finished":' in rerun.stdout and '"finished":0' not in rerun.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--queue", "nope"], "no directory queue=nope"),
        (["--date", "2026-11-31"], "not a day"),
        (["--date", "2026-11-21"], "no directory date=2026-11-21"),
        (["--queue", "q", "--date", "yesterday"], "not a day"),
        (["--target-bytes", str(MIB - 1)], "under the minimum"),
    ],
)
def test_bad_arguments_exit_2_and_change_nothing(
    tmp_path: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    small_files(tmp_path, 10)
    # A crashed compaction's leftovers: a bad run must not even collect them.
    (tmp_path / "queue=q/date=2026-11-20/batch_id=c-crashed").mkdir()
    (tmp_path / "queue=q/date=2026-11-20/batch_id=c-crashed/part-0.parquet").write_bytes(b"x")
    before = tree(tmp_path)
    from cmq.archive.main import main

    assert main(["compact", "--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: invalid_argument: ") and message in err, err
    assert tree(tmp_path) == before


def test_a_missing_input_file_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    small_files(tmp_path, 10)
    (tmp_path / "queue=q/date=2026-11-20/batch_id=b-q-2026-11-20-0003").rename(tmp_path / "gone")
    before = tree(tmp_path)
    with pytest.raises(ManifestInvalid, match="missing"):
        compaction(tmp_path, target_bytes=MIB).run()
    assert tree(tmp_path) == before


def test_the_archive_job_accepts_retired_files_and_leaves_compactions_alone(
    tmp_path: Path, fake: FakeCluster
) -> None:
    """The job's recovery checks a manifest's files but not the retired ones; its garbage
    collection leaves an uncommitted compaction's directory to compaction."""
    fake.add_queue("q")
    small_files(tmp_path, 12)
    compaction(tmp_path, target_bytes=MIB).run()
    (tmp_path / "queue=q/date=2026-11-20/batch_id=c-running").mkdir()
    (tmp_path / "queue=q/date=2026-11-20/batch_id=b-crashed").mkdir()
    job = ArchiveJob(lambda: None, JobConfig(urls=tuple(fake.urls), out=str(tmp_path)))  # type: ignore[arg-type,return-value]
    ms = job.load_manifests()
    archived = [m for m in ms if m.kind == mf.ARCHIVE]
    assert len(archived) == 12
    with pytest.raises(ManifestInvalid, match="missing"):
        job.check_files(archived[0])
    for m in archived:
        job.check_files(m, mf.retired(ms))
    assert job.collect_garbage({m.batch_id for m in ms}) == ("b-crashed",)
    assert (tmp_path / "queue=q/date=2026-11-20/batch_id=c-running").exists()
    # The next compaction collects it (no committed manifest names it).
    s = compaction(tmp_path, target_bytes=MIB).run()
    assert s.garbage == ("queue=q/date=2026-11-20/batch_id=c-running",)


def test_files_of_different_schemas_fail_the_compaction_and_leave_nothing(tmp_path: Path) -> None:
    keys = small_files(tmp_path, 3, queue="a")  # its bin is written first, then discarded
    keys += small_files(tmp_path, 4)
    other = next(tmp_path.glob("queue=q/date=2026-11-20/batch_id=b-q-2026-11-20-0002/*.parquet"))
    t = pq.read_table(other)
    pq.write_table(t.drop_columns(["attributes"]), other)  # an older layout, say
    ms = reader.read_manifests(LocalStorage(str(tmp_path)))
    for m in ms:  # its manifest's size updated, so only the schema differs
        if m.batch_id == "b-q-2026-11-20-0002":
            f0 = m.files[0]
            fixed = msgspec.structs.replace(f0, bytes=other.stat().st_size)
            data = mf.encode(msgspec.structs.replace(m, files=[fixed]))
            (tmp_path / mf.manifest_path(m.batch_id)).write_bytes(data)
    before = tree(tmp_path)
    with pytest.raises(VerificationFailed, match="different schemas"):
        compaction(tmp_path, target_bytes=MIB).run()
    assert tree(tmp_path) == before
    assert not list(tmp_path.rglob("batch_id=c-*"))
    check_exact(reader.read_table(str(tmp_path), columns=["queue", "seq"]), keys)


def test_files_from_before_the_priority_column_join_newer_ones_at_level_0(tmp_path: Path) -> None:
    keys = small_files(tmp_path, 4)  # files without ``priority`` (written before it)
    newer = next(tmp_path.glob("queue=q/date=2026-11-20/batch_id=b-q-2026-11-20-0002/*.parquet"))
    t = pq.read_table(newer)
    levels = pa.array([i % 4 for i in range(t.num_rows)], pa.int32())
    pq.write_table(t.append_column("priority", levels), newer)
    for m in reader.read_manifests(LocalStorage(str(tmp_path))):  # the new size recorded
        if m.batch_id == "b-q-2026-11-20-0002":
            fixed = msgspec.structs.replace(m.files[0], bytes=newer.stat().st_size)
            data = mf.encode(msgspec.structs.replace(m, files=[fixed]))
            (tmp_path / mf.manifest_path(m.batch_id)).write_bytes(data)
    want = dict(zip(t.column("seq").to_pylist(), levels.to_pylist(), strict=True))
    s = compaction(tmp_path, target_bytes=MIB).run()
    assert (s.files_in, s.files_out) == (4, 1)
    (live,) = reader.live_files(str(tmp_path))
    out = pq.read_table(tmp_path / live.path)
    assert out.schema.field("priority").type == pa.int32()
    got = dict(zip(out.column("seq").to_pylist(), out.column("priority").to_pylist(), strict=True))
    assert got == {seq: want.get(seq, 0) for seq in got} and len(got) == len(keys)
    assert any(got.values())
