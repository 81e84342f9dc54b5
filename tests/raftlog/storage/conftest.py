"""Fixtures of the storage tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from raftlog.storage import Wal


@pytest.fixture
def open_wal() -> Iterator[list[Wal]]:
    """Collects WALs a test opens and closes them all at the end, so no writer thread leaks."""
    wals: list[Wal] = []
    yield wals
    for w in wals:
        w.close()
