"""A synthetic archive for the compaction and reader tests (no Spark, no cluster): archive
batches written the way the job leaves them (Parquet files without the partition columns
under ``queue=Q/date=D/batch_id=B/``, a version 1 manifest naming one segment per file), and
the assertions on what a reader sees."""

from __future__ import annotations

import datetime as dt
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from cmq.archive import manifest as mf
from cmq.archive import reader

SCHEMA = pa.schema(
    [
        pa.field("seq", pa.int64()),
        pa.field("id", pa.string()),
        pa.field("body", pa.binary()),
        pa.field("sent_at", pa.timestamp("ms", tz="UTC")),
        pa.field("receive_count", pa.int32()),
        pa.field("attributes", pa.map_(pa.string(), pa.string())),
        pa.field("outcome", pa.string()),
    ],
    metadata={b"written_by": b"tests.archive.synthetic"},
)
"""The columns of an archive file (the partition columns are in its path)."""

Key = tuple[str, int]  # (queue, seq)


def day_ms(date: str) -> int:
    d = dt.datetime.fromisoformat(date).replace(tzinfo=dt.UTC)
    return int(d.timestamp() * 1000)


def table(first: int, rows: int, date: str, body_bytes: int) -> pa.Table:
    """``rows`` rows from seq ``first`` sent on ``date``, random bodies (incompressible)."""
    base = day_ms(date)
    seqs = list(range(first, first + rows))
    return pa.table(
        [
            pa.array(seqs, pa.int64()),
            pa.array([f"m-{s}" for s in seqs]),
            pa.array([os.urandom(body_bytes) for _ in seqs], pa.binary()),
            pa.array([base + s for s in seqs], pa.timestamp("ms", tz="UTC")),
            pa.array([1] * rows, pa.int32()),
            pa.array([[("k", str(s))] for s in seqs], pa.map_(pa.string(), pa.string())),
            pa.array(["acked"] * rows),
        ],
        schema=SCHEMA,
    )


def add_batch(
    root: Path,
    batch_id: str,
    parts: Sequence[tuple[str, str, int, int]],
    body_bytes: int = 1000,
) -> list[Key]:
    """An archive batch of one file per part (queue, date, first seq, rows) and its committed
    manifest; the keys of its rows."""
    files = []
    segments = []
    keys: list[Key] = []
    for k, (queue, date, first, rows) in enumerate(parts):
        rel = f"queue={queue}/date={date}/batch_id={batch_id}/part-{k:05d}-{batch_id}.parquet"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table(first, rows, date, body_bytes), root / rel)
        size = (root / rel).stat().st_size
        last = first + rows - 1
        files.append(mf.ManifestFile(rel, queue, date, rows, size, first, last))
        segments.append(
            mf.ManifestSegment(queue, first, last, rows, "crc32:0", rows, first, last, [rel])
        )
        keys.extend((queue, s) for s in range(first, first + rows))
    m = mf.Manifest(
        mf.ARCHIVE_VERSION,
        batch_id,
        0,
        "file://" + str(root),
        sum(f.rows for f in files),
        sum(f.bytes for f in files),
        segments,
        files,
    )
    (root / mf.MANIFESTS).mkdir(exist_ok=True)
    (root / mf.manifest_path(batch_id)).write_bytes(mf.encode(m))
    return keys


def small_files(
    root: Path,
    n: int,
    *,
    queue: str = "q",
    date: str = "2026-11-20",
    rows: int = 25,
    first: int = 0,
) -> list[Key]:
    """``n`` batches of one small file each (``rows`` rows of 1 KB from seq ``first``): the
    archive's small-files problem. Their keys."""
    keys: list[Key] = []
    for i in range(n):
        at = first + i * rows
        keys += add_batch(root, f"b-{queue}-{date}-{i:04d}", [(queue, date, at, rows)])
    return keys


def check_exact(got: pa.Table, want: Iterable[Key]) -> None:
    """``got`` (a reader's table) holds each key of ``want`` exactly once and nothing else, and
    each row's date partition is its sent day."""
    keys = Counter(zip(got.column("queue").to_pylist(), got.column("seq").to_pylist(), strict=True))
    twice = [k for k, n in keys.items() if n > 1]
    assert not twice, f"rows read twice: {twice[:5]}"
    want_set = set(want)
    assert set(keys) == want_set, (
        f"missing {sorted(want_set - set(keys))[:5]}, extra {sorted(set(keys) - want_set)[:5]}"
    )
    if "sent_at" in got.column_names:
        for date, sent in zip(got["date"].to_pylist(), got["sent_at"].to_pylist(), strict=True):
            assert sent.date().isoformat() == date


def read_exact(root: Path, want: Iterable[Key]) -> None:
    check_exact(reader.read_table(str(root), columns=["queue", "seq", "date", "sent_at"]), want)


def listing_keys(root: Path) -> Counter[Key]:
    """What a reader listing the directories sees (pyarrow's dataset of the root: files and
    directories starting with ``_`` or ``.`` skipped): (queue, seq) -> times seen."""
    import pyarrow.dataset as pads

    ds = pads.dataset(str(root), format="parquet", partitioning=reader._partitioning())
    t = ds.to_table(columns=["queue", "seq"])
    return Counter(zip(t.column("queue").to_pylist(), t.column("seq").to_pylist(), strict=True))


def tree(root: Path) -> dict[str, int]:
    """Every file under ``root`` -> its size (to show that nothing changed)."""
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}
