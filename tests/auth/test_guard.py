"""The authentication middleware on the in-process app (`api.app.make_app` with ``auth``): every
refusal is answered with its status and code and reaches no service call; grants decide the
rest. Requests are signed by the client's signer (`cmq.client.signing`) and, for the SQS
surface, by botocore's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from api.app import make_app
from api.auth.guard import AuthConfig
from api.sqs.queues import SqsSettings
from cmq.client import AccessKey
from cmq.grants import KeyGrant
from tests.api.recording import RecordingService

Client = TestClient[web.Request, web.Application]
NOW = datetime.now(UTC).replace(microsecond=0)
ADMIN = AccessKey("AKADMIN", "admin-secret")
SENDER = AccessKey("AKSENDER", "sender-secret")
WORKER = AccessKey("AKWORKER", "worker-secret")
NOBODY = AccessKey("AKNOBODY", "nobody-secret")


@dataclass
class Keys:
    secrets: dict[str, str] = field(
        default_factory=lambda: {
            k.access_key_id: k.secret_access_key for k in (ADMIN, SENDER, WORKER, NOBODY)
        }
    )
    grants: dict[str, tuple[KeyGrant, ...]] = field(
        default_factory=lambda: {
            "AKADMIN": (KeyGrant("*", ("admin",)),),
            "AKSENDER": (KeyGrant("orders-*", ("send",)),),
            "AKWORKER": (KeyGrant("orders-*", ("delete", "receive")),),
            "AKNOBODY": (),
        }
    )

    def secret_of(self, key_id: str) -> str | None:
        return self.secrets.get(key_id)

    def grants_of(self, key_id: str) -> tuple[KeyGrant, ...] | None:
        return self.grants.get(key_id)


@pytest.fixture
def keys() -> Keys:
    return Keys()


@pytest.fixture
def service() -> RecordingService:
    return RecordingService()


@pytest.fixture
async def client(service: RecordingService, keys: Keys) -> AsyncIterator[Client]:
    auth = AuthConfig(keys, region="us-east-1", clock=lambda: NOW)
    app = make_app(service, sqs=SqsSettings(), auth=auth)
    async with TestClient(TestServer(app)) as c:
        yield c


async def call(
    client: Client,
    key: AccessKey | None,
    method: str,
    path: str,
    body: object = None,
    *,
    when: datetime = NOW,
    tamper: bytes | None = None,
) -> tuple[int, dict[str, object]]:
    data = None if body is None else orjson.dumps(body)
    url = str(client.make_url(path))
    headers = {} if key is None else key.sign(method, url, data, when)
    if data is not None:
        headers["Content-Type"] = "application/json"
    resp = await client.request(method, path, data=tamper or data, headers=headers)
    return resp.status, await resp.json(content_type=None)


def code(payload: dict[str, object]) -> str:
    error = payload["error"]
    assert isinstance(error, dict)
    return str(error["code"])


SEND = ("POST", "/v1/queues/{q}/messages", {"messages": [{"body": "x"}]}, "send")
RECEIVE = ("POST", "/v1/queues/{q}/messages/receive", {"max_messages": 1}, "receive")
ACK = ("POST", "/v1/queues/{q}/messages/ack", {"receipts": ["r"]}, "ack")
CREATE = ("PUT", "/v1/queues/{q}", {}, "create_queue")
DELETE_QUEUE = ("DELETE", "/v1/queues/{q}", None, "delete_queue")
STATS = ("GET", "/v1/queues/{q}", None, "get_queue")
OPERATIONS = (SEND, RECEIVE, ACK, CREATE, DELETE_QUEUE, STATS)
ALLOWED = {
    # (key, operation, queue) -> allowed; queues: "orders-eu" matches orders-*, "billing" not
    ("AKADMIN", op[3], q): True
    for op in OPERATIONS
    for q in ("orders-eu", "billing")
} | {
    ("AKSENDER", "send", "orders-eu"): True,
    ("AKSENDER", "get_queue", "orders-eu"): True,
    ("AKWORKER", "receive", "orders-eu"): True,
    ("AKWORKER", "ack", "orders-eu"): True,
    ("AKWORKER", "get_queue", "orders-eu"): True,
}


@pytest.mark.parametrize("key", [ADMIN, SENDER, WORKER, NOBODY], ids=lambda k: k.access_key_id)
@pytest.mark.parametrize("queue", ["orders-eu", "billing"])
@pytest.mark.parametrize("op", OPERATIONS, ids=lambda o: o[3])
async def test_native_grants_matrix(
    client: Client, service: RecordingService, key: AccessKey, queue: str, op: tuple[str, ...]
) -> None:
    method, path, body, _ = op
    status, payload = await call(client, key, method, path.format(q=queue), body)
    if ALLOWED.get((key.access_key_id, op[3], queue), False):
        assert status < 300, payload
        assert len(service.calls) == 1
    else:
        assert (status, code(payload)) == (403, "AccessDenied")
        assert service.calls == []


async def test_cluster_routes_need_admin_on_everything(
    client: Client, service: RecordingService, keys: Keys
) -> None:
    keys.grants["AKSENDER"] = (KeyGrant("*", ("send", "receive", "delete")),)
    for path in ("/v1/nodes", "/v1/groups/0/digest"):
        status, payload = await call(client, SENDER, "GET", path)
        assert (status, code(payload)) == (403, "AccessDenied"), path
    assert service.calls == []
    keys.grants["AKSENDER"] = (KeyGrant("orders-*", ("admin",)),)
    status, payload = await call(client, SENDER, "GET", "/v1/nodes")
    assert (status, code(payload)) == (403, "AccessDenied")
    status, _ = await call(client, ADMIN, "GET", "/v1/nodes")
    assert status == 200
    # any valid key lists queue names and reads the cluster status
    status, _ = await call(client, NOBODY, "GET", "/v1/queues")
    assert status == 200


def _refusals() -> list[tuple[str, dict[str, object], int, str]]:
    return [
        ("unsigned", {"key": None}, 401, "MissingAuthenticationToken"),
        ("unknown key", {"key": AccessKey("AKWHO", "x")}, 401, "InvalidClientTokenId"),
        ("wrong secret", {"key": AccessKey("AKADMIN", "guess")}, 401, "SignatureDoesNotMatch"),
        ("wrong region", {"key": AccessKey("AKADMIN", "admin-secret", "eu-west-3")}, 401,
         "SignatureDoesNotMatch"),
        ("tampered body", {"key": ADMIN, "tamper": b'{"messages": [{"body": "y"}]}'}, 401,
         "SignatureDoesNotMatch"),
        ("skew past", {"key": ADMIN, "when": NOW - timedelta(minutes=16)}, 401,
         "RequestExpired"),
        ("skew future", {"key": ADMIN, "when": NOW + timedelta(minutes=16)}, 401,
         "RequestExpired"),
    ]  # fmt: skip


@pytest.mark.parametrize("refusal", _refusals(), ids=lambda r: r[0])
async def test_refused_signatures_change_nothing(
    client: Client, service: RecordingService, refusal: tuple[str, dict[str, object], int, str]
) -> None:
    case, how, status, error = refusal
    how = dict(how)
    key = how.pop("key")
    assert key is None or isinstance(key, AccessKey)
    got, payload = await call(
        client,
        key,
        "POST",
        "/v1/queues/orders-eu/messages",
        SEND[2],
        **how,  # type: ignore[arg-type]
    )
    assert (got, code(payload)) == (status, error), case
    assert service.calls == []


async def test_skew_inside_the_window_is_accepted(
    client: Client, service: RecordingService
) -> None:
    for minutes in (-14, 14):
        status, _ = await call(
            client, ADMIN, "GET", "/v1/queues/orders-eu", when=NOW + timedelta(minutes=minutes)
        )
        assert status == 200
    assert len(service.calls) == 2


async def test_wrong_service_is_refused(client: Client, service: RecordingService) -> None:
    url = str(client.make_url("/v1/queues"))
    request = AWSRequest("GET", url, headers={"X-Amz-Date": NOW.strftime("%Y%m%dT%H%M%SZ")})
    SigV4Auth(Credentials("AKADMIN", "admin-secret"), "s3", "us-east-1").add_auth(request)
    resp = await client.get("/v1/queues", headers=dict(request.headers))
    assert resp.status == 401
    assert code(await resp.json()) == "SignatureDoesNotMatch"


async def test_deleted_and_revoked_keys(
    client: Client, service: RecordingService, keys: Keys
) -> None:
    keys.grants["AKSENDER"] = ()
    status, payload = await call(client, SENDER, "POST", "/v1/queues/orders-eu/messages", SEND[2])
    assert (status, code(payload)) == (403, "AccessDenied")
    del keys.secrets["AKSENDER"], keys.grants["AKSENDER"]
    status, payload = await call(client, SENDER, "POST", "/v1/queues/orders-eu/messages", SEND[2])
    assert (status, code(payload)) == (401, "InvalidClientTokenId")
    assert service.calls == []


async def test_open_routes(client: Client) -> None:
    for path in ("/healthz", "/readyz", "/metrics", "/openapi.json", "/ui/"):
        resp = await client.get(path)
        assert resp.status == 200, path


async def test_whoami_answers_the_signing_key_and_its_grants(
    client: Client, service: RecordingService, keys: Keys
) -> None:
    status, payload = await call(client, SENDER, "GET", "/v1/whoami")
    assert status == 200, payload
    assert payload == {
        "access_key_id": "AKSENDER",
        "anonymous": False,
        "grants": [{"pattern": "orders-*", "actions": ["send"]}],
        "cluster_admin": False,
    }
    status, payload = await call(client, ADMIN, "GET", "/v1/whoami")
    assert (status, payload["cluster_admin"]) == (200, True)
    status, payload = await call(client, NOBODY, "GET", "/v1/whoami")  # any valid key
    assert (status, payload["grants"], payload["cluster_admin"]) == (200, [], False)
    status, payload = await call(client, None, "GET", "/v1/whoami")
    assert (status, code(payload)) == (401, "MissingAuthenticationToken")
    wrong = AccessKey("AKSENDER", "not-the-secret")
    status, payload = await call(client, wrong, "GET", "/v1/whoami")
    assert (status, code(payload)) == (401, "SignatureDoesNotMatch")
    keys.grants["AKSENDER"] = (KeyGrant("billing", ("admin",)),)  # grants as of the request
    status, payload = await call(client, SENDER, "GET", "/v1/whoami")
    assert payload["grants"] == [{"pattern": "billing", "actions": ["admin"]}]
    assert service.calls == []


async def test_whoami_on_an_anonymous_app() -> None:
    async with TestClient(TestServer(make_app(RecordingService()))) as anonymous:
        resp = await anonymous.get("/v1/whoami")
        assert resp.status == 200
        assert await resp.json() == {
            "access_key_id": None,
            "anonymous": True,
            "grants": [],
            "cluster_admin": True,
        }


def _botocore_sign(
    url: str, body: bytes, headers: dict[str, str], key: AccessKey
) -> dict[str, str]:
    request = AWSRequest("POST", url, data=body, headers=headers)
    request.context["timestamp"] = NOW.strftime("%Y%m%dT%H%M%SZ")
    SigV4Auth(Credentials(key.access_key_id, key.secret_access_key), "sqs", "us-east-1").add_auth(
        request
    )
    return dict(request.headers)


@pytest.mark.parametrize("protocol", ["json", "query"])
async def test_sqs_surface_grants_and_error_shapes(
    client: Client, service: RecordingService, protocol: str
) -> None:
    queue_url = str(client.make_url("/000000000000/orders-eu"))

    def build(op: str, params: dict[str, str]) -> tuple[bytes, dict[str, str]]:
        if protocol == "json":
            return orjson.dumps(params), {
                "X-Amz-Target": f"AmazonSQS.{op}",
                "Content-Type": "application/x-amz-json-1.0",
            }
        form = "&".join(f"{k}={v}" for k, v in {"Action": op, **params}.items())
        return form.encode(), {"Content-Type": "application/x-www-form-urlencoded"}

    async def sqs(key: AccessKey | None, op: str, params: dict[str, str]) -> tuple[int, str]:
        body, headers = build(op, params)
        url = str(client.make_url("/"))
        if key is not None:
            headers = _botocore_sign(url, body, headers, key)
        resp = await client.post("/", data=body, headers=headers)
        text = await resp.text()
        return resp.status, text

    send = {"QueueUrl": queue_url, "MessageBody": "hi"}
    status, text = await sqs(None, "SendMessage", send)
    assert status == 401 and "MissingAuthenticationToken" in text
    status, text = await sqs(WORKER, "SendMessage", send)
    assert status == 403 and "AccessDenied" in text
    if protocol == "json":
        assert "__type" in text
    else:
        assert "<ErrorResponse" in text
    status, text = await sqs(SENDER, "CreateQueue", {"QueueName": "orders-new"})
    assert status == 403 and "AccessDenied" in text
    status, text = await sqs(SENDER, "SendMessage", {**send, "QueueUrl": "/000000000000/billing"})
    assert status == 403
    assert service.calls == []
    status, text = await sqs(SENDER, "SendMessage", send)
    assert status == 200, text
    assert [c.method for c in service.calls] == ["send"]
