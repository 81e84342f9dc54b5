"""The archive's requests are signed (`cmq.archive.auth`): the driver's calls and the records
streams its executors read, checked by the test double as a node checks them."""

from __future__ import annotations

import pytest

from cmq.archive.records import plan_tasks, read_segment
from cmq.archive.remote import ClusterClient
from tests.archive.fake_cluster import FakeCluster


def test_the_records_stream_is_signed_with_the_key_of_the_environment(
    fake: FakeCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What an executor does: the key from ``CMQ_ACCESS_KEY_ID``/``CMQ_SECRET_ACCESS_KEY`` (as
    the driver hands it to executors off a local master: `cmq.archive.auth.executor_conf`)."""
    from cmq.archive import auth

    fake.add_segments("q", [4])
    fake.require_signed({"AKARCHIVE": "archive-secret"})
    monkeypatch.setenv("CMQ_ACCESS_KEY_ID", "AKARCHIVE")
    monkeypatch.setenv("CMQ_SECRET_ACCESS_KEY", "archive-secret")
    auth.access_key.cache_clear()
    try:
        (task,) = plan_tasks(ClusterClient(fake.urls, 5), ["q"], None)
        seg = read_segment(task, 5)
        conf = auth.executor_conf()
    finally:
        auth.access_key.cache_clear()
    assert sum(b.num_rows for b in seg.batches(None)) == 4
    assert any(p.endswith("/records") for _, p in fake.signed)
    assert conf["spark.executorEnv.CMQ_ACCESS_KEY_ID"] == "AKARCHIVE"
    assert conf["spark.executorEnv.CMQ_SECRET_ACCESS_KEY"] == "archive-secret"
