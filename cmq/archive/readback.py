"""Step 5's read-back: what each written file holds, per segment of the batch (rows, distinct
seqs, seq range), for `cmq.archive.job` to check against the claimed segments.

A file holds the rows one Spark task wrote for one queue and day: of one or more segments of
the batch. Each row is attributed to the segment of its queue whose seq range holds it; rows in
no segment of the batch are reported as such (``segment`` None). On a local output root the
files' ``seq`` column is read with pyarrow in the driver (no Spark job: a fraction of a second
for a batch); elsewhere (HDFS, S3, ...) with Spark, as the files are written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from cmq.archive.records import SegmentTask
from cmq.archive.storage import Storage

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True, slots=True)
class FileRows:
    """The rows of file ``rel`` (relative to the root) that lie in one segment of the batch
    (``segment``: its first seq; None: rows in no segment of the batch)."""

    rel: str
    queue: str
    date: str
    segment: int | None
    rows: int
    distinct: int
    min_seq: int
    max_seq: int
    size: int


def _where(rel: str) -> tuple[str, str]:
    """(queue, date) of a file ``queue=Q/date=D/batch_id=B/part-...``."""
    q, d = rel.split("/")[:2]
    return q.removeprefix("queue="), d.removeprefix("date=")


def local_rows(
    paths: Mapping[str, str], sizes: Mapping[str, int], tasks: Sequence[SegmentTask]
) -> list[FileRows]:
    """The read-back of local files (``rel`` -> local path) with pyarrow."""
    import pyarrow.parquet as pq

    ranges: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for queue in {t.queue for t in tasks}:
        mine = sorted((t.first_seq, t.last_seq) for t in tasks if t.queue == queue)
        ranges[queue] = (
            np.array([a for a, _ in mine], dtype=np.int64),
            np.array([b for _, b in mine], dtype=np.int64),
        )
    empty = np.zeros(0, dtype=np.int64)
    out: list[FileRows] = []
    for rel, path in sorted(paths.items()):
        queue, date = _where(rel)
        seqs = pq.read_table(path, columns=["seq"]).column("seq").to_numpy()
        firsts, lasts = ranges.get(queue, (empty, empty))
        at = np.searchsorted(firsts, seqs, side="right") - 1
        inside = at >= 0
        inside[inside] = seqs[inside] <= lasts[at[inside]]
        groups: list[tuple[int | None, np.ndarray]] = []
        if not inside.all():
            groups.append((None, seqs[~inside]))
        for k in np.unique(at[inside]):
            groups.append((int(firsts[k]), seqs[inside & (at == k)]))
        for segment, part in groups:
            out.append(
                FileRows(
                    rel,
                    queue,
                    date,
                    segment,
                    len(part),
                    len(np.unique(part)),
                    int(part.min()),
                    int(part.max()),
                    sizes[rel],
                )
            )
    return out


def spark_rows(
    spark: SparkSession,
    storage: Storage,
    dirs: Sequence[str],
    sizes: Mapping[str, int],
    tasks: Sequence[SegmentTask],
) -> list[FileRows]:
    """The read-back of the files under ``dirs`` with Spark (any Hadoop file system)."""
    from pyspark.sql import functions as F

    df = spark.read.option("basePath", storage.root).parquet(*[storage.uri(d) for d in dirs])
    ranges = spark.createDataFrame(
        [(t.queue, t.first_seq, t.last_seq) for t in tasks],
        "segment_queue string, segment long, segment_last long",
    )
    # The queue from the file's path (queue names never need escaping there).
    rows_of = df.select(F.input_file_name().alias("f"), "seq").withColumn(
        "file_queue", F.regexp_extract("f", r"/queue=([^/]+)/date=", 1)
    )
    in_segment = (F.col("file_queue") == F.col("segment_queue")) & F.col("seq").between(
        F.col("segment"), F.col("segment_last")
    )
    rows = (
        rows_of.join(F.broadcast(ranges), in_segment, "left")
        .groupBy("f", "segment")
        .agg(
            F.count("*").alias("n"),
            F.countDistinct("seq").alias("d"),
            F.min("seq").alias("lo"),
            F.max("seq").alias("hi"),
        )
        .collect()
    )
    out = []
    for r in rows:
        rel = "/".join(str(r["f"]).split("/")[-4:])
        queue, date = _where(rel)
        segment = None if r["segment"] is None else int(r["segment"])
        n, d, lo, hi = int(r["n"]), int(r["d"]), int(r["lo"]), int(r["hi"])
        out.append(FileRows(rel, queue, date, segment, n, d, lo, hi, sizes.get(rel, -1)))
    return out
