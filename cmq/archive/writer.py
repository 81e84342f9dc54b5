"""Parquet written by the Python workers (step 4 of `cmq.archive.job` on a local output root):
Spark only distributes the segment groups; each task reads its segments with the verified
reader (`cmq.archive.records.read_segments`) and writes them with pyarrow's Parquet writer
straight into the batch's staging directory, with no JVM row conversion. It returns what it
wrote (`FileRows` per file and segment) so the driver checks the files' footers instead of
reading their rows back.

Layout and columns are the Spark writer's (readers do not notice which one wrote a file): one
file per task and UTC day of ``sent_at`` under ``queue=Q/date=D/batch_id=B/``, columns
`FILE_SCHEMA` (``queue``, ``date`` and ``batch_id`` are the directories), ``sent_at`` as
Parquet ``TIMESTAMP(MILLIS, UTC)``, snappy, Spark's row metadata in the footer and no Arrow
schema (so pyarrow reads a file back with the types it gives a Spark-written one).

**Retries and speculation.** A file's name comes from its task's first segment
(``part-<first seq, 20 digits>.parquet``), not from the attempt: an attempt writes each file
under a hidden temporary name (``.part-...-<random>.tmp``, skipped by Spark and pyarrow), makes
it durable, then renames it over the final name. A re-run or speculative attempt of the same
task writes the same rows under the same name, so the batch holds exactly one file per task
and day whatever ran twice; an attempt that died leaves at most a hidden temporary file, which
the driver removes (`remove_temporaries`).
"""

from __future__ import annotations

import contextlib
import secrets
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from cmq.archive.readback import FileRows
from cmq.archive.records import READ_CONCURRENCY, SegmentTask, VerifiedSegment, read_segments
from cmq.archive.storage import LocalStorage

FILE_SCHEMA = pa.schema(
    [
        pa.field("seq", pa.int64()),
        pa.field("id", pa.string()),
        pa.field("body", pa.binary()),
        pa.field("sent_at", pa.timestamp("ms", tz="UTC")),
        pa.field("receive_count", pa.int32()),
        pa.field("attributes", pa.map_(pa.string(), pa.string())),
        pa.field("outcome", pa.string()),
        pa.field("priority", pa.int32()),
    ]
)
"""The columns of a file, in Spark's order (the partition columns are the directories).
``priority`` is absent from files written before it existed: readers take a missing one as 0."""

SPARK_ROW_METADATA = (
    '{"type":"struct","fields":['
    '{"name":"seq","type":"long","nullable":true,"metadata":{}},'
    '{"name":"id","type":"string","nullable":true,"metadata":{}},'
    '{"name":"body","type":"binary","nullable":true,"metadata":{}},'
    '{"name":"sent_at","type":"timestamp","nullable":true,"metadata":{}},'
    '{"name":"receive_count","type":"integer","nullable":true,"metadata":{}},'
    '{"name":"attributes","type":{"type":"map","keyType":"string","valueType":"string",'
    '"valueContainsNull":true},"nullable":true,"metadata":{}},'
    '{"name":"outcome","type":"string","nullable":true,"metadata":{}},'
    '{"name":"priority","type":"integer","nullable":true,"metadata":{}}]}'
)
"""Spark's description of `FILE_SCHEMA` (the footer key Spark writes; a Spark reader takes the
columns' Spark types from it, as from its own files)."""
_FOOTER = {b"org.apache.spark.sql.parquet.row.metadata": SPARK_ROW_METADATA.encode()}
_DICTIONARY = ["receive_count", "attributes.key_value.key", "outcome"]
"""Columns with few distinct values: dictionary-encoded (ids and bodies are not)."""

MAX_SEGMENTS_PER_TASK = 64
"""The most segments one task of the pyarrow writer reads and writes (`segments_per_task`)."""
ROW_GROUP_BYTES = 64 << 20
"""Rows of a day are buffered up to about this many bytes (Arrow) per row group."""
DAY_US = 86_400_000_000
TEMP_SUFFIX = ".tmp"


def part_name(first_seq: int) -> str:
    """The file a task whose first segment starts at ``first_seq`` writes for each day."""
    return f"part-{first_seq:020d}.parquet"


def segments_per_task(segments: int, slots: int, most: int = MAX_SEGMENTS_PER_TASK) -> int:
    """How many consecutive segments one task takes when the batch has ``segments`` and Spark
    runs ``slots`` tasks at once (its default parallelism): as few tasks as keep every slot
    busy (one wave: ``ceil(segments / slots)``; a task never spans two queues, so a batch of
    several queues may take a few more), at most ``most`` per task. A task's fixed
    costs (scheduling, a file a day, its fsyncs) are paid once per slot instead of once per 8
    segments, and no slot idles through a last, partial wave."""
    if segments < 1:
        return 1
    return max(1, min(most, -(-segments // max(1, slots))))


def partition_dir(queue: str, date: str, batch_id: str) -> str:
    return f"queue={queue}/date={date}/batch_id={batch_id}"


def days(table: pa.Table) -> dict[str, pa.Table]:
    """``table`` (records' columns, ``sent_at`` in any unit) split by the UTC day of
    ``sent_at``: ``yyyy-mm-dd`` -> its rows in their order."""
    us = table.column("sent_at").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    day = np.floor_divide(us.to_numpy(), DAY_US)
    if len(day) == 0:
        return {}
    first = day[0]
    if np.all(day == first):
        return {_date(int(first)): table}
    return {_date(int(d)): table.filter(pa.array(day == d)) for d in np.unique(day)}


def _date(day: int) -> str:
    return str(np.datetime64(day, "D"))


def file_columns(table: pa.Table) -> pa.Table:
    """A verified segment's table (`cmq.archive.records.ARROW_SCHEMA` without ``batch_id``) as
    the columns of a file (`FILE_SCHEMA`); ``sent_at`` holds whole milliseconds."""
    cols = [
        table.column(f.name).cast(f.type) if f.name == "sent_at" else table.column(f.name)
        for f in FILE_SCHEMA
    ]
    return pa.Table.from_arrays(cols, schema=FILE_SCHEMA)


@dataclass(slots=True)
class _DayFile:
    """One day's file being written by one attempt."""

    rel: str
    temp: str
    writer: pq.ParquetWriter | None = None
    pending: list[pa.Table] = field(default_factory=list)
    pending_bytes: int = 0

    def add(self, part: pa.Table, path: str) -> None:
        self.pending.append(part)
        self.pending_bytes += part.nbytes
        if self.pending_bytes >= ROW_GROUP_BYTES:
            self.flush(path)

    def flush(self, path: str) -> None:
        if not self.pending:
            return
        if self.writer is None:
            self.writer = pq.ParquetWriter(
                path,
                FILE_SCHEMA,
                compression="snappy",
                use_dictionary=_DICTIONARY,
                store_schema=False,
                write_statistics=True,
            )
            self.writer.add_key_value_metadata(_FOOTER)
        table = pa.concat_tables(self.pending)
        self.writer.write_table(table, row_group_size=max(1, table.num_rows))
        self.pending = []
        self.pending_bytes = 0

    def close(self, path: str) -> None:
        self.flush(path)
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class GroupStats(msgspec.Struct, frozen=True):
    """What one task wrote: per file and segment, the rows (see `FileRows`)."""

    files: list[FileRows]


_STATS = msgspec.json.Decoder(GroupStats)
_TASKS = msgspec.json.Decoder(list[SegmentTask])


def decode_stats(data: bytes) -> list[FileRows]:
    return _STATS.decode(data).files


@dataclass(frozen=True, slots=True)
class WriteSpec:
    """What every task of a batch shares; called (in a Spark Python worker) with one group of
    segments (`cmq.archive.source.encode_tasks`), it reads and writes them (`write_group`) and
    returns the encoded `GroupStats`."""

    root: str
    """The output root (a local path or ``file:`` URI, as every executor sees it)."""
    staging: str
    """The batch's staging directory, relative to the root."""
    batch_id: str
    timeout: float = 60.0
    binary: bool = True
    concurrency: int = READ_CONCURRENCY

    def __call__(self, group: str | bytes) -> bytes:
        tasks = _TASKS.decode(group)
        segments = read_segments(tasks, self.timeout, self.binary, self.concurrency)
        files = write_group(LocalStorage(self.root), self.staging, self.batch_id, segments)
        return msgspec.json.encode(GroupStats(files))


def write_group(
    storage: LocalStorage, staging: str, batch_id: str, segments: Iterable[VerifiedSegment]
) -> list[FileRows]:
    """Write ``segments`` (verified, of one queue, in seq order) as one Parquet file per UTC day
    under ``staging/queue=Q/date=D/batch_id=B/`` (see the module docstring: temporary name,
    fsync, rename over the final name). Returns per file and segment the rows written, their
    distinct seqs and seq range, with the file's size; ``rel`` is where the file will be once
    the staging directory's partitions are moved under the root."""
    open_files: dict[str, _DayFile] = {}
    seqs: dict[tuple[str, int], list[np.ndarray]] = defaultdict(list)
    first: int | None = None
    queue = ""
    token = secrets.token_hex(6)
    try:
        for seg in segments:
            if first is None:
                first, queue = seg.task.first_seq, seg.task.queue
            elif seg.task.queue != queue:
                raise ValueError(f"a task's segments are of one queue: {queue}, {seg.task.queue}")
            for date, part in days(seg.table).items():
                day = open_files.get(date)
                if day is None:
                    rel = f"{partition_dir(queue, date, batch_id)}/{part_name(first)}"
                    temp = _under(staging, f"{rel.rsplit('/', 1)[0]}/.{part_name(first)}-{token}")
                    day = open_files[date] = _DayFile(rel, temp + TEMP_SUFFIX)
                    storage.mkdirs(day.temp.rsplit("/", 1)[0])
                day.add(file_columns(part), storage.local_path(day.temp))
                seqs[(date, seg.task.first_seq)].append(
                    part.column("seq").to_numpy().astype(np.int64)
                )
        for day in open_files.values():
            day.close(storage.local_path(day.temp))
        for day in open_files.values():
            storage.replace(day.temp, _under(staging, day.rel))
    except BaseException:
        for day in open_files.values():
            with contextlib.suppress(Exception):
                if day.writer is not None:
                    day.writer.close()
            with contextlib.suppress(Exception):
                storage.delete(day.temp)
        raise
    out: list[FileRows] = []
    for (date, segment), parts in sorted(seqs.items()):
        day = open_files[date]
        size = storage.size(_under(staging, day.rel))
        s = np.concatenate(parts)
        out.append(
            FileRows(
                day.rel,
                queue,
                date,
                segment,
                len(s),
                len(np.unique(s)),
                int(s.min()),
                int(s.max()),
                -1 if size is None else size,
            )
        )
    return out


def _under(directory: str, rel: str) -> str:
    return f"{directory}/{rel}" if directory else rel


def remove_temporaries(storage: LocalStorage, dirs: Sequence[str]) -> list[str]:
    """Remove what attempts that died left in ``dirs`` (hidden ``*.tmp`` files); the removed
    paths."""
    removed = []
    for d in dirs:
        for e in storage.list(d):
            if not e.is_dir and e.name.startswith(".") and e.name.endswith(TEMP_SUFFIX):
                storage.delete(f"{d}/{e.name}")
                removed.append(f"{d}/{e.name}")
    return removed


def footer_check(
    storage: LocalStorage, stats: Sequence[FileRows], listed: dict[str, int]
) -> list[str]:
    """What is wrong with the written files against the tasks' ``stats`` (empty: nothing):
    the batch's files (``listed``: rel -> size) are exactly the reported ones with the reported
    sizes, and each file's footer counts the reported rows, its ``seq`` statistics span the
    reported range. Reads only the footers."""
    problems: list[str] = []
    per_file: dict[str, list[FileRows]] = defaultdict(list)
    for f in stats:
        per_file[f.rel].append(f)
    for rel in sorted(set(listed) - set(per_file)):
        problems.append(f"{rel}: a file no task reported")
    for rel, fs in sorted(per_file.items()):
        if rel not in listed:
            problems.append(f"{rel}: reported by a task but not in the output")
            continue
        if any(f.size != listed[rel] for f in fs):
            problems.append(f"{rel}: {listed[rel]} bytes, the task reported {fs[0].size}")
            continue
        meta = pq.read_metadata(storage.local_path(rel))
        rows = sum(f.rows for f in fs)
        lo, hi = min(f.min_seq for f in fs), max(f.max_seq for f in fs)
        got = _seq_range(meta)
        if meta.num_rows != rows or got != (lo, hi):
            problems.append(
                f"{rel}: the footer counts {meta.num_rows} rows, seqs {got}; the task wrote "
                f"{rows} rows, seqs {(lo, hi)}"
            )
    return problems


def _seq_range(meta: pq.FileMetaData) -> tuple[int, int] | None:
    """The ``seq`` column's (min, max) from the row groups' statistics (None: none kept)."""
    at = FILE_SCHEMA.get_field_index("seq")
    lows, highs = [], []
    for i in range(meta.num_row_groups):
        st = meta.row_group(i).column(at).statistics
        if st is None or not st.has_min_max:
            return None
        lows.append(int(st.min))
        highs.append(int(st.max))
    if not lows:
        return None
    return min(lows), max(highs)
