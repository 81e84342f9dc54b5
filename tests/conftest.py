"""Fixtures shared by every test package."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.cmq.cluster import CmqCluster

# CI replays a fixed set of examples (derandomized) so a landing is judged on reproducible
# runs; local runs keep exploring new examples. No deadlines on a shared 2-core machine.
settings.register_profile("ci", derandomize=True, deadline=None)
settings.register_profile("dev", deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


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
