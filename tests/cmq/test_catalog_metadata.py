"""The catalog's per-queue metadata (string pairs other surfaces keep there, such as the SQS
surface's tags and timestamps): set, unset, forgotten with the queue, kept by snapshots, and
refused for queues that are not placed."""

from __future__ import annotations

from cmq.catalog.meta import CatalogMachine
from tests.cmq.helpers import founded


def test_metadata_set_unset_and_forgotten_with_the_queue() -> None:
    cat = founded(2)
    assert cat.apply(1, CatalogMachine.update_meta("q", {"a": "1"}, [])) is None  # not placed
    assert cat.meta_of("q") is None
    cat.apply(2, CatalogMachine.assign("q"))
    assert cat.meta_of("q") == {}
    assert cat.apply(3, CatalogMachine.update_meta("q", {"a": "1", "b": "2"}, [])) == {
        "a": "1",
        "b": "2",
    }
    assert cat.apply(4, CatalogMachine.update_meta("q", {"c": "3"}, ["a", "zz"])) == {
        "b": "2",
        "c": "3",
    }
    result = cat.meta_of("q")
    assert result is not None
    result["x"] = "mutating a read changes nothing"
    assert cat.meta_of("q") == {"b": "2", "c": "3"}
    cat.apply(5, CatalogMachine.remove("q"))
    cat.apply(6, CatalogMachine.assign("q"))
    assert cat.meta_of("q") == {}  # a re-created queue starts without its predecessor's


def test_metadata_survives_snapshots_and_old_images_still_restore() -> None:
    cat = founded(1)
    cat.apply(10, CatalogMachine.assign("q"))
    bare = cat.snapshot()
    assert b"meta" not in bare  # images without metadata keep their former bytes
    cat.apply(11, CatalogMachine.update_meta("q", {"tag.k": "v"}, []))
    image = cat.snapshot()
    other = CatalogMachine()
    other.restore(2, image)
    assert other.meta_of("q") == {"tag.k": "v"}
    assert other.snapshot() == image
    other.restore(1, bare)
    assert other.meta_of("q") == {}
    other.restore(0, b"")
    assert other.meta_of("q") is None
