"""The output location (``--out``). A local path (or ``file:`` URI) is handled here in Python
(`LocalStorage`: no JVM needed, so a run with nothing to archive never starts Spark; writes are
fsynced, renames atomic and their directory fsynced). Any other URI (``hdfs:``, ``s3a:``,
``abfs:``, ... : whatever Hadoop supports) goes through Hadoop's `FileSystem` API in the driver's
JVM (`HadoopStorage`), the way Spark's own writer sees it. Paths are relative to the root,
``/``-separated.

Renames are atomic on local and HDFS file systems; on object stores a rename is a copy, which is
still safe for the manifest (one object, written whole before it appears under its name) and for
batch directories (a crashed copy leaves a batch without a manifest: garbage the next run
removes).
"""

from __future__ import annotations

import os
import shutil
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def normalize_root(out: str) -> str:
    """``out`` as a URI: a path without a scheme becomes an absolute ``file:`` URI (the
    driver's local disk, as ``--out DIR`` promises); URIs are kept as given."""
    scheme = urllib.parse.urlsplit(out).scheme
    if scheme and len(scheme) > 1:  # a one-letter "scheme" is a Windows drive
        return out.rstrip("/")
    return "file://" + os.path.abspath(out)


@dataclass(frozen=True, slots=True)
class Entry:
    """One child of a directory."""

    name: str
    is_dir: bool
    size: int


class Storage(Protocol):
    """Files under ``root`` (see the module docstring)."""

    root: str

    def uri(self, rel: str) -> str:
        """The full URI of ``rel`` (what Spark is given)."""
        ...

    def exists(self, rel: str) -> bool: ...

    def list(self, rel: str) -> list[Entry]:
        """The children of directory ``rel``, sorted by name; [] when it does not exist."""
        ...

    def size(self, rel: str) -> int | None:
        """The length of file ``rel``, or None when there is no such file."""
        ...

    def read(self, rel: str) -> bytes: ...

    def write(self, rel: str, data: bytes) -> None:
        """Write ``data`` as ``rel`` (replacing it), durable on return where the file system
        allows."""
        ...

    def mkdirs(self, rel: str) -> None: ...

    def rename(self, src: str, dst: str) -> bool:
        """Move ``src`` to ``dst`` (whose parent exists); False when refused (``dst`` exists)."""
        ...

    def delete(self, rel: str) -> None:
        """Remove ``rel`` and everything under it; a missing path is fine."""
        ...


def open_storage(root: str, spark: Callable[[], SparkSession]) -> Storage:
    """`LocalStorage` for a local root, else `HadoopStorage` (which starts ``spark()``)."""
    uri = normalize_root(root)
    if uri.startswith("file:"):
        return LocalStorage(uri)
    return HadoopStorage(spark(), uri)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalStorage:
    """`Storage` on the driver's local disk."""

    def __init__(self, root: str) -> None:
        self.root = normalize_root(root)
        self.base = urllib.parse.unquote(urllib.parse.urlsplit(self.root).path)

    def uri(self, rel: str) -> str:
        return self.root if not rel else f"{self.root}/{rel}"

    def _p(self, rel: str) -> str:
        return os.path.join(self.base, rel) if rel else self.base

    def local_path(self, rel: str) -> str:
        """The file system path of ``rel``."""
        return self._p(rel)

    def exists(self, rel: str) -> bool:
        return os.path.exists(self._p(rel))

    def list(self, rel: str) -> list[Entry]:
        try:
            items = list(os.scandir(self._p(rel)))
        except (FileNotFoundError, NotADirectoryError):
            return []
        out = []
        for e in items:
            try:
                out.append(Entry(e.name, e.is_dir(), 0 if e.is_dir() else e.stat().st_size))
            except FileNotFoundError:  # renamed or removed since the scan: not a child now
                continue
        return sorted(out, key=lambda e: e.name)

    def size(self, rel: str) -> int | None:
        p = self._p(rel)
        return os.path.getsize(p) if os.path.isfile(p) else None

    def read(self, rel: str) -> bytes:
        with open(self._p(rel), "rb") as f:
            return f.read()

    def write(self, rel: str, data: bytes) -> None:
        with open(self._p(rel), "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def mkdirs(self, rel: str) -> None:
        os.makedirs(self._p(rel), exist_ok=True)

    def rename(self, src: str, dst: str) -> bool:
        if os.path.exists(self._p(dst)):
            return False
        os.rename(self._p(src), self._p(dst))
        _fsync_dir(os.path.dirname(self._p(dst)))
        return True

    def replace(self, src: str, dst: str) -> None:
        """Make file ``src`` durable, then rename it over ``dst`` (replacing it: a re-run
        writes the same file again) and make the rename durable."""
        fd = os.open(self._p(src), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(self._p(src), self._p(dst))
        _fsync_dir(os.path.dirname(self._p(dst)))

    def delete(self, rel: str) -> None:
        p = self._p(rel)
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        elif os.path.exists(p):
            os.unlink(p)


class HadoopStorage:
    """`Storage` through Hadoop's FileSystem in ``spark``'s JVM. Not thread-safe."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.root = normalize_root(root)
        jvm: Any = spark._jvm
        self._path_cls = jvm.org.apache.hadoop.fs.Path
        self._io = jvm.org.apache.hadoop.io.IOUtils
        self._bytes_out = jvm.java.io.ByteArrayOutputStream
        conf = spark._jsc.hadoopConfiguration()
        self._fs = self._path_cls(self.root).getFileSystem(conf)

    def uri(self, rel: str) -> str:
        return self.root if not rel else f"{self.root}/{rel}"

    def _p(self, rel: str) -> Any:
        return self._path_cls(self.uri(rel))

    def exists(self, rel: str) -> bool:
        return bool(self._fs.exists(self._p(rel)))

    def list(self, rel: str) -> list[Entry]:
        if not self.exists(rel):
            return []
        out = [
            Entry(str(st.getPath().getName()), bool(st.isDirectory()), int(st.getLen()))
            for st in self._fs.listStatus(self._p(rel))
        ]
        return sorted(out, key=lambda e: e.name)

    def size(self, rel: str) -> int | None:
        if not self.exists(rel):
            return None
        st = self._fs.getFileStatus(self._p(rel))
        return None if st.isDirectory() else int(st.getLen())

    def read(self, rel: str) -> bytes:
        stream = self._fs.open(self._p(rel))
        buf = self._bytes_out()
        self._io.copyBytes(stream, buf, 65536, True)
        return bytes(buf.toByteArray())

    def write(self, rel: str, data: bytes) -> None:
        stream = self._fs.create(self._p(rel), True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()

    def mkdirs(self, rel: str) -> None:
        self._fs.mkdirs(self._p(rel))

    def rename(self, src: str, dst: str) -> bool:
        return bool(self._fs.rename(self._p(src), self._p(dst)))

    def delete(self, rel: str) -> None:
        self._fs.delete(self._p(rel), True)
