"""The reader of one segment (no Spark): follower preference, and every check of the contract's
trailer with a fallback to the next replica; all replicas bad -> an error, never bad rows."""

from __future__ import annotations

import base64

import pytest

from cmq.archive.errors import ApiError, SegmentUnreadable
from cmq.archive.records import ARROW_SCHEMA, SegmentTask, order_replicas, plan_tasks, read_segment
from cmq.archive.remote import ClusterClient
from tests.archive.fake_cluster import FakeCluster


def one_task(fake: FakeCluster, queue: str = "q") -> SegmentTask:
    tasks = plan_tasks(ClusterClient(fake.urls, timeout=5), [queue])
    assert len(tasks) >= 1
    return tasks[0]


def test_the_arrow_schema_is_the_one_spark_expects() -> None:
    types = pytest.importorskip("pyspark.sql.pandas.types")
    from cmq.archive.source import SPARK_SCHEMA

    assert types.to_arrow_schema(SPARK_SCHEMA, timezone="UTC").equals(ARROW_SCHEMA)


def test_replicas_are_ordered_followers_first_spread_leader_then_unknown() -> None:
    urls = ["http://a", "http://b", "http://c", "http://d"]
    node_of = {"http://a": 1, "http://b": 2, "http://c": 3, "http://d": None}
    assert order_replicas(urls, node_of, leader=1) == (
        "http://b",
        "http://c",
        "http://a",
        "http://d",
    )
    assert order_replicas(urls, node_of, leader=1, spread=1)[:2] == ("http://c", "http://b")
    assert order_replicas(urls, node_of, leader=None)[:3] == ("http://a", "http://b", "http://c")


def test_a_segment_is_read_whole_from_a_follower(fake: FakeCluster) -> None:
    fake.add_segments("q", [120])
    task = one_task(fake)
    assert task.replicas[-1] == fake.urls[0]  # the leader (node 1) last
    seg = read_segment(task, timeout=5)
    assert fake.served == [(2, "q", 0)]
    expected = fake.records("q")
    assert seg.rows == 120 == task.count
    batch = next(seg.batches("b-1", rows=1000))
    assert batch.schema.equals(ARROW_SCHEMA)
    got = batch.to_pylist()
    for row, rec in zip(got, expected, strict=True):
        assert row["seq"] == rec["seq"] and row["id"] == rec["id"]
        assert row["body"] == base64.b64decode(rec["body_b64"])
        assert row["outcome"] == rec["outcome"] and row["batch_id"] == "b-1"
        assert row["sent_at"].timestamp() * 1000 == rec["sent_at_ms"]
        assert dict(row["attributes"]) == rec["attributes"]
    assert [b.num_rows for b in seg.batches(None, rows=50)] == [50, 50, 20]


@pytest.mark.parametrize("fault", ["torn", "bad_checksum", "bad_crc", "short"])
def test_a_bad_replica_is_skipped_for_the_next(fake: FakeCluster, fault: str) -> None:
    fake.add_segments("q", [300])
    getattr(fake.faults[2], fault).add(("q", 0))
    seg = read_segment(one_task(fake), timeout=5)
    assert seg.replica == fake.urls[2] and seg.rows == 300
    assert fake.served[-1] == (3, "q", 0)
    assert seg.columns.seq == list(range(300))


def test_a_replica_that_is_down_is_skipped(fake: FakeCluster) -> None:
    fake.add_segments("q", [10])
    task = one_task(fake)
    fake.set_down(2)
    assert read_segment(task, timeout=5).replica == fake.urls[2]


def test_every_replica_bad_is_an_error_naming_each(fake: FakeCluster) -> None:
    fake.add_segments("q", [40])
    task = one_task(fake)
    fake.faults[1].bad_checksum.add(("q", 0))
    fake.faults[2].torn.add(("q", 0))
    fake.set_down(3)
    with pytest.raises(SegmentUnreadable) as err:
        read_segment(task, timeout=5)
    msg = err.value.message
    assert "trailer checksum does not match" in msg and "no trailer" in msg
    assert "stream failed" in msg and err.value.code == "segment_unreadable"


def test_a_checksum_differing_from_the_listing_fails_everywhere(fake: FakeCluster) -> None:
    fake.add_segments("q", [5])
    task = one_task(fake)
    wrong = SegmentTask(task.queue, 0, 4, 5, "00000000", task.replicas)
    with pytest.raises(SegmentUnreadable, match="checksum"):
        read_segment(wrong, timeout=5)


def test_planning_honours_queues_max_segments_and_the_archive_attribute(fake: FakeCluster) -> None:
    fake.add_segments("a", [3, 3, 3])
    fake.add_segments("b", [2])
    fake.add_queue("plain", archive=False)
    fake.queues["plain"].archive = False
    fake.add_segments("plain", [4])
    client = ClusterClient(fake.urls, timeout=5)
    assert [(t.queue, t.first_seq) for t in plan_tasks(client, None)] == [
        ("a", 0),
        ("a", 3),
        ("a", 6),
        ("b", 0),
    ]
    assert len(plan_tasks(client, ["a", "plain"], max_segments=2)) == 2
    with pytest.raises(ApiError) as err:
        plan_tasks(client, ["missing"])
    assert err.value.status == 404 and err.value.api_code == "queue_not_found"
