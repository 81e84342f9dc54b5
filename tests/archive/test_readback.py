"""Step 5's read-back (`cmq.archive.readback`): rows of written files attributed to the
batch's segments, rows in no segment reported, repeated seqs counted; the local (pyarrow) and
the Spark read-back agree."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cmq.archive.readback import FileRows, local_rows, spark_rows
from cmq.archive.records import SegmentTask
from cmq.archive.storage import LocalStorage
from tests.archive.conftest import NEEDS_JAVA

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TASKS = [
    SegmentTask("a", 1, 10, 10, "0", ()),
    SegmentTask("a", 11, 20, 9, "0", ()),
    SegmentTask("b", 1, 5, 5, "0", ()),
]


def write(root: Path) -> tuple[dict[str, str], dict[str, int]]:
    files = {
        # two segments of a, one seq of it twice, one seq (25) in no segment of the batch
        "queue=a/date=2026-11-27/batch_id=x/part-0.parquet": [1, 2, 3, 12, 12, 20, 25],
        "queue=a/date=2026-11-28/batch_id=x/part-0.parquet": [4, 5],
        # b's seqs 1..5 belong to b's segment, not a's
        "queue=b/date=2026-11-27/batch_id=x/part-0.parquet": [1, 2, 5],
    }
    paths, sizes = {}, {}
    for rel, seqs in files.items():
        path = root / rel
        path.parent.mkdir(parents=True)
        pq.write_table(pa.table({"seq": pa.array(seqs, pa.int64()), "id": ["x"] * len(seqs)}), path)
        paths[rel], sizes[rel] = str(path), path.stat().st_size
    return paths, sizes


def summary(rows: list[FileRows]) -> set[tuple[str, int | None, int, int, int, int]]:
    return {(f.rel[:20], f.segment, f.rows, f.distinct, f.min_seq, f.max_seq) for f in rows}


EXPECTED = {
    ("queue=a/date=2026-11", 1, 3, 3, 1, 3),
    ("queue=a/date=2026-11", 11, 3, 2, 12, 20),
    ("queue=a/date=2026-11", None, 1, 1, 25, 25),
    ("queue=a/date=2026-11", 1, 2, 2, 4, 5),
    ("queue=b/date=2026-11", 1, 3, 3, 1, 5),
}


def test_local_read_back_attributes_rows_to_segments(tmp_path: Path) -> None:
    paths, sizes = write(tmp_path)
    rows = local_rows(paths, sizes, TASKS)
    assert summary(rows) == EXPECTED
    assert all(f.size == sizes[f.rel] for f in rows)
    assert {(f.queue, f.date) for f in rows} >= {("a", "2026-11-28"), ("b", "2026-11-27")}


@NEEDS_JAVA
@pytest.mark.slow
def test_the_spark_read_back_agrees(spark: SparkSession, tmp_path: Path) -> None:
    paths, sizes = write(tmp_path)
    storage = LocalStorage(str(tmp_path))
    dirs = sorted({rel.rsplit("/", 1)[0] for rel in paths})
    assert summary(spark_rows(spark, storage, dirs, sizes, TASKS)) == EXPECTED
