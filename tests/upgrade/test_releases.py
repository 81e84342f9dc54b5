"""`tests.upgrade.releases.same_dependencies`: the previous release's code may run on this
virtualenv only if every dependency it declared is declared the same way here."""

from __future__ import annotations

from tests.upgrade.releases import declared_within


def test_an_added_dependency_keeps_the_old_ones_but_a_changed_one_does_not() -> None:
    old = ["aiohttp>=3.9", "orjson>=3.9"]
    assert declared_within(old, [*old, "argcomplete>=3.1"])
    assert not declared_within(old, ["aiohttp>=3.10", "orjson>=3.9"])  # a constraint changed
    assert not declared_within(old, ["aiohttp>=3.9"])  # one dropped
