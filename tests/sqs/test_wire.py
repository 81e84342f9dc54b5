"""The SQS surface on the wire, without an SDK: error shapes of each protocol, the query
protocol by GET and at queue URLs, malformed requests; then aiobotocore (the async path) and a
planted checksum mismatch that the clients' check must catch; and the AWS CLI (v1). Real
3-node cluster."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiobotocore.session import get_session

from tests.cmq.cluster import CmqCluster, unique_queue
from tests.sqs.helpers import ACCOUNT, CREDENTIALS, REGION, ChecksumMismatch, body_md5

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

NS = "{http://queue.amazonaws.com/doc/2012-11-05/}"


def post(
    url: str, body: bytes, headers: dict[str, str], method: str = "POST"
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body or None, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def json_call(base: str, op: str, params: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    status, headers, body = post(
        base + "/",
        orjson.dumps(params),
        {"X-Amz-Target": f"AmazonSQS.{op}", "Content-Type": "application/x-amz-json-1.0"},
    )
    return status, headers, orjson.loads(body)


def query_call(url: str, params: dict[str, str]) -> tuple[int, ET.Element]:
    status, _, body = post(
        url,
        urllib.parse.urlencode(params).encode(),
        {"Content-Type": "application/x-www-form-urlencoded"},
    )
    return status, ET.fromstring(body)


def test_json_protocol_errors_carry_the_query_code(cmq_cluster: CmqCluster) -> None:
    base = cmq_cluster.urls[0]
    status, headers, body = json_call(base, "GetQueueUrl", {"QueueName": "absent-queue-x"})
    assert status == 400
    assert body["__type"] == "com.amazonaws.sqs#QueueDoesNotExist"
    assert body["message"]
    assert headers["x-amzn-query-error"] == "AWS.SimpleQueueService.NonExistentQueue;Sender"
    assert headers["x-amzn-RequestId"]
    status, _, body = json_call(base, "Frobnicate", {})
    assert (status, body["__type"]) == (400, "com.amazonaws.sqs#UnknownOperationException")
    status, _, raw = post(base + "/", b"{not json", {"X-Amz-Target": "AmazonSQS.ListQueues"})
    assert (status, orjson.loads(raw)["__type"]) == (
        400,
        "com.amazonaws.sqs#SerializationException",
    )
    status, _, body = json_call(base, "CreateQueue", {})
    assert (status, body["__type"]) == (400, "com.amazonaws.sqs#MissingParameter")


def test_query_protocol_by_post_get_and_queue_url(cmq_cluster: CmqCluster) -> None:
    base = cmq_cluster.urls[1]
    name = unique_queue("sqs-wire")
    status, root = query_call(base + "/", {"Action": "CreateQueue", "QueueName": name})
    assert status == 200
    url = root.findtext(f"{NS}CreateQueueResult/{NS}QueueUrl")
    assert url == f"{base}/{ACCOUNT}/{name}"
    # At the queue URL, the queue is implied.
    status, root = query_call(url, {"Action": "SendMessage", "MessageBody": "by path"})
    assert status == 200
    assert root.findtext(f"{NS}SendMessageResult/{NS}MD5OfMessageBody") == body_md5("by path")
    # GET with the parameters in the query string.
    query = urllib.parse.urlencode(
        {"Action": "ReceiveMessage", "WaitTimeSeconds": "2", "AttributeName.1": "All"}
    )
    status, _, raw = post(f"{url}?{query}", b"", {}, method="GET")
    assert status == 200
    message = ET.fromstring(raw).find(f"{NS}ReceiveMessageResult/{NS}Message")
    assert message is not None and message.findtext(f"{NS}Body") == "by path"
    # Errors are ErrorResponse documents.
    status, root = query_call(base + "/", {"Action": "GetQueueUrl", "QueueName": "absent-x"})
    assert status == 400
    assert root.tag == f"{NS}ErrorResponse"
    assert root.findtext(f"{NS}Error/{NS}Code") == "AWS.SimpleQueueService.NonExistentQueue"
    assert root.findtext(f"{NS}Error/{NS}Type") == "Sender"
    status, root = query_call(base + "/", {"Action": "Frobnicate"})
    assert (status, root.findtext(f"{NS}Error/{NS}Code")) == (400, "InvalidAction")
    status, root = query_call(url, {"Action": "GetQueueAttributes", "AttributeName.x": "All"})
    assert (status, root.findtext(f"{NS}Error/{NS}Code")) == (400, "MalformedQueryString")
    status, root = query_call(url, {"Action": "DeleteQueue"})
    assert status == 200
    assert root.tag == f"{NS}DeleteQueueResponse"


def test_the_native_api_is_untouched(cmq_cluster: CmqCluster) -> None:
    status, _, body = post(cmq_cluster.urls[0] + "/v1/queues", b"", {}, method="GET")
    assert status == 200 and "queues" in orjson.loads(body)


async def test_aiobotocore(cmq_cluster: CmqCluster) -> None:
    session = get_session()
    async with session.create_client(
        "sqs", endpoint_url=cmq_cluster.urls[2], region_name=REGION, **CREDENTIALS
    ) as sqs:
        url = (await sqs.create_queue(QueueName=unique_queue("sqs-aio")))["QueueUrl"]
        attrs = {"n": {"DataType": "Number", "StringValue": "7"}}
        sent = await asyncio.gather(
            *(
                sqs.send_message(QueueUrl=url, MessageBody=f"a{i}", MessageAttributes=attrs)
                for i in range(5)
            )
        )
        assert {s["MD5OfMessageBody"] for s in sent} == {body_md5(f"a{i}") for i in range(5)}
        bodies: list[str] = []
        for _ in range(10):
            got = await sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                WaitTimeSeconds=1,
                MessageAttributeNames=["All"],
            )
            for m in got.get("Messages", []):
                assert m["MD5OfBody"] == body_md5(m["Body"])
                assert m["MessageAttributes"] == attrs
                bodies.append(m["Body"])
                await sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
            if len(bodies) == 5:
                break
        assert sorted(bodies) == [f"a{i}" for i in range(5)]
        await sqs.delete_queue(QueueUrl=url)


def test_a_wrong_checksum_fails_the_call(sqs: Any) -> None:
    """Planted: a handler that corrupts the answer before the clients' check sees it."""
    url = sqs.create_queue(QueueName=unique_queue("sqs-md5"))["QueueUrl"]

    def corrupt(parsed: dict[str, Any], **_: Any) -> None:
        parsed["MD5OfMessageBody"] = "0" * 32

    sqs.meta.events.register_first("after-call.sqs.SendMessage", corrupt)
    with pytest.raises(ChecksumMismatch):
        sqs.send_message(QueueUrl=url, MessageBody="x")
    sqs.meta.events.unregister("after-call.sqs.SendMessage", corrupt)
    sqs.delete_queue(QueueUrl=url)


def aws(cmq_cluster: CmqCluster, tmp_path: Path, *args: str) -> Any:
    """Run the AWS CLI (v1, from PyPI) against node 1; its JSON output, parsed."""
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": CREDENTIALS["aws_access_key_id"],
        "AWS_SECRET_ACCESS_KEY": CREDENTIALS["aws_secret_access_key"],
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
    }
    cli = Path(sys.executable).with_name("aws")
    out = subprocess.run(
        [str(cli), "--endpoint-url", cmq_cluster.urls[0], "--output", "json", "sqs", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    return orjson.loads(out.stdout) if out.stdout.strip() else None


@pytest.mark.skipif(
    not Path(sys.executable).with_name("aws").exists(), reason="awscli not installed"
)
def test_the_aws_cli(cmq_cluster: CmqCluster, tmp_path: Path) -> None:
    name = unique_queue("sqs-cli")
    url = aws(cmq_cluster, tmp_path, "create-queue", "--queue-name", name)["QueueUrl"]
    sent = aws(cmq_cluster, tmp_path, "send-message", "--queue-url", url, "--message-body", "cli")
    assert sent["MD5OfMessageBody"] == body_md5("cli")
    got = aws(
        cmq_cluster, tmp_path, "receive-message", "--queue-url", url, "--wait-time-seconds", "2"
    )
    (m,) = got["Messages"]
    assert m["Body"] == "cli"
    aws(
        cmq_cluster,
        tmp_path,
        "delete-message",
        "--queue-url",
        url,
        "--receipt-handle",
        m["ReceiptHandle"],
    )
    attrs = aws(
        cmq_cluster,
        tmp_path,
        "get-queue-attributes",
        "--queue-url",
        url,
        "--attribute-names",
        "ApproximateNumberOfMessages",
    )
    assert attrs["Attributes"] == {"ApproximateNumberOfMessages": "0"}
    aws(cmq_cluster, tmp_path, "delete-queue", "--queue-url", url)
