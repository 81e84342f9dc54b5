"""Fixtures of the archive tests: ONE Spark session (local[2]) for the whole test session (the
JVM starts once), and a test double of the cluster's archive endpoints per test."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.archive.fake_cluster import FakeCluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def java_major() -> int | None:
    """The major version of ``java`` on PATH, or None when there is none."""
    if shutil.which("java") is None:
        return None
    out = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    for raw in (out.stderr + out.stdout).split():
        token = raw.strip('"')
        if token[:1].isdigit():
            head = token.split(".")[0]
            return int(head) if head.isdigit() else None
    return None


JAVA = java_major()
NEEDS_JAVA = pytest.mark.skipif(
    JAVA is None or JAVA < 17,
    reason=f"PySpark 4 needs Java 17+ (found: {JAVA}); `make test` installs Debian's JRE",
)
SPARK_STARTUP: dict[str, float] = {}


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The test session's Spark (local[2], quiet and offline: see cmq.archive.main)."""
    if JAVA is None or JAVA < 17:
        pytest.skip(f"PySpark 4 needs Java 17+ (found: {JAVA})")
    pytest.importorskip("pyspark")
    from cmq.archive.main import spark_session
    from cmq.archive.source import register

    start = time.monotonic()
    session = spark_session("local[2]", app_name="cmq-archive-tests")
    register(session)
    SPARK_STARTUP["seconds"] = time.monotonic() - start
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture
def fake() -> Iterator[FakeCluster]:
    """Three replicas (node 1 leads) serving synthetic segments; add data with
    `FakeCluster.add_segments`."""
    with FakeCluster(nodes=3, leader=1) as cluster:
        yield cluster
