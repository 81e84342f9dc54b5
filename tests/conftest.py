"""Fixtures shared by every test package."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests import seeds
from tests.cmq.cluster import CmqCluster
from tests.ports import PORT_RANGE_ENV, worker_range

# Every server a test starts (in this process or a child `cmq` process, which inherits it)
# takes its port from this worker's own range (`tests.ports.worker_range`).
os.environ[PORT_RANGE_ENV] = worker_range(
    os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
)

# CI replays a fixed set of examples (derandomized) so a landing is judged on reproducible
# runs; local runs keep exploring new examples. No deadlines on a shared 2-core machine.
settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_report_header() -> str:
    """The simulator sweeps' seed draws (`tests.seeds`): a run's seeds, and how to change them."""
    return seeds.header()


@pytest.fixture(autouse=True)
def _asyncio_tasks_dumped_before_the_timeout(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test about to hit pytest-timeout prints the stack of every pending asyncio task first:
    the timeout's own dump shows threads only, where an awaited-forever coroutine looks like an
    idle event loop."""
    timeout = float(request.config.getini("timeout") or 0)
    if timeout <= 30:
        yield
        return
    timer = threading.Timer(timeout - 20, _dump_pending_tasks, args=(request.node.nodeid,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _dump_pending_tasks(nodeid: str) -> None:
    """Print every pending task's stack (read from a watchdog thread while the loop idles in
    its selector; a set that changes under us is retried)."""
    for _ in range(5):
        try:
            tasks = [t for t in list(vars(asyncio.tasks)["_all_tasks"]) if not t.done()]
            break
        except RuntimeError:
            continue
    else:
        return
    out = sys.stderr
    print(f"\n==== {len(tasks)} pending asyncio tasks of {nodeid} ====", file=out)
    for task in tasks:
        try:
            task.print_stack(limit=12, file=out)
        except Exception as e:  # a frame that moved under us: say so and go on
            print(f"{task!r}: {e!r}", file=out)


@pytest.fixture
def quiet_logging() -> Iterator[None]:
    """Silence logging: simulations report halted groups as violations, not log lines."""
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


@pytest.fixture(scope="session")
def cmq_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CmqCluster]:
    """One running 3-node cluster (``cmq serve`` processes, 2 data groups) shared by every test
    of the session that only needs to call the API. Started on first use. Tests using it must
    not kill, pause or reconfigure its nodes (start a `CmqCluster` of their own for that) and
    must name their queues with `tests.cmq.cluster.unique_queue`."""
    cluster = CmqCluster(tmp_path_factory.mktemp("cmq-session"), n=3, groups=2)
    try:
        cluster.start_all()
        yield cluster
    finally:
        cluster.stop_all()


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator[object]:
    """A page of Debian's chromium (headless, a fresh profile) driven by Playwright's sync API
    (skipped when chromium is not installed). Playwright runs an event loop in the test's
    thread: call blocking clients through `tests.cmq.cluster.blocking`."""
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (make test installs Debian's)")
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=tmp_path)
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile,
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1360, "height": 900},
        )
        try:
            yield context.new_page()
        finally:
            context.close()


@pytest.fixture(scope="session")
def console_artifacts() -> Path:
    """Where browser tests keep their screenshots: ``build/artifacts/console/`` under the
    repository (ignored by git), kept after the run."""
    path = Path(__file__).resolve().parents[1] / "build" / "artifacts" / "console"
    path.mkdir(parents=True, exist_ok=True)
    return path
