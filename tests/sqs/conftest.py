"""Fixtures of the SQS tests: boto3 clients on the session's real 3-node cluster, one per
protocol (``sqs`` is parametrized over both)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cmq.cluster import CmqCluster
from tests.sqs import helpers

PROTOCOLS = ("json", "query")


@pytest.fixture(scope="session")
def query_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return helpers.query_model_dir(tmp_path_factory.mktemp("sqs-query-model"))


@pytest.fixture(params=PROTOCOLS)
def protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def sqs(cmq_cluster: CmqCluster, query_model: Path, protocol: str) -> Iterator[Any]:
    """A boto3 SQS client on node 2 (JSON) or node 3 (query): not necessarily any queue's
    leader, so calls are forwarded."""
    url = cmq_cluster.urls[1 if protocol == "json" else 2]
    client = helpers.client(url, protocol, query_model)
    yield client
    client.close()


@pytest.fixture
def node1(cmq_cluster: CmqCluster, query_model: Path, protocol: str) -> Iterator[Any]:
    """A second client of the same protocol, on node 1."""
    client = helpers.client(cmq_cluster.urls[0], protocol, query_model)
    yield client
    client.close()
