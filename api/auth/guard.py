"""The authentication middleware of both HTTP surfaces: every request but the open ones
(`api.auth.access.OPEN_OPERATIONS`, the ``/ui`` files) must carry a valid AWS Signature
Version 4 (`api.auth.sigv4`) of a known key, and that key must be granted the action the request
needs (`api.auth.access`), before any handler runs. A refused request reaches no handler, so it
changes nothing.

Refusals: 401 with the verifier's code (``MissingAuthenticationToken``, ``IncompleteSignature``,
``SignatureDoesNotMatch``, ``InvalidClientTokenId``, ``RequestExpired``) when the signature does
not hold, 403 ``AccessDenied`` when it holds but the key is not granted. The native API answers
its JSON error body (``{"error": {"code", "message"}}``); the SQS surface (``/`` and the queue
URLs) its protocol's shape (JSON ``__type`` for ``X-Amz-Target`` requests, XML otherwise).

The credential scope's service must be `AuthConfig.service` (``sqs``: what boto3 signs SQS calls
with, and what ``curl --aws-sigv4 "aws:amz:<region>:sqs"`` sends); its region any region unless
`AuthConfig.region` names one.
"""

from __future__ import annotations

import contextlib
import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import parse_qsl

import orjson
from aiohttp import web
from aiohttp.typedefs import Middleware

from api.auth.access import OPEN_OPERATIONS, NativeOperation, allowed, native_need, sqs_need
from api.auth.caller import Caller
from api.auth.errors import AuthError
from api.auth.sigv4 import SignedRequest, parse_authorization, verify
from api.errors import error_body
from api.sqs.errors import SqsError
from api.sqs.http import SqsHandler
from api.sqs.protocol import TARGET_PREFIX
from cmq.grants import KeyGrant

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PRINCIPAL = web.RequestKey("cmq.access_key_id", str)
"""Where a verified request keeps its key id (``request[PRINCIPAL]``)."""
CALLER = web.RequestKey("cmq.caller", Caller)
"""Where a verified request keeps its key id and grants (``request[CALLER]``)."""
_SQS_PATH = re.compile(r"^/(\d{12}/[^/]+)?$")


class KeyLookup(Protocol):
    """The keys requests are verified against (`cmq.admin.key_admin.KeyRing` on a node)."""

    def secret_of(self, key_id: str) -> str | None: ...

    def grants_of(self, key_id: str) -> tuple[KeyGrant, ...] | None: ...


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class AuthConfig:
    """What requests are verified against: ``keys``, the service of the credential scope,
    the region (None: any), and the clock (tests move it). ``current``: awaited before a
    request's signature is checked, until ``keys`` are current enough for it (an HTTP front
    end's copy of the key ring, `cmq.frontend.keys`; None: they always are, as on a node); it
    raises a `cmq.errors.CmqError` (answered as such) when they cannot be."""

    keys: KeyLookup
    service: str = "sqs"
    region: str | None = None
    clock: Callable[[], datetime] = field(default=_utc_now)
    current: Callable[[], Awaitable[None]] | None = None


class AccessDenied(AuthError):
    """The signature holds but the key is not granted what the request needs."""

    code = "AccessDenied"
    status = 403


def auth_middleware(
    config: AuthConfig, operations: Mapping[tuple[str, str], NativeOperation]
) -> Middleware:
    """The middleware; ``operations`` maps (method, route template) to the native route's
    operationId and need (the routes it does not list are SQS's, the console's, or unknown)."""

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        template = "" if resource is None else resource.canonical
        native = operations.get((request.method, template))
        operation = None if native is None else native.operation_id
        if operation in OPEN_OPERATIONS or request.path.startswith("/ui"):
            return await handler(request)
        sqs = operation is None and _SQS_PATH.match(request.path) is not None
        if config.current is not None:
            await config.current()
        try:
            body = await request.read()
            key_id = _verify(config, request, body)
            grants = config.keys.grants_of(key_id) or ()
            if sqs:
                action, queue = _sqs_need(request, body)
            else:
                action, queue = native_need(native, request.match_info.get("name", ""))
            if not allowed(grants, action, queue):
                on = f"queue {queue}" if queue is not None else "the cluster"
                raise AccessDenied(f"access key {key_id} is not granted {action} on {on}")
        except AuthError as e:
            log.info("%s %s refused: %s %s", request.method, request.path, e.code, e.message)
            if sqs:
                return _sqs_refusal(request, e)
            status = 403 if isinstance(e, AccessDenied) else 401
            return web.Response(
                body=error_body(e.code, e.message), status=status, content_type="application/json"
            )
        request[PRINCIPAL] = key_id
        request[CALLER] = Caller(key_id, tuple(grants))
        return await handler(request)

    return authenticate


def _verify(config: AuthConfig, request: web.Request, body: bytes) -> str:
    region = config.region
    if region is None:
        region = parse_authorization(request.headers.get("Authorization")).credential.region
    signed = SignedRequest(
        method=request.method,
        path=request.raw_path.partition("?")[0],
        query=request.rel_url.raw_query_string,
        headers=tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers),
        body=body,
    )
    verified = verify(
        signed, config.keys.secret_of, now=config.clock(), region=region, service=config.service
    )
    return verified.access_key_id


def _sqs_need(request: web.Request, body: bytes) -> tuple[str, str | None]:
    """The SQS operation's action and queue, read from the request as the SQS handler will
    (an unreadable request needs admin: the handler then refuses it in detail)."""
    params: dict[str, Any] = {}
    target = request.headers.get("X-Amz-Target")
    if target is not None:
        operation = target.removeprefix(TARGET_PREFIX)
        try:
            loaded = orjson.loads(body) if body.strip() else {}
            params = loaded if isinstance(loaded, dict) else {}
        except orjson.JSONDecodeError:
            params = {}
    else:
        pairs = list(request.query.items())
        with contextlib.suppress(UnicodeDecodeError):
            pairs.extend(parse_qsl(body.decode("utf-8"), keep_blank_values=True))
        params = dict(pairs)
        operation = str(params.get("Action", ""))
    url = params.get("QueueUrl") or (request.path if request.path != "/" else None)
    queue: str | None = None
    if isinstance(url, str) and url:
        queue = url.rstrip("/").rsplit("/", 1)[-1]
    elif isinstance(params.get("QueueName"), str):
        queue = params["QueueName"]
    return sqs_need(operation, queue or None)


def _sqs_refusal(request: web.Request, e: AuthError) -> web.Response:
    status = 403 if isinstance(e, AccessDenied) else 401
    kind = type(e.code, (SqsError,), {"code": e.code, "shape": e.code, "status": status})
    error = kind(e.message)
    error.sender_fault = True
    json = request.headers.get("X-Amz-Target") is not None
    return SqsHandler._error(error, json, str(uuid.uuid4()))
