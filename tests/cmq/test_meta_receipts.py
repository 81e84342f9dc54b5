"""The catalog state machine and receipt handles."""

from __future__ import annotations

import pytest

from cmq.errors import InvariantBroken, ReceiptInvalid
from cmq.meta import Assignment, CatalogMachine
from cmq.receipts import ReceiptSigner


def test_catalog_places_on_the_least_loaded_group_idempotently() -> None:
    m = CatalogMachine((1, 2, 3))
    got = [m.apply(i, CatalogMachine.assign(f"q{i}")) for i in range(1, 7)]
    assert [a.group for a in got if isinstance(a, Assignment)] == [1, 2, 3, 1, 2, 3]
    assert m.apply(7, CatalogMachine.assign("q1")) == Assignment("q1", 1)
    assert m.apply(8, CatalogMachine.remove("q2")) is True
    assert m.apply(9, CatalogMachine.remove("q2")) is False
    assert m.apply(10, CatalogMachine.assign("new")) == Assignment("new", 2)
    assert m.names() == ["new", "q1", "q3", "q4", "q5", "q6"]


def test_catalog_snapshot_round_trip_and_replay_equality() -> None:
    a, b = CatalogMachine((1, 2)), CatalogMachine((1, 2))
    for i, name in enumerate(["x", "y", "z"]):
        a.apply(i, CatalogMachine.assign(name))
    b.restore(3, a.snapshot())
    assert b.queues == a.queues and b.snapshot() == a.snapshot()
    b.restore(0, b"")
    assert b.queues == {}
    with pytest.raises(InvariantBroken):
        b.restore(1, b"{not json")
    with pytest.raises(InvariantBroken):
        b.apply(1, b'{"op": "explode", "name": "x"}')


def test_receipts_bind_queue_seq_and_lease() -> None:
    s = ReceiptSigner(b"k" * 32)
    r = s.mint("orders", 42, 7)
    assert s.verify("orders", r) == (42, 7)
    with pytest.raises(ReceiptInvalid):
        s.verify("other-queue", r)
    for tampered in (r[:-1] + ("A" if r[-1] != "A" else "B"), r[1:], "", "!!!", 5, r + r):
        with pytest.raises(ReceiptInvalid):
            s.verify("orders", tampered)
    with pytest.raises(ReceiptInvalid):
        ReceiptSigner(b"x" * 32).verify("orders", r)  # another cluster's key


def test_catalog_records_nodes_and_group_bindings() -> None:
    m = CatalogMachine((1, 2))
    m.apply(1, CatalogMachine.register_node(1, "10.0.0.1:9080", ["/d1", "/d2"]))
    m.apply(2, CatalogMachine.register_node(2, "10.0.0.2:9080", ["/data"]))
    m.apply(3, CatalogMachine.register_node(2, "10.0.0.2:9081", ["/data"]))  # moved: updated
    m.apply(4, CatalogMachine.assign("q"))
    assert m.node_info(2) == {"address": "10.0.0.2:9081", "data_dirs": ["/data"]}
    groups = m.groups()
    assert groups[1] == {"replicas": [1, 2], "data_dirs": {1: "/d2", 2: "/data"}, "queues": 1}
    assert groups[2]["data_dirs"] == {1: "/d1", 2: "/data"}
    copy = CatalogMachine((1, 2))
    copy.restore(4, m.snapshot())
    assert copy.nodes == m.nodes and copy.queues == m.queues
