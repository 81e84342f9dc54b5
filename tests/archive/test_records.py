"""The reader of one segment (no Spark): follower preference, and every check of the contract's
trailer with a fallback to the next replica; all replicas bad -> an error, never bad rows."""

from __future__ import annotations

import base64

import pytest

from cmq.archive.errors import ApiError, SegmentUnreadable
from cmq.archive.records import (
    ARROW_SCHEMA,
    SegmentTask,
    order_replicas,
    plan_tasks,
    read_segment,
    read_segments,
)
from cmq.archive.remote import ClusterClient
from cmq.archive.source import group_tasks
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
        assert row["priority"] == rec["priority"]
    assert {row["priority"] for row in got} == {0, 3}  # some were sent at level 3
    assert [b.num_rows for b in seg.batches(None, rows=50)] == [50, 50, 20]


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("fault", ["torn", "bad_checksum", "bad_crc", "short", "flipped"])
def test_a_bad_replica_is_skipped_for_the_next(fake: FakeCluster, fault: str, binary: bool) -> None:
    if fault == "flipped" and not binary:
        pytest.skip("a stored byte flipped: the binary form's fault (a node finds it in JSON)")
    fake.add_segments("q", [300])
    getattr(fake.faults[2], fault).add(("q", 0))
    seg = read_segment(one_task(fake), timeout=5, binary=binary)
    assert seg.replica == fake.urls[2] and seg.rows == 300 and seg.binary is binary
    assert fake.served[-1] == (3, "q", 0)
    assert seg.table.column("seq").to_pylist() == list(range(300))


def test_the_binary_read_equals_the_json_lines(fake: FakeCluster) -> None:
    fake.add_segments("q", [257])
    task = one_task(fake)
    binary = read_segment(task, timeout=5)
    lines = read_segment(task, timeout=5, binary=False)
    assert binary.binary and not lines.binary
    assert binary.table.equals(lines.table)
    assert list(binary.batches("b-1", rows=100)) == list(lines.batches("b-1", rows=100))


def test_a_node_answering_json_lines_is_read_in_that_form(fake: FakeCluster) -> None:
    """A node of an older release (or before the flag is enabled) ignores the Accept."""
    fake.add_segments("q", [50])
    fake.faults[2].json_only = True
    task = one_task(fake)
    seg = read_segment(task, timeout=5)
    assert seg.replica == fake.urls[1] and not seg.binary and seg.rows == 50
    fake.faults[2].torn.add(("q", 0))  # the fallback's checks still hold: next replica
    seg = read_segment(task, timeout=5)
    assert seg.replica == fake.urls[2] and seg.binary and seg.rows == 50


@pytest.mark.parametrize("binary", [True, False])
def test_the_priority_column_holds_each_records_level(fake: FakeCluster, binary: bool) -> None:
    fake.add_segments("q", [40])
    seg = read_segment(one_task(fake), timeout=5, binary=binary)
    assert seg.binary is binary
    levels = seg.table.column("priority")
    assert levels.type == ARROW_SCHEMA.field("priority").type
    assert levels.to_pylist() == [3 if s % 10 == 3 else 0 for s in range(40)]


def test_json_lines_without_a_priority_read_as_level_0(fake: FakeCluster) -> None:
    """An older node's lines carry no ``priority``: the column says 0."""
    fake.add_segments("q", [20])
    for s in fake.queues["q"].segments.values():
        for r in s.records:
            del r["priority"]
    seg = read_segment(one_task(fake), timeout=5, binary=False)
    assert seg.table.column("priority").to_pylist() == [0] * 20


def test_a_corrupted_byte_on_every_replica_is_reported_never_archived(fake: FakeCluster) -> None:
    fake.add_segments("q", [80])
    for nid in (1, 2, 3):
        fake.faults[nid].flipped.add(("q", 0))
    with pytest.raises(SegmentUnreadable) as err:
        read_segment(one_task(fake), timeout=5)
    assert err.value.message.count("the listing's checksum is") == 3


def test_a_replica_that_is_down_is_skipped(fake: FakeCluster) -> None:
    fake.add_segments("q", [10])
    task = one_task(fake)
    fake.set_down(2)
    assert read_segment(task, timeout=5).replica == fake.urls[2]


@pytest.mark.parametrize("binary", [True, False])
def test_every_replica_bad_is_an_error_naming_each(fake: FakeCluster, binary: bool) -> None:
    fake.add_segments("q", [40])
    task = one_task(fake)
    fake.faults[1].bad_checksum.add(("q", 0))
    fake.faults[2].torn.add(("q", 0))
    fake.set_down(3)
    with pytest.raises(SegmentUnreadable) as err:
        read_segment(task, timeout=5, binary=binary)
    msg = err.value.message
    if binary:
        assert "header checksum" in msg and "does not match the listing's" in msg
        assert msg.count("stream failed") == 2  # the torn stream and the node that is down
    else:
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


def test_segments_are_read_in_parallel_in_order_spread_over_the_followers(
    fake: FakeCluster,
) -> None:
    fake.add_segments("q", [30] * 9)
    tasks = plan_tasks(ClusterClient(fake.urls, timeout=5), ["q"])
    fake.delay = 0.2
    got = list(read_segments(tasks, timeout=5, concurrency=3))
    assert [s.task.first_seq for s in got] == [t.first_seq for t in tasks]
    assert all(s.binary and s.rows == 30 for s in got)
    assert 2 <= fake.max_inflight <= 3  # overlapping, and bounded
    assert {node for node, _, _ in fake.served} == {2, 3}  # the followers, in turn


def test_a_segment_unreadable_among_parallel_reads_fails_the_reads(fake: FakeCluster) -> None:
    fake.add_segments("q", [10] * 5)
    tasks = plan_tasks(ClusterClient(fake.urls, timeout=5), ["q"])
    for nid in (1, 2, 3):
        fake.faults[nid].flipped.add(("q", 20))
    got = []
    with pytest.raises(SegmentUnreadable, match="segment q/20"):
        got.extend(s.task.first_seq for s in read_segments(tasks, timeout=5, concurrency=4))
    assert got == [0, 10]  # the segments before it, in order; nothing from it


def test_partitions_group_consecutive_segments_of_one_queue() -> None:
    tasks = [SegmentTask(q, f, f, 1, "0", ()) for q, f in [("a", 1), ("a", 2), ("a", 3), ("b", 1)]]
    groups = group_tasks(tasks, 2)
    assert [[(t.queue, t.first_seq) for t in g] for g in groups] == [
        [("a", 1), ("a", 2)],
        [("a", 3)],
        [("b", 1)],
    ]
