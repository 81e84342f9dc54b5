"""Authentication on a real ``cmq serve`` node (no ``--anonymous``): the bootstrap admin key,
``cmq key`` commands, keys x actions x queues through the native client and boto3 (both SQS
protocols), revocation and deletion, ``curl --aws-sigv4``; every refusal leaves the queue and
the keys as they were."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from cmq.admin.key_admin import ADMIN_KEY_FILE
from cmq.client import AccessKey, SyncClient
from cmq.errors import CmqError
from tests.auth.conftest import new_key
from tests.cmq.cluster import CmqCluster, unique_queue


def boto(url: str, key: AccessKey, protocol: str, model: Path, region: str = "us-east-1") -> Any:
    session = botocore.session.get_session()
    if protocol == "query":
        session.get_component("data_loader").search_paths.insert(0, str(model))
    return boto3.session.Session(botocore_session=session).client(
        "sqs",
        endpoint_url=url,
        region_name=region,
        aws_access_key_id=key.access_key_id,
        aws_secret_access_key=key.secret_access_key,
        config=Config(retries={"max_attempts": 1}),
    )


def depth(admin: SyncClient, queue: str) -> tuple[int, ...]:
    """The queue's state as counts: (visible, in flight, delayed, sent, acked)."""
    s = admin.get_queue(queue).stats
    return s.visible, s.in_flight, s.delayed, s.sent_total, s.acked_total


def key_ids(admin: SyncClient) -> list[str]:
    raw = admin.request("GET", "/v1/keys")
    assert raw.status == 200
    return [k["access_key_id"] for k in raw.payload["keys"]]


def test_bootstrap_key_file_and_no_secret_in_logs(
    auth_cluster: CmqCluster, admin_key: AccessKey
) -> None:
    path = auth_cluster.root / "node1" / ADMIN_KEY_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    log = (auth_cluster.root / "node1.log").read_text()
    assert str(path) in log
    assert admin_key.secret_access_key not in log
    with SyncClient(auth_cluster.urls[0], access_key=admin_key) as admin:
        raw = admin.request("GET", "/v1/keys")
    assert admin_key.secret_access_key.encode() not in raw.body
    assert b"sealed" not in raw.body


def test_unsigned_requests_are_refused_and_probes_stay_open(auth_cluster: CmqCluster) -> None:
    with SyncClient(auth_cluster.urls[0]) as anonymous:
        assert anonymous.ready()
        raw = anonymous.request("PUT", "/v1/queues/never-created", {})
        assert raw.status == 401
        assert raw.payload["error"]["code"] == "MissingAuthenticationToken"
        with pytest.raises(CmqError):
            anonymous.list_queues()


def test_native_keys_by_actions_by_queues(auth_cluster: CmqCluster, admin: SyncClient) -> None:
    mine, other = unique_queue("auth-mine"), unique_queue("auth-other")
    for q in (mine, other):
        admin.create_queue(q)
    pattern = mine[:-4] + "*"
    sender = new_key(admin, (pattern, ["send"]))
    worker = new_key(admin, (pattern, ["receive", "delete"]))
    url = auth_cluster.urls[0]
    with SyncClient(url, access_key=sender) as s, SyncClient(url, access_key=worker) as w:
        s.send_one(mine, "one")
        for client, call in (
            (s, lambda c: c.send_one(other, "x")),
            (s, lambda c: c.receive(mine, 1)),
            (s, lambda c: c.create_queue(unique_queue("auth-new"))),
            (w, lambda c: c.send_one(mine, "x")),
            (w, lambda c: c.receive(other, 1)),
            (w, lambda c: c.delete_queue(mine)),
            (w, lambda c: c.purge(mine)),
        ):
            before = (depth(admin, mine), depth(admin, other), key_ids(admin))
            with pytest.raises(CmqError) as caught:
                call(client)
            assert caught.value.code == "AccessDenied"
            assert getattr(caught.value, "status", None) == 403
            assert (depth(admin, mine), depth(admin, other), key_ids(admin)) == before
        [message] = w.receive(mine, 1, wait_seconds=5)
        assert w.ack_one(mine, message.receipt).ok
    assert depth(admin, mine)[:3] == (0, 0, 0)


@pytest.mark.parametrize("protocol", ["json", "query"])
def test_sqs_keys_revoked_and_deleted(
    auth_cluster: CmqCluster, admin: SyncClient, query_model: Path, protocol: str
) -> None:
    queue = unique_queue(f"auth-sqs-{protocol}")
    admin.create_queue(queue)
    key = new_key(admin, (queue, ["send", "receive"]))
    url = auth_cluster.urls[0]
    sqs = boto(url, key, protocol, query_model)
    queue_url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    sqs.send_message(QueueUrl=queue_url, MessageBody="hello")
    assert depth(admin, queue)[0] == 1

    def refused(client: Any, status: int, code: str, **call: Any) -> None:
        before = (depth(admin, queue), key_ids(admin))
        with pytest.raises(ClientError) as caught:
            if "QueueName" in call:
                client.create_queue(**call)
            else:
                client.send_message(QueueUrl=queue_url, MessageBody="no")
        error = caught.value.response
        assert error["ResponseMetadata"]["HTTPStatusCode"] == status
        assert error["Error"]["Code"] == code
        assert (depth(admin, queue), key_ids(admin)) == before

    refused(sqs, 403, "AccessDenied", QueueName=unique_queue("auth-sqs-new"))
    unknown = boto(url, AccessKey("AKCMQUNKNOWN00000000X", "nope"), protocol, query_model)
    refused(unknown, 401, "InvalidClientTokenId")
    wrong = boto(url, AccessKey(key.access_key_id, "wrong-secret"), protocol, query_model)
    refused(wrong, 401, "SignatureDoesNotMatch")
    assert admin.request("POST", f"/v1/keys/{key.access_key_id}/revoke", {"pattern": queue})
    refused(sqs, 403, "AccessDenied")
    assert admin.request("DELETE", f"/v1/keys/{key.access_key_id}").status == 200
    refused(sqs, 401, "InvalidClientTokenId")
    assert key.access_key_id not in key_ids(admin)


def test_key_commands(auth_cluster: CmqCluster, admin_key: AccessKey, admin: SyncClient) -> None:
    key_file = auth_cluster.root / "node1" / ADMIN_KEY_FILE
    url = auth_cluster.urls[0]

    def cmq(*args: str, key: Path | None = key_file) -> subprocess.CompletedProcess[str]:
        prefix = ["--key-file", str(key)] if key is not None else []
        return subprocess.run(
            [sys.executable, "-m", "cmq", *prefix, *args, "--url", url],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    out = cmq("key", "create", "--grant", "auth-cli-*=send,receive", "--json")
    assert out.returncode == 0, out.stderr
    created = json.loads(out.stdout)
    assert created["secret_access_key"]
    new_id = created["access_key_id"]
    listed = cmq("key", "list", "--json")
    assert new_id in listed.stdout and created["secret_access_key"] not in listed.stdout
    assert cmq("key", "grant", new_id, "auth-x=delete").returncode == 0
    assert cmq("key", "revoke", new_id, "auth-x").returncode == 0
    refused = cmq("key", "list", key=None)
    assert refused.returncode == 1 and "MissingAuthenticationToken" in refused.stderr
    assert cmq("key", "delete", new_id).returncode == 0
    assert new_id not in key_ids(admin)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_curl_aws_sigv4(auth_cluster: CmqCluster, admin: SyncClient) -> None:
    queue = unique_queue("auth-curl")
    admin.create_queue(queue)
    key = new_key(admin, (queue, ["send"]))
    out = subprocess.run(
        [
            "curl",
            "-sS",
            "--aws-sigv4",
            "aws:amz:us-east-1:sqs",
            "--user",
            f"{key.access_key_id}:{key.secret_access_key}",
            "-H",
            "Content-Type: application/json",
            "-d",
            '{"messages": [{"body": "from curl"}]}',
            "-w",
            "\n%{http_code}",
            f"{auth_cluster.urls[0]}/v1/queues/{queue}/messages",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    body, _, status = out.stdout.rpartition("\n")
    assert status == "200", out.stdout + out.stderr
    assert json.loads(body)["messages"]
    assert depth(admin, queue)[0] == 1


@pytest.fixture
def no_key_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("CMQ_ACCESS_KEY_ID", "CMQ_SECRET_ACCESS_KEY", "CMQ_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    yield


def test_client_reads_the_key_from_the_environment(
    auth_cluster: CmqCluster,
    admin_key: AccessKey,
    monkeypatch: pytest.MonkeyPatch,
    no_key_env: None,
) -> None:
    monkeypatch.setenv("CMQ_ACCESS_KEY_ID", admin_key.access_key_id)
    monkeypatch.setenv("CMQ_SECRET_ACCESS_KEY", admin_key.secret_access_key)
    with SyncClient(auth_cluster.urls[0]) as client:
        assert isinstance(client.list_queues(), list)
