"""The catalog state machine and receipt handles."""

from __future__ import annotations

import pytest

from cmq.catalog.meta import Assignment, CatalogMachine, Refused
from cmq.errors import InvariantBroken, ReceiptInvalid
from cmq.routing.receipts import ReceiptSigner
from tests.cmq.helpers import founded


def test_catalog_places_on_the_least_loaded_group_idempotently() -> None:
    m = founded(3)
    got = [m.apply(i, CatalogMachine.assign(f"q{i}")) for i in range(1, 7)]
    assert [a.group for a in got if isinstance(a, Assignment)] == [1, 2, 3, 1, 2, 3]
    assert m.apply(7, CatalogMachine.assign("q1")) == Assignment("q1", 1)
    assert m.apply(8, CatalogMachine.remove("q2")) is True
    assert m.apply(9, CatalogMachine.remove("q2")) is False
    assert m.apply(10, CatalogMachine.assign("new")) == Assignment("new", 2)
    assert m.names() == ["new", "q1", "q3", "q4", "q5", "q6"]


def test_catalog_snapshot_round_trip_and_replay_equality() -> None:
    a, b = founded(2), CatalogMachine()
    for i, name in enumerate(["x", "y", "z"]):
        a.apply(i, CatalogMachine.assign(name))
    b.restore(3, a.snapshot())
    assert b.queues == a.queues and b.snapshot() == a.snapshot()
    b.restore(0, b"")
    assert b.queues == {} and not b.initialized
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


def test_catalog_records_nodes_and_refuses_to_found_without_them() -> None:
    m = CatalogMachine()
    assert isinstance(m.apply(1, CatalogMachine.assign("q")), Refused)  # not founded yet
    m.apply(2, CatalogMachine.register_node(1, "10.0.0.1:9080", ["/d1", "/d2"], zone="a"))
    refused = m.apply(3, CatalogMachine.init(2, 3, [1, 2]))
    assert isinstance(refused, Refused) and refused.code == "Unavailable"
    assert not m.initialized
    m.apply(4, CatalogMachine.register_node(2, "10.0.0.2:9080", ["/data"]))
    m.apply(5, CatalogMachine.register_node(2, "10.0.0.2:9081", ["/data"]))  # moved: updated
    assert m.apply(6, CatalogMachine.init(2, 3, [1, 2])) is True
    assert m.apply(7, CatalogMachine.init(5, 3, [1, 2])) is True  # once founded, a no-op
    info = m.node_info(2)
    assert info is not None and info.address == "10.0.0.2:9081" and info.data_dirs == ("/data",)
    assert m.data_groups == (1, 2)
    m.apply(8, CatalogMachine.assign("q"))
    groups = m.groups()
    assert groups[1] == {
        "replicas": [1, 2],
        "data_dirs": {1: "/d1", 2: "/data"},  # each node's groups spread over its directories
        "move": None,
        "queues": 1,
    }
    assert groups[2]["data_dirs"] == {1: "/d2", 2: "/data"}
    copy = CatalogMachine()
    copy.restore(8, m.snapshot())
    assert copy.nodes == m.nodes and copy.queues == m.queues
    assert copy.placements == m.placements and copy.snapshot() == m.snapshot()
