"""The Signature Version 4 verifier (`api.auth.sigv4`) against requests signed by botocore (a
real boto3 client's SQS requests, captured before they leave, and botocore's signer on requests
of every shape) and by curl's ``--aws-sigv4``: valid ones pass; tampered, wrongly scoped,
skewed, unknown-key and malformed ones are refused with AWS's codes."""

from __future__ import annotations

import shutil
import subprocess
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from api.auth import errors
from api.auth.sigv4 import SignedRequest, Verified, verify

KEY, SECRET = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
SECRETS = {KEY: SECRET}


def check(
    request: SignedRequest,
    *,
    now: datetime | None = None,
    region: str = "us-east-1",
    service: str = "sqs",
    secrets: dict[str, str] = SECRETS,
) -> Verified:
    return verify(
        request,
        secrets.get,
        now=now or datetime.now(UTC),
        region=region,
        service=service,
    )


def from_botocore(prepared: Any) -> SignedRequest:
    """What the server receives for a botocore request: its path, query, headers (Host
    added, as the HTTP client adds it) and body."""
    url = urlsplit(prepared.url)
    headers = [(k, v.decode() if isinstance(v, bytes) else v) for k, v in prepared.headers.items()]
    if not any(k.lower() == "host" for k, _ in headers):
        headers.append(("Host", url.netloc))
    body = prepared.body or b""
    body = body.encode() if isinstance(body, str) else body
    return SignedRequest(prepared.method, url.path or "/", url.query, tuple(headers), body)


class Captured(Exception):
    pass


def boto3_request(protocol_json: bool, call: str, **params: Any) -> SignedRequest:
    """The request a real boto3 SQS client signs for ``call`` (captured, never sent)."""
    client = boto3.client(
        "sqs",
        endpoint_url="http://127.0.0.1:9",
        region_name="us-east-1",
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
    )
    seen: list[SignedRequest] = []

    def capture(request: Any, **_: Any) -> None:
        seen.append(from_botocore(request))
        raise Captured

    client.meta.events.register("before-send.sqs", capture)
    with pytest.raises(Captured):
        getattr(client, call)(**params)
    assert protocol_json == any(k.lower() == "x-amz-target" for k, _ in seen[0].headers)
    return seen[0]


def signed(
    method: str,
    url: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    *,
    region: str = "us-east-1",
    service: str = "sqs",
    key: str = KEY,
    secret: str = SECRET,
) -> SignedRequest:
    request = AWSRequest(method=method, url=url, data=body, headers=headers or {})
    SigV4Auth(Credentials(key, secret), service, region).add_auth(request)
    return from_botocore(request.prepare())


def replace_header(request: SignedRequest, name: str, value: str) -> SignedRequest:
    headers = tuple((k, value if k.lower() == name else v) for k, v in request.headers)
    return SignedRequest(request.method, request.path, request.query, headers, request.body)


def with_body(request: SignedRequest, body: bytes) -> SignedRequest:
    return SignedRequest(request.method, request.path, request.query, request.headers, body)


def test_real_boto3_requests_verify() -> None:
    request = boto3_request(
        True,
        "send_message",
        QueueUrl="http://127.0.0.1:9/000000000000/orders",
        MessageBody="héllo",
        MessageAttributes={"k": {"DataType": "String", "StringValue": "v"}},
    )
    verified = check(request)
    assert verified.access_key_id == KEY
    assert abs(verified.signed_at - datetime.now(UTC)) < timedelta(minutes=1)
    # Tampering with the body or a signed header breaks it.
    with pytest.raises(errors.SignatureDoesNotMatch):
        check(with_body(request, request.body.replace(b"orders", b"others")))
    with pytest.raises(errors.SignatureDoesNotMatch):
        check(replace_header(request, "x-amz-target", "AmazonSQS.DeleteQueue"))
    # A header that was not signed may change (proxies add some).
    extra = SignedRequest(
        request.method,
        request.path,
        request.query,
        (*request.headers, ("X-Forwarded-For", "10.0.0.1")),
        request.body,
    )
    assert check(extra).access_key_id == KEY


@pytest.mark.parametrize(
    ("method", "url", "body", "headers"),
    [
        (
            "POST",
            "http://h:8080/",
            b"Action=ListQueues&Version=2012-11-05",
            {"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
        ),
        (
            "GET",
            "http://h:8080/000000000000/q?Action=ReceiveMessage&AttributeName.1=All"
            "&MessageAttributeName.1=a%20b&X=%E2%9C%93&Empty=",
            b"",
            {},
        ),
        ("POST", "http://h/000000000000/a-b_c?z=1&a=2&a=1", b"\x00\xffbinary", {}),
        ("GET", "http://h/some/./odd/../path%20x/", b"", {"X-Custom": "  a   b  "}),
    ],
)
def test_botocore_signed_requests_of_every_shape_verify(
    method: str, url: str, body: bytes, headers: dict[str, str]
) -> None:
    assert check(signed(method, url, body, headers)).access_key_id == KEY


def test_tampering_is_refused() -> None:
    request = signed("GET", "http://h/000000000000/q?Action=ReceiveMessage&Max=1", b"")
    for tampered in (
        SignedRequest("POST", request.path, request.query, request.headers, request.body),
        SignedRequest(request.method, "/000000000000/r", request.query, request.headers, b""),
        SignedRequest(
            request.method, request.path, "Action=ReceiveMessage&Max=2", request.headers, b""
        ),
        replace_header(request, "host", "evil.example"),
    ):
        with pytest.raises(errors.SignatureDoesNotMatch):
            check(tampered)
    signature = dict(request.headers)["Authorization"]
    flipped = signature[:-1] + ("0" if signature[-1] != "0" else "1")
    with pytest.raises(errors.SignatureDoesNotMatch):
        check(replace_header(request, "authorization", flipped))
    with pytest.raises(errors.SignatureDoesNotMatch):
        check(request, secrets={KEY: "another secret"})
    with pytest.raises(errors.InvalidClientTokenId):
        check(request, secrets={})


def test_scope_region_and_service_are_checked() -> None:
    with pytest.raises(errors.SignatureDoesNotMatch, match="region"):
        check(signed("POST", "http://h/", b"x", region="eu-west-1"))
    with pytest.raises(errors.SignatureDoesNotMatch, match="service"):
        check(signed("POST", "http://h/", b"x", service="sns"))
    assert check(signed("POST", "http://h/", b"x", region="eu-west-1"), region="eu-west-1")


def test_clock_skew_window() -> None:
    request = signed("POST", "http://h/", b"Action=ListQueues")
    at = check(request).signed_at
    assert check(request, now=at + timedelta(minutes=14, seconds=59))
    assert check(request, now=at - timedelta(minutes=14, seconds=59))
    for now in (at + timedelta(minutes=15, seconds=1), at - timedelta(minutes=15, seconds=1)):
        with pytest.raises(errors.RequestExpired):
            check(request, now=now)


def test_malformed_and_missing_authorization() -> None:
    request = signed("POST", "http://h/", b"x")
    with pytest.raises(errors.MissingAuthenticationToken):
        check(
            SignedRequest(
                "POST",
                "/",
                "",
                tuple((k, v) for k, v in request.headers if k.lower() != "authorization"),
                b"x",
            )
        )
    good = dict(request.headers)["Authorization"]
    for bad in (
        "Basic dXNlcjpwYXNz",
        good.replace("Credential=", "Cred="),
        good.replace("/aws4_request", "/aws5_request"),
        good.replace("SignedHeaders=host;x-amz-date", "SignedHeaders=x-amz-date;host"),
        good[:-2],
    ):
        with pytest.raises(errors.IncompleteSignature):
            check(replace_header(request, "authorization", bad))
    # host must be signed
    no_host = good.replace("SignedHeaders=host;x-amz-date", "SignedHeaders=x-amz-date")
    with pytest.raises(errors.IncompleteSignature, match="Host"):
        check(replace_header(request, "authorization", no_host))
    # the scope's date must be the request's
    other_day = good.replace("Credential=AKIDEXAMPLE/2", "Credential=AKIDEXAMPLE/1")
    with pytest.raises(errors.SignatureDoesNotMatch, match="date"):
        check(replace_header(request, "authorization", other_day))


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed")
def test_curl_aws_sigv4_requests_verify() -> None:
    """curl signs with ``--aws-sigv4``; a throwaway server records what arrives."""
    received: list[SignedRequest] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            path, _, query = self.path.partition("?")
            received.append(SignedRequest("POST", path, query, tuple(self.headers.items()), body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.handle_request)
    thread.start()
    try:
        port = server.server_address[1]
        subprocess.run(
            [
                "curl",
                "-sS",
                "--max-time",
                "10",
                "--aws-sigv4",
                "aws:amz:us-east-1:sqs",
                "--user",
                f"{KEY}:{SECRET}",
                "-H",
                "Content-Type: application/x-amz-json-1.0",
                "-H",
                "X-Amz-Target: AmazonSQS.ListQueues",
                "--data",
                "{}",
                f"http://127.0.0.1:{port}/",
            ],
            check=True,
            timeout=20,
            capture_output=True,
        )
    finally:
        thread.join(15)
        server.server_close()
    (request,) = received
    assert check(request).access_key_id == KEY
    with pytest.raises(errors.SignatureDoesNotMatch):
        check(with_body(request, b'{"QueueNamePrefix":"x"}'))
