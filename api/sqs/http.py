"""The SQS surface's aiohttp handler, mounted by `api.app.make_app` on every node:

* ``POST /`` with ``X-Amz-Target: AmazonSQS.<Op>``: the JSON protocol;
* ``POST /`` or ``GET /`` with ``Action=<Op>`` (form body or query string), and the same at a
  queue URL ``/<account>/<name>`` (whose queue is then the default ``QueueUrl``): the query
  protocol.

Each answer carries ``x-amzn-RequestId``. Every failure is answered in the request's protocol
(`api.sqs.protocol`); an unexpected one is logged and answered ``InternalFailure`` without
details.
"""

from __future__ import annotations

import logging
import re
import uuid
from urllib.parse import parse_qsl

from aiohttp import web

from api.sqs import protocol
from api.sqs.calls import Caller
from api.sqs.errors import (
    InternalFailure,
    InvalidAction,
    MalformedQueryString,
    RequestEntityTooLarge,
    SqsError,
    UnknownOperation,
    from_cmq,
)
from api.sqs.moves import MoveTasks
from api.sqs.operations import OPERATIONS
from api.sqs.queues import SqsSettings
from cmq.errors import CmqError
from cmq.service import QueueService

log = logging.getLogger(__name__)

_CREDENTIAL = re.compile(r"Credential=([A-Za-z0-9]{1,128})/")
_FORM = "application/x-www-form-urlencoded"


class SqsHandler:
    """Serves both protocols on one `QueueService` (see the module docstring)."""

    def __init__(self, service: QueueService, settings: SqsSettings, max_request_bytes: int):
        self.service = service
        self.settings = settings
        self.max_request_bytes = max_request_bytes
        self.moves = MoveTasks(service, settings)

    def add_routes(self, app: web.Application) -> None:
        """Mount the SQS routes on ``app``; the message move tasks of this node stop with it."""
        app.router.add_route("POST", "/", self.handle)
        app.router.add_route("GET", "/", self.handle)
        queue_path = r"/{account:\d{12}}/{queue:[^/]+}"
        app.router.add_route("POST", queue_path, self.handle)
        app.router.add_route("GET", queue_path, self.handle)
        app.on_cleanup.append(self._close)

    async def _close(self, _: web.Application) -> None:
        await self.moves.close()

    async def handle(self, request: web.Request) -> web.Response:
        request_id = str(uuid.uuid4())
        target = request.headers.get("X-Amz-Target")
        json = target is not None
        operation = ""
        try:
            body = await self._body(request)
            if json:
                operation = target.removeprefix(protocol.TARGET_PREFIX) if target else ""
                if not target or not target.startswith(protocol.TARGET_PREFIX):
                    raise UnknownOperation(f"Unknown target {target!r}")
                params = protocol.json_params(body)
            else:
                params = protocol.query_params(self._pairs(request, body))
                operation = str(params.pop("Action", ""))
                params.pop("Version", None)
                if "account" in request.match_info and "QueueUrl" not in params:
                    params["QueueUrl"] = request.path
            implementation = OPERATIONS.get(operation)
            if implementation is None:
                error = UnknownOperation if json else InvalidAction
                raise error(f"The action {operation or '(none)'} is not valid for this endpoint.")
            result = await implementation(self._caller(request), params)
        except SqsError as e:
            return self._error(e, json, request_id)
        except CmqError as e:
            return self._error(from_cmq(e), json, request_id)
        except Exception:
            log.exception(
                "SQS %s failed unexpectedly",
                operation or request.path,
                extra={"event": "request_failed"},
            )
            failure = InternalFailure("The request processing has failed.")
            return self._error(failure, json, request_id)
        headers = {"x-amzn-RequestId": request_id}
        if json:
            return web.Response(
                body=protocol.render_json(result),
                headers=headers,
                content_type=protocol.JSON_CONTENT_TYPE,
            )
        return web.Response(
            body=protocol.render_xml(operation, result, request_id),
            headers=headers,
            content_type=protocol.XML_CONTENT_TYPE,
        )

    async def _body(self, request: web.Request) -> bytes:
        limit = self.max_request_bytes
        if request.content_length is not None and request.content_length > limit:
            raise RequestEntityTooLarge(f"Request bodies are limited to {limit} bytes.")
        try:
            return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise RequestEntityTooLarge(f"Request bodies are limited to {limit} bytes.") from None

    @staticmethod
    def _pairs(request: web.Request, body: bytes) -> list[tuple[str, str]]:
        """The query protocol's parameters: the query string's, then the form body's."""
        pairs = list(request.query.items())
        if body.strip():
            if request.content_type not in (_FORM, ""):
                raise MalformedQueryString(f"Content-Type {request.content_type} is not {_FORM}")
            try:
                text = body.decode("utf-8")
                pairs.extend(parse_qsl(text, keep_blank_values=True, strict_parsing=True))
            except (UnicodeDecodeError, ValueError) as e:
                raise MalformedQueryString(f"The request body is not a valid form: {e}") from None
        return pairs

    def _caller(self, request: web.Request) -> Caller:
        credential = _CREDENTIAL.search(request.headers.get("Authorization", ""))
        sender = credential.group(1) if credential else self.settings.account
        base = f"{request.scheme}://{request.host}"
        return Caller(self.service, self.settings, base, sender, self.moves)

    @staticmethod
    def _error(error: SqsError, json: bool, request_id: str) -> web.Response:
        headers = {"x-amzn-RequestId": request_id}
        if error.retry_after is not None:
            headers["Retry-After"] = str(max(1, round(error.retry_after)))
        if json:
            body, extra = protocol.render_json_error(error)
            headers.update(extra)
            content_type = protocol.JSON_CONTENT_TYPE
        else:
            body = protocol.render_xml_error(error, request_id)
            content_type = protocol.XML_CONTENT_TYPE
        return web.Response(
            body=body, status=error.status, headers=headers, content_type=content_type
        )
