"""`cmq.archive.reader`: the live files by the manifests (named by a committed manifest and
retired by no committed compaction), the pyarrow Table and Dataset, Spark's paths, the versions
it reads and refuses, and a read that a compaction's commit overtakes (read again, exact)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from cmq.archive import compact as cp
from cmq.archive import manifest as mf
from cmq.archive import reader
from cmq.archive.errors import InvalidArgument, ManifestInvalid, NewerManifest
from cmq.archive.storage import LocalStorage
from tests.archive.synthetic import add_batch, check_exact, read_exact, small_files

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
