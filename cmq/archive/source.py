"""The ``cmq`` PySpark data source: the released segments of a cmq cluster's queues, one
`InputPartition` per run of up to ``segments_per_partition`` segments of one queue, each
segment read from one replica (a follower when possible; a partition's reads run
``read_concurrency`` at once, spread over the replicas) and checked end to end before any of
its rows is handed to Spark (`cmq.archive.records`).

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
segments it claimed), ``binary`` (``true``, the default: ask for the binary segment read, which
a node without it answers with JSON lines; ``false``: JSON lines only),
``segments_per_partition`` (default 8: consecutive segments of one queue read by one Spark task,
so written to one file per day) and ``read_concurrency`` (default 4: segments a task fetches
and decodes at once, on threads, spread over the replicas). Reading only lists and streams; it
never claims or archives anything.
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
from cmq.archive.records import READ_CONCURRENCY, SegmentTask, plan_tasks, read_segments
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
        StructField("priority", IntegerType()),
        StructField("batch_id", StringType()),
    ]
)

_TASKS = msgspec.json.Decoder(list[SegmentTask])


def encode_tasks(tasks: Sequence[SegmentTask]) -> str:
    """The ``segments`` option's value for ``tasks``."""
    return msgspec.json.encode(list(tasks)).decode()


DEFAULT_GROUP = 8
"""Segments per partition (``segments_per_partition``)."""


class SegmentPartition(InputPartition):
    """Segments of one queue read by one Spark task (their `SegmentTask`s, JSON-encoded so
    they pickle small), at most ``read_concurrency`` at once."""

    def __init__(self, tasks: Sequence[SegmentTask]) -> None:
        super().__init__(msgspec.json.encode(list(tasks)))


def group_tasks(tasks: Sequence[SegmentTask], size: int) -> list[list[SegmentTask]]:
    """``tasks`` in order, cut into runs of at most ``size`` segments of one queue."""
    groups: list[list[SegmentTask]] = []
    for t in tasks:
        if groups and len(groups[-1]) < size and groups[-1][-1].queue == t.queue:
            groups[-1].append(t)
        else:
            groups.append([t])
    return groups


def _positive(options: dict[str, str], name: str, default: int) -> int:
    raw = options.get(name)
    if raw is None:
        return default
    if not raw.isdigit() or int(raw) < 1:
        raise InvalidArgument(f"option {name} must be a positive integer; got {raw!r}")
    return int(raw)


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
        size = _positive(opts, "segments_per_partition", DEFAULT_GROUP)
        return [SegmentPartition(g) for g in group_tasks(tasks, size)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        tasks = _TASKS.decode(partition.value)
        binary = self.options.get("binary", "true").lower() != "false"
        timeout = float(self.options.get("timeout", "60"))
        concurrency = _positive(self.options, "read_concurrency", READ_CONCURRENCY)
        batch_id = self.options.get("batch_id") or None
        for segment in read_segments(tasks, timeout, binary, concurrency):
            yield from segment.batches(batch_id)


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
