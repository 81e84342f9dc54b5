"""The output location (``--out``) through Hadoop's `FileSystem` API in the driver's JVM, so a
local path, ``file:``, ``hdfs:``, ``s3a:``, ``abfs:`` or any Hadoop-compatible URI works the same
way Spark's own writer sees it. Paths here are relative to the root, ``/``-separated.

Renames are atomic on local and HDFS file systems; on object stores a rename is a copy, which is
still safe for the manifest (one object, written whole before it appears under its name) and for
batch directories (a crashed copy leaves a batch without a manifest: garbage the next run
removes).
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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


class Storage:
    """Files under ``root`` (see the module docstring). Not thread-safe (one driver thread)."""

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
        """The children of directory ``rel``, sorted by name; [] when it does not exist."""
        if not self.exists(rel):
            return []
        out = [
            Entry(str(st.getPath().getName()), bool(st.isDirectory()), int(st.getLen()))
            for st in self._fs.listStatus(self._p(rel))
        ]
        return sorted(out, key=lambda e: e.name)

    def size(self, rel: str) -> int | None:
        """The length of file ``rel``, or None when there is no such file."""
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
        """Write ``data`` as ``rel`` (replacing it), closed (and so flushed) on return."""
        stream = self._fs.create(self._p(rel), True)
        try:
            stream.write(bytearray(data))
        finally:
            stream.close()

    def mkdirs(self, rel: str) -> None:
        self._fs.mkdirs(self._p(rel))

    def rename(self, src: str, dst: str) -> bool:
        """Move ``src`` to ``dst`` (whose parent exists); False when Hadoop refused (e.g.
        ``dst`` exists)."""
        return bool(self._fs.rename(self._p(src), self._p(dst)))

    def delete(self, rel: str) -> None:
        """Remove ``rel`` and everything under it; a missing path is fine."""
        self._fs.delete(self._p(rel), True)
