"""The modules of `cmq.fsm` import one another without a cycle, type-checking-only imports
included (those are outside the import-linter contracts, which skip them): each handler module
is given what it works on and never names the machine that calls it. Purity itself is the
``fsm-pure`` contract (pyproject.toml; tests/test_import_contracts.py)."""

from __future__ import annotations

from collections.abc import Mapping, Set

import grimp


def first_cycle(edges: Mapping[str, Set[str]]) -> list[str] | None:
    """A cycle of ``edges`` (importer -> imported) as a path that ends where it starts, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def fsm_imports() -> dict[str, set[str]]:
    graph = grimp.build_graph("cmq", exclude_type_checking_imports=False, cache_dir=None)
    modules = {m for m in graph.modules if m.startswith("cmq.fsm.")}
    return {
        m: {i for i in graph.find_modules_directly_imported_by(m) if i in modules} for m in modules
    }


def test_the_queue_machine_modules_import_without_a_cycle() -> None:
    edges = fsm_imports()
    assert {"cmq.fsm.machine", "cmq.fsm.lifecycle", "cmq.fsm.fifo", "cmq.fsm.queue"} <= set(edges)
    assert first_cycle(edges) is None, first_cycle(edges)
    # The handlers are given what they work on: none of them names the machine.
    assert not {m for m, imported in edges.items() if "cmq.fsm.machine" in imported}


def test_a_cycle_is_found() -> None:
    assert first_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert first_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert first_cycle({"x": {"y"}, "y": {"y"}}) == ["y", "y"]
