"""``cmq archive compact``: rewrite a queue's small files of a day into files of a target size,
committed through a compaction manifest (`cmq.archive.manifest`, kind ``compaction``).

    cmq archive compact --out ROOT [--queue Q ...] [--date YYYY-MM-DD ...]
                        [--target-bytes 134217728] [--json]

Pure pyarrow (read and write Parquet, same schema): no Spark and no JVM on a local root; on
another root the files go through `HadoopStorage` (Spark's JVM, started for that only). One run
is one compaction (id ``c-<UTC time>-<8 hex>``); its steps, each re-entrant:

1. **Check the arguments** against the live files (`cmq.archive.reader`): an unknown queue or
   date directory, a malformed date, a target under 1 MiB: `InvalidArgument`, nothing changed.
2. **Finish earlier compactions**: the files a committed compaction manifest retires and that
   are still there (a crash after its commit) are removed now.
3. **Collect garbage**: output of a compaction with no committed manifest (``batch_id=c-...``
   directories, ``_manifests/_tmp-c-...``) is what a crashed run left: removed. So two
   compactions must not run at once on one root (the archive job may: see below).
4. **Plan** (`plan`): per (queue, date), never across, the live files smaller than half the
   target, in seq order, packed into bins while a file brings its bin closer to the target
   (counting a file's data bytes, without its footer: what it adds to the new file); a bin of
   one file is left alone. Its input files must exist with their recorded sizes.
5. **Write** each bin as one file ``queue=Q/date=D/batch_id=<id>/part-NNNNN-<id>.parquet``
   (rows sorted by seq; written as ``_tmp-...`` and renamed, so no partial file is ever under a
   name readers look at), then read back: its seqs must be exactly its inputs' seqs.
6. **Commit**: the manifest (the files added and the files retired) is written under a
   temporary name, made durable and renamed to ``_manifests/<id>.json``.
7. **Remove** the retired files (and batch directories left empty).

A crash before (6) leaves garbage that step 3 of the next run removes (the reader never looked
at it); a crash after it leaves retired files that step 2 removes (the reader already ignores
them). The archive job running at the same time is unaffected: a compaction only reads files
named by manifests committed before it started, and the job leaves ``c-`` batches to it.

Crash points for tests (`cmq.archive.job.crash_point`): ``CMQ_ARCHIVE_CRASH_AT`` =
``compact-before-manifest``, ``compact-after-manifest`` or ``compact-mid-removal`` (after the
first retired file is removed).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import secrets
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cmq.archive import manifest as mf
from cmq.archive import reader
from cmq.archive.errors import ArchiveError, InvalidArgument, ManifestInvalid, VerificationFailed
from cmq.archive.job import crash_point
from cmq.archive.recovery import batch_folders
from cmq.archive.storage import LocalStorage, Storage, open_storage
from cmq.archive.summary import LazySpark, finish, render

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

DEFAULT_TARGET = 128 * 1024 * 1024
MIN_TARGET = 1024 * 1024
CRASH_POINTS = ("compact-before-manifest", "compact-after-manifest", "compact-mid-removal")


def new_compaction_id(now: float) -> str:
    """``c-<UTC yyyymmddThhmmss>-<8 hex>`` (`mf.COMPACTION_PREFIX`): unique per run."""
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
    return f"{mf.COMPACTION_PREFIX}{stamp}-{secrets.token_hex(4)}"


@dataclass(frozen=True, slots=True)
class Bin:
    """Files of one queue and day that become one file."""

    queue: str
    date: str
    files: tuple[mf.ManifestFile, ...]

    @property
    def bytes(self) -> int:
        return sum(f.bytes for f in self.files)


def plan(
    files: Sequence[mf.ManifestFile], target: int, data: Mapping[str, int] | None = None
) -> list[Bin]:
    """Step 4 (pure): the bins of ``files`` for a target size of ``target`` bytes. ``data``:
    a file's data bytes (its column chunks, without its footer: what it adds to a compacted
    file; `data_bytes`), else its size."""
    weight = {f.path: (data or {}).get(f.path, f.bytes) for f in files}
    groups: dict[tuple[str, str], list[mf.ManifestFile]] = defaultdict(list)
    for f in files:
        if f.bytes < target // 2:
            groups[(f.queue, f.date)].append(f)
    bins: list[Bin] = []
    for (queue, date), fs in sorted(groups.items()):
        current: list[mf.ManifestFile] = []
        size = 0
        for f in sorted(fs, key=lambda f: (f.min_seq, f.path)):
            w = weight[f.path]
            if current and abs(size + w - target) >= abs(size - target):
                bins.append(Bin(queue, date, tuple(current)))
                current, size = [], 0
            current.append(f)
            size += w
        bins.append(Bin(queue, date, tuple(current)))
    return [b for b in bins if len(b.files) > 1]


def check_date(text: str) -> str:
    """``text`` if it is a day ``YYYY-MM-DD``, else `InvalidArgument`."""
    try:
        if dt.date.fromisoformat(text).isoformat() == text:
            return text
    except ValueError:
        pass
    raise InvalidArgument(f"--date {text!r} is not a day YYYY-MM-DD")


@dataclass(frozen=True, slots=True)
class CompactConfig:
    out: str
    queues: tuple[str, ...] = ()
    """Queues to compact; empty: every queue with live files."""
    dates: tuple[str, ...] = ()
    """Days to compact; empty: every day."""
    target_bytes: int = DEFAULT_TARGET


@dataclass(frozen=True, slots=True)
class CompactSummary:
    """What one run did: files and bytes in (retired) and out (added), the added files' sizes,
    the groups (queue, date) compacted."""

    compaction_id: str
    groups: int
    files_in: int
    files_out: int
    bytes_in: int
    bytes_out: int
    rows: int
    sizes: tuple[int, ...]
    seconds: float
    finished: int = 0
    """Files retired by earlier (crashed) compactions, removed now."""
    garbage: tuple[str, ...] = ()
    """Paths an uncommitted compaction left, removed now."""

    def render(self) -> str:
        return render(
            f"compaction {self.compaction_id}: {self.groups} queue-days, {self.files_in} files "
            f"({self.bytes_in / 1e6:.2f} MB) -> {self.files_out} files "
            f"({self.bytes_out / 1e6:.2f} MB), {self.rows} rows in {self.seconds:.1f} s",
            "sizes (MB): " + ", ".join(f"{s / 1e6:.2f}" for s in self.sizes) if self.sizes else "",
            f"removed {self.finished} files retired by earlier compactions"
            if self.finished
            else "",
            "removed the output of crashed compactions: " + ", ".join(self.garbage)
            if self.garbage
            else "",
        )


@dataclass(slots=True)
class Compaction:
    """One compaction (see the module docstring) of ``storage``."""

    storage: Storage
    config: CompactConfig
    clock: Callable[[], float] = time.time
    compaction_id: str = ""

    def __post_init__(self) -> None:
        self.compaction_id = self.compaction_id or new_compaction_id(self.clock())

    def run(self) -> CompactSummary:
        start = time.monotonic()
        manifests = reader.read_manifests(self.storage)
        live = self.selected(mf.live_files(manifests))  # 1: refuses bad arguments first
        finished = self.finish(manifests)
        garbage = self.collect_garbage({m.batch_id for m in manifests})
        small = [f for f in live if f.bytes < self.config.target_bytes // 2]
        self.check_inputs(small)
        bins = plan(small, self.config.target_bytes, self.data_bytes(small))
        retired = [f for b in bins for f in b.files]
        try:
            added = [self.write(k, b) for k, b in enumerate(bins)]
            if bins:
                crash_point("compact-before-manifest")
                self.commit(added, retired)
        except BaseException:
            self.discard(bins)
            raise
        if bins:
            crash_point("compact-after-manifest")
            self.remove(retired, crash=True)
        return CompactSummary(
            self.compaction_id,
            len({(b.queue, b.date) for b in bins}),
            len(retired),
            len(added),
            sum(f.bytes for f in retired),
            sum(f.bytes for f in added),
            sum(f.rows for f in added),
            tuple(f.bytes for f in added),
            time.monotonic() - start,
            finished,
            garbage,
        )

    # -- 1. arguments ----------------------------------------------------------------------------
    def selected(self, live: Sequence[mf.ManifestFile]) -> list[mf.ManifestFile]:
        """The live files the arguments select; `InvalidArgument` for a target under 1 MiB, a
        malformed day, a queue with no directory, a day with no directory in those queues."""
        cfg = self.config
        if cfg.target_bytes < MIN_TARGET:
            raise InvalidArgument(
                f"--target-bytes {cfg.target_bytes} is under the minimum {MIN_TARGET} (1 MiB)"
            )
        for d in cfg.dates:
            check_date(d)
        for q in cfg.queues:
            if "/" in q or not self.storage.exists(f"queue={q}"):
                raise InvalidArgument(f"--queue {q}: no directory queue={q} under the root")
        queues = cfg.queues or tuple(sorted({f.queue for f in live}))
        for d in cfg.dates:
            if not any(self.storage.exists(f"queue={q}/date={d}") for q in queues):
                raise InvalidArgument(f"--date {d}: no directory date={d} in the queues chosen")
        return reader.select(live, cfg.queues, cfg.dates)

    # -- 2. finish -------------------------------------------------------------------------------
    def finish(self, manifests: Sequence[mf.Manifest]) -> int:
        """Remove what committed compactions retired and is still there (files, and their
        directories once empty); how many files."""
        left = [
            f
            for m in manifests
            for f in m.retires
            if self.storage.exists(f.path.rpartition("/")[0])
        ]
        present = sum(self.storage.size(f.path) is not None for f in left)
        self.remove(left, crash=False)
        return present

    # -- 3. garbage ------------------------------------------------------------------------------
    def collect_garbage(self, committed: set[str]) -> tuple[str, ...]:
        """Remove the directories and temporary manifests of compactions without a committed
        manifest (crashed before their commit)."""
        removed: list[str] = []
        for e in self.storage.list(mf.MANIFESTS):
            if e.name.startswith(f"_tmp-{mf.COMPACTION_PREFIX}"):
                self.storage.delete(f"{mf.MANIFESTS}/{e.name}")
                removed.append(f"{mf.MANIFESTS}/{e.name}")
        for cid, path in batch_folders(self.storage):
            if (
                cid.startswith(mf.COMPACTION_PREFIX)
                and cid not in committed
                and cid != self.compaction_id
            ):
                self.storage.delete(path)
                removed.append(path)
        return tuple(removed)

    # -- 4./5. plan and write --------------------------------------------------------------------
    def check_inputs(self, files: Sequence[mf.ManifestFile]) -> None:
        """Every input file exists with its recorded size, and lies in its queue's and day's
        directory, else `ManifestInvalid` (before anything is written)."""
        for f in files:
            if not f.path.startswith(f"queue={f.queue}/date={f.date}/"):
                raise ManifestInvalid(f"{f.path}: not under queue={f.queue}/date={f.date}/")
            size = self.storage.size(f.path)
            if size != f.bytes:
                got = "missing" if size is None else f"{size} bytes"
                raise ManifestInvalid(f"{f.path} is {got}, its manifest says {f.bytes} bytes")

    def data_bytes(self, files: Sequence[mf.ManifestFile]) -> dict[str, int]:
        """Each file's column chunks' compressed bytes (its size less its footer and schema):
        about what it adds to a compacted file. Read from the footer (a local root reads only
        the footer; another reads the file)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        out = {}
        for f in files:
            if isinstance(self.storage, LocalStorage):
                meta = pq.read_metadata(self.storage.local_path(f.path))
            else:
                meta = pq.read_metadata(pa.BufferReader(self.storage.read(f.path)))
            out[f.path] = sum(
                meta.row_group(g).column(c).total_compressed_size
                for g in range(meta.num_row_groups)
                for c in range(meta.num_columns)
            )
        return out

    def _read(self, path: str) -> pa.Table:
        import pyarrow as pa
        import pyarrow.parquet as pq

        return pq.read_table(pa.BufferReader(self.storage.read(path)))

    def folder(self, b: Bin) -> str:
        """Where this compaction writes bin ``b``'s file."""
        return f"queue={b.queue}/date={b.date}/batch_id={self.compaction_id}"

    def write(self, k: int, b: Bin) -> mf.ManifestFile:
        """Write bin ``b`` as this compaction's ``k``-th file; checked by reading it back."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        tables, meta = _levels_filled([self._read(f.path) for f in b.files])
        try:
            table = pa.concat_tables(tables).sort_by("seq")
        except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
            raise VerificationFailed(f"{b.queue}/{b.date}: files of different schemas: {e}") from e
        table = table.replace_schema_metadata(meta)
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="snappy", row_group_size=1 << 20)
        data = sink.getvalue().to_pybytes()
        got = pq.read_table(pa.BufferReader(data), columns=["seq"]).column("seq").to_numpy()
        want = np.sort(np.concatenate([t.column("seq").to_numpy() for t in tables]))
        if table.num_rows != sum(f.rows for f in b.files) or not np.array_equal(got, want):
            raise VerificationFailed(
                f"{b.queue}/{b.date}: the compacted file's seqs differ from its inputs'"
            )
        folder = self.folder(b)
        name = f"part-{k:05d}-{self.compaction_id}.parquet"
        self.storage.mkdirs(folder)
        self.storage.write(f"{folder}/_tmp-{name}", data)
        if not self.storage.rename(f"{folder}/_tmp-{name}", f"{folder}/{name}"):
            raise ArchiveError(f"could not rename {folder}/_tmp-{name}: {name} exists")
        return mf.ManifestFile(
            f"{folder}/{name}",
            b.queue,
            b.date,
            table.num_rows,
            len(data),
            int(want[0]),
            int(want[-1]),
        )

    def discard(self, bins: Sequence[Bin]) -> None:
        """Best effort, on a failure before the commit: remove this compaction's output (else
        the next compaction's garbage collection does)."""
        for folder in sorted({self.folder(b) for b in bins}):
            with contextlib.suppress(Exception):
                self.storage.delete(folder)
        with contextlib.suppress(Exception):
            self.storage.delete(mf.temp_path(self.compaction_id))

    # -- 6. commit -------------------------------------------------------------------------------
    def commit(self, added: Sequence[mf.ManifestFile], retired: Sequence[mf.ManifestFile]) -> None:
        """Write the compaction manifest under a temporary name (durable), then rename it."""
        m = mf.Manifest(
            mf.VERSION,
            self.compaction_id,
            int(self.clock() * 1000),
            self.storage.root,
            sum(f.rows for f in added),
            sum(f.bytes for f in added),
            [],
            sorted(added, key=lambda f: f.path),
            kind=mf.COMPACTION,
            retires=sorted(retired, key=lambda f: f.path),
        )
        if m.rows != sum(f.rows for f in retired):
            raise VerificationFailed(f"{m.rows} rows added, {sum(f.rows for f in retired)} retired")
        self.storage.mkdirs(mf.MANIFESTS)
        tmp = mf.temp_path(self.compaction_id)
        self.storage.write(tmp, mf.encode(m))
        if not self.storage.rename(tmp, mf.manifest_path(self.compaction_id)):
            raise ArchiveError(f"could not rename {tmp} to {mf.manifest_path(self.compaction_id)}")

    # -- 7. remove -------------------------------------------------------------------------------
    def remove(self, files: Sequence[mf.ManifestFile], crash: bool) -> None:
        """Remove ``files`` (retired by a committed manifest), their Hadoop checksum files, and
        the batch directories they leave empty."""
        folders = set()
        for k, f in enumerate(files):
            folder, _, name = f.path.rpartition("/")
            self.storage.delete(f.path)
            self.storage.delete(f"{folder}/.{name}.crc")
            folders.add(folder)
            if crash and k == 0:
                crash_point("compact-mid-removal")
        for folder in sorted(folders):
            if not [e for e in self.storage.list(folder) if e.name != "_SUCCESS"]:
                self.storage.delete(folder)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cmq archive compact",
        description="Rewrite the archive's small Parquet files of a queue and day into files of "
        "about a target size, committed through the manifests.",
    )
    p.add_argument("--out", required=True, help="the archive's root: a local path or Hadoop URI")
    p.add_argument("--queue", action="append", default=[], help="a queue (repeat; default: all)")
    p.add_argument("--date", action="append", default=[], help="a UTC day YYYY-MM-DD (repeat)")
    p.add_argument(
        "--target-bytes",
        type=int,
        default=DEFAULT_TARGET,
        help=f"the size of a compacted file (default {DEFAULT_TARGET}; at least {MIN_TARGET})",
    )
    p.add_argument("--master", help="Spark master for a non-local root (its file system only)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    return p


def main(argv: list[str]) -> int:
    """Run ``cmq archive compact``: exit 0, 1 on a failure, 2 on bad arguments (`InvalidArgument`:
    nothing changed)."""
    args = parser().parse_args(argv)
    config = CompactConfig(
        args.out, tuple(args.queue), tuple(args.date), target_bytes=args.target_bytes
    )

    def session() -> SparkSession:
        from cmq.archive.main import spark_session

        return spark_session(args.master, app_name="cmq-archive-compact")

    spark = LazySpark(session)
    return finish(
        lambda: Compaction(open_storage(config.out, spark), config).run(),
        spark,
        args.json,
        invalid_exit=2,
    )


def _levels_filled(tables: list[pa.Table]) -> tuple[list[pa.Table], dict[bytes, bytes] | None]:
    """``tables`` with files from before the ``priority`` column given it (level 0 on every
    row, what a reader takes a missing one as) when another of them has it, and the schema
    metadata for the joined file: a file's with ``priority`` (Spark's row description lists
    it), else the first file's."""
    import numpy as np
    import pyarrow as pa

    having = [t for t in tables if "priority" in t.column_names]
    if not having or len(having) == len(tables):
        return tables, tables[0].schema.metadata
    kind = having[0].schema.field("priority").type
    older = [
        t.append_column(pa.field("priority", kind), pa.array(np.zeros(t.num_rows, np.int32), kind))
        for t in tables
        if "priority" not in t.column_names
    ]
    return [*older, *having], having[0].schema.metadata
