"""Reading the archive by its manifests: the set of *live* files, for pyarrow or Spark.

A file under ``--out`` is live when a committed manifest (``_manifests/<id>.json``, present
under its final name) names it in ``files`` and no committed compaction manifest retires it
(`cmq.archive.manifest.live_files`). The live files hold every archived row exactly once, at
every moment: before a compaction commits, its new files are named by no manifest (so not
read) and the small files it replaces are still live; its manifest's rename switches both at
once; the retired files are removed only after that. A crash at any point leaves one of those
two states. Listing directories instead is not exact (docs/archive.md, "Compaction").

    from cmq.archive import reader

    table = reader.read_table("/data/cmq-archive", queues=["orders"])   # a pyarrow Table
    ds = reader.dataset("/data/cmq-archive")                            # a pyarrow Dataset
    paths = reader.spark_paths("/data/cmq-archive")
    df = spark.read.option("basePath", reader.base_path("/data/cmq-archive")).parquet(*paths)

Every reader gets the partition columns ``queue``, ``date`` and ``batch_id`` (strings) from the
paths, as from a directory read. A list of live files is a snapshot: a compaction that commits
later may remove some of them (after its commit). `read_table` then takes a new snapshot and
reads again; a `dataset` or Spark read across a compaction's commit may fail with a missing
file and is to be retried from a new snapshot (the rows are never wrong, only unavailable).

``root``: a local path or ``file:`` URI, or any `Storage` (a `HadoopStorage` for HDFS or S3
through Spark's JVM); pyarrow reads other roots through ``pyarrow.fs`` (its own HDFS/S3
support) given the root's URI.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from cmq.archive import manifest as mf
from cmq.archive.errors import InvalidArgument, ManifestInvalid, NewerManifest
from cmq.archive.storage import LocalStorage, Storage, normalize_root

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.dataset as pads

LEVEL = "priority"
"""The column files written before it lack: a read of old and new files gives it, null on the
older files' rows (a reader takes that as level 0)."""

PARTITIONS = ("queue", "date", "batch_id")
"""The hive partition columns of every file's path (``queue=Q/date=D/batch_id=B/...``)."""
READ_ATTEMPTS = 5
"""Snapshots `read_table` takes before giving up on files removed under it."""


def storage_of(root: str | Storage) -> Storage:
    """``root`` as a `Storage`: a string must be a local path or ``file:`` URI (for HDFS or S3,
    pass a `cmq.archive.storage.HadoopStorage`)."""
    if not isinstance(root, str):
        return root
    uri = normalize_root(root)
    if not uri.startswith("file:"):
        raise InvalidArgument(
            f"{root}: pass a Storage (cmq.archive.storage.HadoopStorage) for a non-local root"
        )
    return LocalStorage(uri)


def read_manifests(storage: Storage) -> list[mf.Manifest]:
    """Every committed manifest under ``_manifests/`` (names starting with ``_`` or ``.``, as
    the temporary ones, are not committed), in name order. `ManifestInvalid` naming the file
    for one that does not decode; `NewerManifest` for one of a newer release."""
    out = []
    for e in storage.list(mf.MANIFESTS):
        if e.is_dir or not e.name.endswith(".json") or e.name.startswith(("_", ".")):
            continue
        path = f"{mf.MANIFESTS}/{e.name}"
        try:
            out.append(mf.decode(storage.read(path), path))
        except NewerManifest:
            raise
        except FileNotFoundError:
            continue  # never happens to a committed manifest: only a hand-removed one
        except Exception as ex:
            raise ManifestInvalid(f"{path}: {ex}") from None
    return out


def select(
    files: Iterable[mf.ManifestFile], queues: Sequence[str] = (), dates: Sequence[str] = ()
) -> list[mf.ManifestFile]:
    """The files of ``queues`` (all when empty) and ``dates`` (all when empty)."""
    return [
        f for f in files if (not queues or f.queue in queues) and (not dates or f.date in dates)
    ]


def live_files(
    root: str | Storage, queues: Sequence[str] = (), dates: Sequence[str] = ()
) -> list[mf.ManifestFile]:
    """The live files (see the module docstring) of ``queues`` and ``dates`` (all when
    empty), by path; each names its rows, bytes and seq range."""
    return select(mf.live_files(read_manifests(storage_of(root))), queues, dates)


def base_path(root: str | Storage) -> str:
    """The root as Spark's ``basePath`` option wants it (partition columns from the paths)."""
    return storage_of(root).root


def spark_paths(
    root: str | Storage, queues: Sequence[str] = (), dates: Sequence[str] = ()
) -> list[str]:
    """The live files' full URIs, for ``spark.read.option("basePath", base_path(root))
    .parquet(*paths)`` (an empty list: nothing archived, and Spark refuses no paths)."""
    storage = storage_of(root)
    return [storage.uri(f.path) for f in live_files(storage, queues, dates)]


def _arrow_target(storage: Storage) -> tuple[object | None, str]:
    """(pyarrow file system or None for local paths, the root's path in it)."""
    if isinstance(storage, LocalStorage):
        return None, storage.local_path("")
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(storage.root)
    return fs, path


def _partitioning() -> pads.Partitioning:
    import pyarrow as pa
    import pyarrow.dataset as pads

    return pads.partitioning(pa.schema([(name, pa.string()) for name in PARTITIONS]), flavor="hive")


def _dataset(storage: Storage, files: Sequence[mf.ManifestFile]) -> pads.Dataset:
    import pyarrow.dataset as pads

    fs, base = _arrow_target(storage)
    paths = [f"{base.rstrip('/')}/{f.path}" for f in files]  # on-disk names, as listed
    if not paths:
        raise ManifestInvalid("no live files to read")
    ds = pads.dataset(
        paths,
        format="parquet",
        filesystem=fs,
        partitioning=_partitioning(),
        partition_base_dir=base,
    )
    if LEVEL in ds.schema.names:  # files without it (older) read as null there
        return ds
    # The first file is from before the column: it is kept if a later file has it.
    for fragment in ds.get_fragments():
        have = fragment.physical_schema
        if LEVEL in have.names:
            return pads.dataset(
                paths,
                schema=ds.schema.append(have.field(LEVEL)),
                format="parquet",
                filesystem=fs,
                partitioning=_partitioning(),
                partition_base_dir=base,
            )
    return ds


def dataset(
    root: str | Storage, queues: Sequence[str] = (), dates: Sequence[str] = ()
) -> pads.Dataset:
    """A pyarrow Dataset of the live files (a snapshot; see the module docstring);
    `ManifestInvalid` when there is no live file."""
    storage = storage_of(root)
    return _dataset(storage, live_files(storage, queues, dates))


def read_table(
    root: str | Storage,
    queues: Sequence[str] = (),
    dates: Sequence[str] = (),
    columns: Sequence[str] | None = None,
) -> pa.Table:
    """Every row of the live files of ``queues`` and ``dates`` (all when empty) as one Table
    (``columns``: those only), exactly once even while a compaction commits: a file removed
    under the read means a compaction committed, and the read starts again from a new snapshot
    (up to `READ_ATTEMPTS` times). An archive with no live file gives an empty table with
    the partition columns only."""
    import pyarrow as pa

    storage = storage_of(root)
    cols = list(columns) if columns is not None else None
    for attempt in range(READ_ATTEMPTS):
        try:
            files = live_files(storage, queues, dates)
            if not files:
                return pa.table({name: pa.array([], pa.string()) for name in PARTITIONS})
            return _dataset(storage, files).to_table(columns=cols)
        except OSError:  # a file removed under the read (FileNotFoundError, pyarrow's IOError)
            if attempt == READ_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
