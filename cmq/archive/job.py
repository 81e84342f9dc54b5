"""The archive job: released segments -> Parquet under ``--out`` -> manifest -> MarkArchived.

One run is one batch (``batch_id``, new per run). This module holds the run and its write
phase (steps 3 to 6); steps 1 and 2 settle what earlier runs left (`cmq.archive.recovery`).
Its steps, each re-entrant:

1. **Recover** (`cmq.archive.recovery`): segments named by a committed manifest but still
   released are marked archived with that manifest's batch id.
2. **Collect garbage** (`cmq.archive.recovery`): the output of batches with neither a
   manifest nor a live claim is removed.
3. **Plan and claim.** The released segments of the chosen queues (default: every queue with
   ``archive`` set) not claimed by another live batch, lowest seqs first, at most
   ``max_segments``, are claimed for this batch (contract §3) for ``claim_ttl_ms``. Only what the
   cluster granted is archived: two jobs at once never hold the same segment.
4. **Write.** Exactly the claimed segments are read (each checked end to end) and written as
   Parquet partitioned ``queue=/date=/batch_id=`` into ``_staging/<batch>``, one file per Spark
   task (a run of segments of one queue) and day; its directories are then moved under the
   root. On a local root (``writer`` ``auto`` or ``pyarrow``) Spark only runs the tasks: each
   reads its segments and writes its files with pyarrow in the Python worker, under names
   derived from its first segment (a retried or speculative attempt replaces them), and
   reports what it wrote (`cmq.archive.writer`). Elsewhere (``hdfs:``, ``s3a:``, ... or
   ``writer`` ``spark``) the `cmq` data source is read into a DataFrame and Spark writes it.
5. **Verify and commit.** The claims are renewed (refused -> abort: another batch took a segment
   after ours expired); what each file holds per segment (rows, distinct seqs and seq range:
   every row inside a segment of the batch, no seq twice, each segment's rows = its listed
   count) comes from the tasks' reports checked against the files (exactly the reported files,
   sizes, and each footer's row count and ``seq`` range: `cmq.archive.writer.footer_check`),
   or, after Spark's writer, from reading the files' seqs back (`cmq.archive.readback`); the
   manifest is written to a temporary name and renamed to ``_manifests/<batch>.json``: the
   commit point.
6. **Mark archived** exactly the manifest's segments (contract §4). Refused -> error; the next
   run's recovery retries.

A crash before step 5's rename leaves garbage (removed by a later run once the claims expired)
and released segments (archived by a later batch); a crash after it leaves a manifest that a
later run's recovery completes. So after any crash and a rerun every record is in the output
exactly once and every archived segment is released from the cluster. Assumption: a job does
not stall for longer than the claim TTL between renewing its claims and its MarkArchived; and
clocks of the job and the nodes agree within a small fraction of the TTL (claims expire on the
proposing node's clock).

Crash points for tests: environment ``CMQ_ARCHIVE_CRASH_AT`` = ``before-write``, ``after-write``
or ``after-manifest`` makes the process exit at once (``os._exit(CRASH_EXIT)``) at that step.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cmq.archive import manifest as mf
from cmq.archive import readback
from cmq.archive.errors import (
    ArchiveError,
    ConflictingClaim,
    InvalidArgument,
    VerificationFailed,
    WriteFailed,
)
from cmq.archive.readback import FileRows
from cmq.archive.records import SegmentTask, plan_tasks
from cmq.archive.recovery import STAGING, Recovery, mark_archived
from cmq.archive.remote import ClusterClient, Segment
from cmq.archive.storage import LocalStorage, Storage, open_storage
from cmq.archive.summary import render
from cmq.archive.writer import footer_check, remove_temporaries

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

CRASH_ENV = "CMQ_ARCHIVE_CRASH_AT"
CRASH_POINTS = ("before-write", "after-write", "after-manifest")
CRASH_EXIT = 86
DEFAULT_CLAIM_TTL_MS = 600_000
WRITERS = ("auto", "pyarrow", "spark")


def crash_point(step: str) -> None:
    """Exit the process at once, without cleanup, if ``CMQ_ARCHIVE_CRASH_AT`` names ``step``."""
    if os.environ.get(CRASH_ENV) == step:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(CRASH_EXIT)


def new_batch_id(now: float) -> str:
    """``b-<UTC yyyymmddThhmmss>-<8 hex>``: sortable by start time, unique per run."""
    return "b-" + time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + "-" + secrets.token_hex(4)


@dataclass(frozen=True, slots=True)
class JobConfig:
    urls: tuple[str, ...]
    out: str
    queues: tuple[str, ...] = ()
    """Queues to archive; empty = every queue whose attribute ``archive`` is true."""
    max_segments: int | None = None
    claim_ttl_ms: int = DEFAULT_CLAIM_TTL_MS
    timeout: float = 60.0
    """Seconds per HTTP call (and per records stream)."""
    binary: bool = True
    """Ask nodes for the binary segment read (False: the JSON lines, the older form)."""
    segments_per_task: int | None = None
    """Consecutive segments of one queue a Spark task reads and writes as one file a day
    (None: for the pyarrow writer, the batch spread over Spark's default parallelism in one
    wave, at most 64 a task (`cmq.archive.writer.segments_per_task`); for Spark's writer, the
    data source's default, 8). Fewer: more tasks, more files."""
    writer: str = "auto"
    """Who writes the Parquet (`WRITERS`): ``pyarrow``, the Python workers (local roots only);
    ``spark``, Spark's writer from the ``cmq`` data source; ``auto``, pyarrow on a local root,
    Spark elsewhere."""


@dataclass(frozen=True, slots=True)
class Summary:
    """What one run did. ``bytes``: Parquet bytes written; ``source_bytes``: the segments'
    stored bytes as listed."""

    batch_id: str
    segments: int
    rows: int
    bytes: int
    source_bytes: int
    seconds: float
    recovered: int = 0
    """Segments marked archived from earlier manifests (crashed runs)."""
    garbage: tuple[str, ...] = ()
    """Batches whose leftover output was removed."""
    skipped: int = 0
    """Released segments left to other batches (claimed by them)."""
    spark_seconds: float = 0.0
    """Of ``seconds``, the time spent starting Spark (0 when it was running already)."""

    def render(self) -> str:
        rate = self.rows / self.seconds if self.seconds > 0 else 0.0
        return render(
            f"batch {self.batch_id}: {self.segments} segments, {self.rows} rows, "
            f"{self.bytes / 1e6:.2f} MB Parquet ({self.source_bytes / 1e6:.2f} MB of segments) "
            f"in {self.seconds:.1f} s ({rate:,.0f} rows/s)",
            f"recovered: {self.recovered} segments of earlier batches marked archived"
            if self.recovered
            else "",
            "removed the output of crashed batches: " + ", ".join(self.garbage)
            if self.garbage
            else "",
            f"skipped: {self.skipped} segments claimed by other batches" if self.skipped else "",
            f"of which {self.spark_seconds:.1f} s starting Spark" if self.spark_seconds else "",
        )


@dataclass(slots=True)
class ArchiveJob:
    """One batch (see the module docstring). ``spark`` gives the session when the job first needs
    it (a run with nothing to write on a local root never starts one); ``clock`` returns seconds
    since the epoch."""

    spark_factory: Callable[[], SparkSession]
    config: JobConfig
    clock: Callable[[], float] = time.time
    batch_id: str = ""
    progress: Callable[[str], None] = field(default=lambda step: None)
    """Told each step as it starts (`cmq archive` prints them on stderr)."""
    client: ClusterClient = field(init=False)
    storage: Storage = field(init=False)
    recovery: Recovery = field(init=False)
    """Steps 1 and 2 (`cmq.archive.recovery`)."""
    _dirs: list[str] = field(init=False, default_factory=list)
    _written: list[FileRows] | None = field(init=False, default=None)
    """What the Python workers reported writing (None: Spark's writer wrote the files)."""
    _spark_seconds: float = field(init=False, default=0.0)
    _session: SparkSession | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.batch_id = self.batch_id or new_batch_id(self.clock())
        self.client = ClusterClient(self.config.urls, self.config.timeout)
        self.storage = open_storage(self.config.out, lambda: self.spark)
        self.recovery = Recovery(self.client, self.storage, self.config.queues, self.clock)
        if self.config.writer not in WRITERS:
            raise InvalidArgument(f"writer {self.config.writer!r}: one of {', '.join(WRITERS)}")
        if self.config.writer == "pyarrow" and not isinstance(self.storage, LocalStorage):
            raise InvalidArgument(
                f"writer pyarrow writes a local output root only; {self.storage.root} is "
                "written by Spark (writer auto or spark)"
            )

    @property
    def spark(self) -> SparkSession:
        if self._session is None:
            start = time.monotonic()
            self._session = self.spark_factory()
            self._spark_seconds = time.monotonic() - start
        return self._session

    # -- the run -------------------------------------------------------------------------------
    def run(self) -> Summary:
        start = time.monotonic()
        self.progress("reading manifests")
        manifests = self.recovery.load_manifests()
        self.progress(f"recovering from {len(manifests)} manifests")
        recovered = self.recovery.recover(manifests)
        garbage = self.recovery.collect_garbage({m.batch_id for m in manifests})
        self.progress("listing and claiming released segments")
        tasks, skipped = self.plan_and_claim()
        if not tasks:
            seconds = time.monotonic() - start
            return Summary(
                self.batch_id, 0, 0, 0, 0, seconds, recovered, garbage, skipped, self._spark_seconds
            )
        crash_point("before-write")
        try:
            how = "pyarrow in Spark tasks" if self.uses_pyarrow() else "Spark's writer"
            self.progress(f"writing {len(tasks)} segments with {how} (batch {self.batch_id})")
            self.write(tasks)
            crash_point("after-write")
            self.progress("verifying the output and committing the manifest")
            self.renew(tasks)
            manifest = self.build_manifest(tasks)
            self.commit(manifest)
        except BaseException:
            self.discard()
            raise
        crash_point("after-manifest")
        self.progress(f"marking {len(manifest.segments)} segments archived")
        self.mark(manifest)
        return Summary(
            self.batch_id,
            len(manifest.segments),
            manifest.rows,
            manifest.bytes,
            sum(t.bytes for t in tasks),
            time.monotonic() - start,
            recovered,
            garbage,
            skipped,
            self._spark_seconds,
        )

    # -- 1./2. recover, collect garbage: `Recovery`'s, here for callers holding a job ------------
    def load_manifests(self) -> list[mf.Manifest]:
        return self.recovery.load_manifests()

    def check_files(self, m: mf.Manifest, retired: Set[str] = frozenset()) -> None:
        self.recovery.check_files(m, retired)

    def collect_garbage(self, committed: set[str]) -> tuple[str, ...]:
        return self.recovery.collect_garbage(committed)

    # -- 3. plan and claim -------------------------------------------------------------------------
    def plan_and_claim(self) -> tuple[list[SegmentTask], int]:
        now_ms = int(self.clock() * 1000)
        others = 0

        def free(queue: str, seg: Segment) -> bool:
            nonlocal others
            c = seg.claim
            taken = c is not None and c.batch_id != self.batch_id and c.expires_at_ms > now_ms
            others += taken
            return not taken

        tasks = plan_tasks(
            self.client, self.config.queues or None, self.config.max_segments, keep=free
        )
        by_queue: dict[str, list[SegmentTask]] = defaultdict(list)
        for t in tasks:
            by_queue[t.queue].append(t)
        granted: list[SegmentTask] = []
        for queue, ts in sorted(by_queue.items()):
            res = self.client.claim(
                queue, self.batch_id, [t.first_seq for t in ts], self.config.claim_ttl_ms
            )
            ok = set(res.claimed)
            granted.extend(t for t in ts if t.first_seq in ok)
            others += len(ts) - len([t for t in ts if t.first_seq in ok])
        return granted, others

    # -- 4. write --------------------------------------------------------------------------------
    def uses_pyarrow(self) -> bool:
        """Whether the Python workers write the Parquet (`cmq.archive.writer`): on a local root
        unless ``writer`` is ``spark``; other roots are written by Spark's writer."""
        return isinstance(self.storage, LocalStorage) and self.config.writer != "spark"

    def write(self, tasks: Sequence[SegmentTask]) -> None:
        staging = f"{STAGING}/{self.batch_id}"
        self._dirs.append(staging)
        if self.uses_pyarrow():
            self._write_pyarrow(tasks, staging)
        else:
            self._write_spark(tasks, staging)
        for q in self.storage.list(staging):
            if not (q.is_dir and q.name.startswith("queue=")):
                continue
            for d in self.storage.list(f"{staging}/{q.name}"):
                for b in self.storage.list(f"{staging}/{q.name}/{d.name}"):
                    rel = f"{q.name}/{d.name}/{b.name}"
                    if isinstance(self.storage, LocalStorage):
                        remove_temporaries(self.storage, [f"{staging}/{rel}"])
                    self.storage.mkdirs(f"{q.name}/{d.name}")
                    self._dirs.append(rel)
                    if not self.storage.rename(f"{staging}/{rel}", rel):
                        raise WriteFailed(f"could not move {staging}/{rel} to {rel}")
        self.storage.delete(staging)

    def _write_pyarrow(self, tasks: Sequence[SegmentTask], staging: str) -> None:
        """Spark runs one task per group of segments; each reads and writes its own files
        (`cmq.archive.writer.WriteSpec`) and hands back what it wrote."""
        from cmq.archive.source import encode_tasks, group_tasks
        from cmq.archive.writer import WriteSpec, decode_stats, segments_per_task

        sc = self.spark.sparkContext
        size = self.config.segments_per_task or segments_per_task(len(tasks), sc.defaultParallelism)
        groups = group_tasks(tasks, size)
        spec = WriteSpec(
            self.storage.root, staging, self.batch_id, self.config.timeout, self.config.binary
        )
        sc.setJobDescription(f"cmq archive {self.batch_id}: {len(tasks)} segments")
        try:
            encoded = [encode_tasks(g) for g in groups]
            out = sc.parallelize(encoded, len(encoded)).map(spec).collect()
        except Exception as e:
            raise WriteFailed(_first_lines(str(e))) from None
        finally:
            sc.setLocalProperty("spark.job.description", None)  # type: ignore[arg-type]
        self._written = [f for data in out for f in decode_stats(data)]

    def _write_spark(self, tasks: Sequence[SegmentTask], staging: str) -> None:
        """The ``cmq`` data source read into a DataFrame, written by Spark's Parquet writer
        (any Hadoop file system)."""
        from pyspark.sql import functions as F

        from cmq.archive.source import encode_tasks, register

        register(self.spark)
        self.spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MILLIS")
        reader = (
            self.spark.read.format("cmq")
            .option("segments", encode_tasks(tasks))
            .option("batch_id", self.batch_id)
            .option("timeout", str(self.config.timeout))
            .option("binary", "true" if self.config.binary else "false")
        )
        if self.config.segments_per_task is not None:
            reader = reader.option("segments_per_partition", str(self.config.segments_per_task))
        df = reader.load()
        # The UTC day, whatever the session's time zone: whole days since the epoch.
        days = F.floor(F.unix_micros(F.col("sent_at")) / F.lit(86_400_000_000)).cast("int")
        df = df.withColumn("date", F.date_from_unix_date(days).cast("string"))
        try:
            df.write.partitionBy("queue", "date", "batch_id").mode("error").parquet(
                self.storage.uri(staging)
            )
        except Exception as e:
            raise WriteFailed(_first_lines(str(e))) from None

    def discard(self) -> None:
        """Best effort: remove this batch's output (it has no manifest)."""
        for d in self._dirs:
            with contextlib.suppress(Exception):  # a later run's garbage collection removes it
                self.storage.delete(d)

    # -- 5. verify and commit --------------------------------------------------------------------
    def renew(self, tasks: Sequence[SegmentTask]) -> None:
        by_queue: dict[str, list[int]] = defaultdict(list)
        for t in tasks:
            by_queue[t.queue].append(t.first_seq)
        for queue, firsts in sorted(by_queue.items()):
            res = self.client.claim(queue, self.batch_id, firsts, self.config.claim_ttl_ms)
            if res.refused:
                raise ConflictingClaim(f"renewing the claims of {self.batch_id}: {res.refused}")

    def file_stats(self, tasks: Sequence[SegmentTask]) -> list[FileRows]:
        """What each file of the batch holds per segment of ``tasks``: as the Python workers
        reported it, checked against the files' footers (`cmq.archive.writer.footer_check`), or
        read back (`cmq.archive.readback`: pyarrow on a local root, Spark elsewhere)."""
        files: dict[str, int] = {}
        dirs = [d for d in self._dirs if not d.startswith(STAGING)]
        for d in dirs:
            for e in self.storage.list(d):
                if not e.is_dir and not e.name.startswith(("_", ".")):
                    files[f"{d}/{e.name}"] = e.size
        if self._written is not None and isinstance(self.storage, LocalStorage):
            problems = footer_check(self.storage, self._written, files)
            if problems:
                raise VerificationFailed("; ".join(problems[:10]))
            return list(self._written)
        if not files:
            return []
        if isinstance(self.storage, LocalStorage):
            paths = {rel: self.storage.local_path(rel) for rel in files}
            out = readback.local_rows(paths, files, tasks)
        else:
            out = readback.spark_rows(self.spark, self.storage, dirs, files, tasks)
        for f in out:
            if f.rel not in files:
                raise VerificationFailed(f"read back a file not in the batch: {f.rel}")
        missing = set(files) - {f.rel for f in out}
        if missing:
            raise VerificationFailed(f"files with no rows: {sorted(missing)}")
        return out

    def build_manifest(self, tasks: Sequence[SegmentTask]) -> mf.Manifest:
        """Check the written files against ``tasks`` and describe them (step 5): every row
        lies in a segment of the batch, no seq twice, each segment's rows = its listed count."""
        stats = self.file_stats(tasks)
        by_task: dict[tuple[str, int], list[FileRows]] = defaultdict(list)
        for f in stats:
            if f.segment is None or f.rows != f.distinct:
                raise VerificationFailed(
                    f"{f.rel}: {f.rows} rows, {f.distinct} distinct seqs in "
                    f"[{f.min_seq}, {f.max_seq}]: "
                    + ("outside every segment of the batch" if f.segment is None else "repeated")
                )
            by_task[(f.queue, f.segment)].append(f)
        segments = []
        for t in tasks:
            fs = by_task.get((t.queue, t.first_seq), [])
            rows = sum(f.rows for f in fs)
            if rows != t.count:
                raise VerificationFailed(
                    f"segment {t.queue}/{t.first_seq}: {rows} rows written, {t.count} listed"
                )
            segments.append(
                mf.ManifestSegment(
                    t.queue,
                    t.first_seq,
                    t.last_seq,
                    t.count,
                    t.checksum,
                    rows,
                    min((f.min_seq for f in fs), default=None),
                    max((f.max_seq for f in fs), default=None),
                    sorted(f.rel for f in fs),
                )
            )
        per_file: dict[str, list[FileRows]] = defaultdict(list)
        for f in stats:
            per_file[f.rel].append(f)
        files = [
            mf.ManifestFile(
                rel,
                fs[0].queue,
                fs[0].date,
                sum(f.rows for f in fs),
                fs[0].size,
                min(f.min_seq for f in fs),
                max(f.max_seq for f in fs),
            )
            for rel, fs in sorted(per_file.items())
        ]
        return mf.Manifest(
            mf.ARCHIVE_VERSION,
            self.batch_id,
            int(self.clock() * 1000),
            self.storage.root,
            sum(f.rows for f in files),
            sum(f.bytes for f in files),
            segments,
            files,
        )

    def commit(self, manifest: mf.Manifest) -> None:
        """Write the manifest under a temporary name, then rename it into place."""
        self.storage.mkdirs(mf.MANIFESTS)
        tmp = mf.temp_path(self.batch_id)
        self.storage.write(tmp, mf.encode(manifest))
        if not self.storage.rename(tmp, mf.manifest_path(self.batch_id)):
            raise ArchiveError(f"could not rename {tmp} to {mf.manifest_path(self.batch_id)}")

    # -- 6. mark archived ------------------------------------------------------------------------
    def mark(self, manifest: mf.Manifest) -> None:
        by_queue: dict[str, list[int]] = defaultdict(list)
        for s in manifest.segments:
            by_queue[s.queue].append(s.first_seq)
        for queue, firsts in sorted(by_queue.items()):
            mark_archived(self.client, queue, manifest.batch_id, firsts)


def _first_lines(text: str, n: int = 12) -> str:
    """The lines of a Spark error worth showing: ours first (``segment_unreadable`` etc.)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    ours = [ln for ln in lines if "cmq.archive.errors" in ln or "every replica failed" in ln]
    return "\n".join((ours or lines)[:n])
