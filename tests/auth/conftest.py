"""Fixtures of the authentication tests: one real ``cmq serve`` node that asks for signatures
(no ``--anonymous``), its bootstrap admin key, and keys made for the tests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cmq.admin.key_admin import ADMIN_KEY_FILE
from cmq.client import AccessKey, SyncClient
from tests.cmq.cluster import CmqCluster
from tests.sqs import helpers


@pytest.fixture(scope="session")
def auth_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CmqCluster]:
    cluster = CmqCluster(tmp_path_factory.mktemp("cmq-auth"), n=1, groups=1, anonymous=False)
    with cluster.running():
        yield cluster


@pytest.fixture(scope="session")
def admin_key(auth_cluster: CmqCluster) -> AccessKey:
    """The bootstrap admin key the node wrote to its data directory."""
    path = auth_cluster.root / "node1" / ADMIN_KEY_FILE
    deadline = time.monotonic() + 30
    while not path.exists():
        assert time.monotonic() < deadline, f"no {path}"
        time.sleep(0.1)
    assert path.stat().st_mode & 0o777 == 0o600
    return AccessKey.from_file(path)


@pytest.fixture
def admin(auth_cluster: CmqCluster, admin_key: AccessKey) -> Iterator[SyncClient]:
    with SyncClient(auth_cluster.urls[0], access_key=admin_key) as client:
        yield client


@pytest.fixture(scope="session")
def query_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return helpers.query_model_dir(tmp_path_factory.mktemp("sqs-query-model"))


def new_key(admin: SyncClient, *grants: tuple[str, list[str]]) -> AccessKey:
    """A fresh key with ``grants`` (pattern, actions), made through the API."""
    raw = admin.request(
        "POST", "/v1/keys", {"grants": [{"pattern": p, "actions": a} for p, a in grants]}
    )
    assert raw.status == 201, raw.payload
    return AccessKey(raw.payload["access_key_id"], raw.payload["secret_access_key"])
