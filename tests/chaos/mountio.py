"""Plain file I/O of the tests on a LazyFS mount (`tests.chaos.test_lazyfs`,
`tests.chaos.test_iofaults`): each call opens its own descriptor and closes it."""

from __future__ import annotations

import os
from pathlib import Path


def write(path: Path, data: bytes, *, sync: bool = False, append: bool = False) -> None:
    """Write ``data`` to ``path`` (created if missing; replacing its content, or after it when
    ``append``), then ``fdatasync`` when ``sync``."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(path, flags, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fdatasync(fd)
    finally:
        os.close(fd)


def append(path: Path, data: bytes, *, sync: bool = False) -> None:
    """`write` after what ``path`` holds."""
    write(path, data, sync=sync, append=True)


def fsync_path(path: Path) -> None:
    """``fsync`` a file or a directory by its path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
