"""``cmq archive`` as a command (no Spark needed here): help, bad arguments, an unknown queue, and
a run with nothing to archive, which never starts a JVM."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.archive.fake_cluster import FakeCluster


def cmq(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cmq", "archive", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_help_and_bad_arguments() -> None:
    assert "--max-segments" in cmq("--help").stdout
    bad = cmq("--url", ",", "--out", "x")
    assert bad.returncode == 2 and "invalid_argument" in bad.stderr
    assert cmq("--out", "x").returncode == 2  # --url is required
    zero = cmq("--url", "http://127.0.0.1:1", "--out", "x", "--segments-per-task", "0")
    assert zero.returncode == 2 and "invalid_argument" in zero.stderr


def test_nothing_to_archive_starts_no_spark(fake: FakeCluster, tmp_path: Path) -> None:
    fake.add_segments("q", [5], state="sealed")
    got = cmq("--url", ",".join(fake.urls), "--out", str(tmp_path), "--json")
    assert got.returncode == 0, got.stderr
    summary = json.loads(got.stdout)
    assert (summary["segments"], summary["rows"], summary["skipped"]) == (0, 0, 0)
    assert "Spark" not in got.stderr and "log4j" not in got.stderr
    steps = [line.split("] ", 1)[1] for line in got.stderr.splitlines() if line.startswith("[")]
    assert steps[-1] == "listing and claiming released segments", got.stderr  # the progress
    assert fake.remaining("q") == [0]


def test_an_unknown_queue_fails_with_its_code(fake: FakeCluster, tmp_path: Path) -> None:
    got = cmq("--url", fake.urls[0], "--out", str(tmp_path), "--queue", "nope")
    assert got.returncode == 1
    assert "error: api_error: HTTP 404 queue_not_found" in got.stderr


def test_requests_are_signed_with_the_credential_of_the_cluster_secret(
    fake: FakeCluster, tmp_path: Path
) -> None:
    """As the chart's CronJob runs it: ``CMQ_SECRET`` only. ``cmq archive`` signs every request
    with the credential derived from it (the secret itself is not passed on); without it, the
    cluster refuses the first request and the job fails with the cluster's code."""
    import os

    from cmq.catalog.keys import cluster_credential

    secret = "archive-test-cluster-secret-0123"
    key_id, key_secret = cluster_credential(secret.encode())
    fake.require_signed({key_id: key_secret})
    fake.add_segments("q", [5], state="sealed")
    args = ["--url", ",".join(fake.urls), "--out", str(tmp_path), "--json"]
    base = {k: v for k, v in os.environ.items() if not k.startswith("CMQ_")}
    signed = subprocess.run(
        [sys.executable, "-m", "cmq", "archive", *args],
        env={**base, "CMQ_SECRET": secret},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert signed.returncode == 0, signed.stderr
    assert fake.signed and {k for k, _ in fake.signed} == {key_id}
    assert "/v1/queues/q/segments" in {p for _, p in fake.signed}
    unsigned = subprocess.run(
        [sys.executable, "-m", "cmq", "archive", *args],
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert unsigned.returncode == 1 and "HTTP 401" in unsigned.stderr, unsigned.stderr


def test_the_child_gets_a_derived_key_never_the_cluster_secret() -> None:
    from cmq.catalog.keys import cluster_credential
    from cmq.cli.main import archive_env

    secret = "archive-test-cluster-secret-0123"
    key_id, key_secret = cluster_credential(secret.encode())
    env = archive_env({"CMQ_SECRET": secret, "HOME": "/h"})
    assert env == {"HOME": "/h", "CMQ_ACCESS_KEY_ID": key_id, "CMQ_SECRET_ACCESS_KEY": key_secret}
    given = {"CMQ_ACCESS_KEY_ID": "AK", "CMQ_SECRET_ACCESS_KEY": "S"}
    assert archive_env({"CMQ_SECRET": secret, **given}) == given
    assert archive_env({"CMQ_SECRET": secret, "CMQ_KEY_FILE": "/k"}) == {"CMQ_KEY_FILE": "/k"}
    assert archive_env({"HOME": "/h"}) == {"HOME": "/h"}
