"""api/ is an HTTP surface only: it reaches the queue through `cmq.service.QueueService` and the
shared value/error modules, never the state machine, Raft or the node internals.

This checks each api module's direct imports against an allow-list; that nothing in api reaches
the state machine, the node or raftlog, directly or through other modules, is the
``api-service-surface`` import-linter contract in pyproject.toml (run by ``make lint``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "api"
ALLOWED_CMQ = {
    "cmq.consumers",
    "cmq.errors",
    "cmq.export_values",
    "cmq.model",
    "cmq.segment_values",
    "cmq.service",
    "cmq.stream",
}
"""The shared surface: the service protocol, its values (`cmq.model`, `cmq.segment_values`,
`cmq.export_values`) and errors, the streaming
protocol's frames (pure, shared with `cmq.client.stream`) and the count of stream
subscriptions the node's metrics read (`cmq.consumers`)."""
PURE = {
    "errors.py",
    "models.py",
    "status_models.py",
    "decoding.py",
    "routes.py",
    "segment_routes.py",
    "openapi.py",
    "metrics.py",
}
"""Modules that must not need aiohttp (so another HTTP surface can reuse them)."""


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            found.add("<relative>")
    return found


def api_files() -> list[Path]:
    files = sorted(API.glob("*.py"))
    assert files
    return files


@pytest.mark.parametrize("path", api_files(), ids=lambda p: p.name)
def test_api_module_uses_only_the_service_surface_of_cmq(path: Path) -> None:
    modules = imported_modules(path)
    top_level = {m for m in modules if m.split(".")[0] in {"cmq", "raftlog"}}
    cmq_modules = {".".join(m.split(".")[:2]) for m in top_level}
    assert not any(m.startswith("raftlog") for m in top_level), modules
    assert cmq_modules <= ALLOWED_CMQ, cmq_modules - ALLOWED_CMQ
    if path.name in PURE:
        assert not any(m.split(".")[0] == "aiohttp" for m in modules), (
            f"{path.name} imports aiohttp"
        )


def test_checker_catches_a_forbidden_import(tmp_path: Path) -> None:
    planted = tmp_path / "bad.py"
    planted.write_text("from cmq.fsm import apply\nimport raftlog.core\n")
    assert {"cmq.fsm", "raftlog.core"} <= imported_modules(planted)
