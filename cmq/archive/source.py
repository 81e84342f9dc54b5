"""The ``cmq`` PySpark data source: the released segments of a cmq cluster's queues, one
`InputPartition` per segment, each read from one replica (a follower when possible) and checked
end to end before any of its rows is handed to Spark (`cmq.archive.records`).

    from cmq.archive.source import register
    register(spark)
    df = (spark.read.format("cmq")
          .option("url", "http://a:8080,http://b:8080")
          .option("queues", "orders,invoices")      # default: every queue with archive=true
          .load())

Options: ``url`` (required; comma-separated), ``queues`` (comma-separated), ``max_segments``
(at most that many segments, lowest seqs first, per read), ``timeout`` (seconds per HTTP call,
default 60), ``batch_id`` (the value of the ``batch_id`` column; null when absent), and
``segments`` (JSON list of `SegmentTask`: read exactly these; the archive job uses it for the
segments it claimed). Reading only lists and streams; it never claims or archives anything.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import msgspec
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from cmq.archive.errors import InvalidArgument
from cmq.archive.records import SegmentTask, plan_tasks, read_segment
from cmq.archive.remote import ClusterClient, split_urls

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

SPARK_SCHEMA = StructType(
    [
        StructField("queue", StringType()),
        StructField("seq", LongType()),
        StructField("id", StringType()),
        StructField("body", BinaryType()),
        StructField("sent_at", TimestampType()),
        StructField("receive_count", IntegerType()),
        StructField("attributes", MapType(StringType(), StringType())),
        StructField("outcome", StringType()),
        StructField("batch_id", StringType()),
    ]
)

_TASKS = msgspec.json.Decoder(list[SegmentTask])


def encode_tasks(tasks: Sequence[SegmentTask]) -> str:
    """The ``segments`` option's value for ``tasks``."""
    return msgspec.json.encode(list(tasks)).decode()


class SegmentPartition(InputPartition):
    """One segment to read (its `SegmentTask`, JSON-encoded so it pickles small)."""

    def __init__(self, task: SegmentTask) -> None:
        super().__init__(msgspec.json.encode(task))


class CmqReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.options
        if opts.get("segments"):
            tasks = _TASKS.decode(opts["segments"])
        else:
            urls = opts.get("url") or opts.get("urls") or ""
            if not split_urls(urls):
                raise InvalidArgument("the cmq data source needs option url=URL[,URL...]")
            client = ClusterClient(urls, float(opts.get("timeout", "60")))
            queues = [q.strip() for q in opts.get("queues", "").split(",") if q.strip()]
            max_segments = int(opts["max_segments"]) if opts.get("max_segments") else None
            tasks = plan_tasks(client, queues or None, max_segments)
        return [SegmentPartition(t) for t in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        task = msgspec.json.decode(partition.value, type=SegmentTask)
        segment = read_segment(task, float(self.options.get("timeout", "60")))
        yield from segment.batches(self.options.get("batch_id") or None)


class CmqDataSource(DataSource):
    """``spark.read.format("cmq")`` (see the module docstring)."""

    @classmethod
    def name(cls) -> str:
        return "cmq"

    def schema(self) -> StructType:
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> CmqReader:
        return CmqReader(dict(self.options))


_REGISTERED: weakref.WeakSet[Any] = weakref.WeakSet()
"""Spark contexts ``cmq`` is registered in."""


def register(spark: SparkSession) -> None:
    """Make ``format("cmq")`` available in ``spark`` (once per Spark context)."""
    if spark.sparkContext not in _REGISTERED:
        spark.dataSource.register(CmqDataSource)
        _REGISTERED.add(spark.sparkContext)
