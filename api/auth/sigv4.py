"""Verification of AWS Signature Version 4 requests (header form). Pure: the caller gives the
request as received, the clock, and a lookup from access key id to secret.

The verifier rebuilds what the client signed and compares signatures in constant time:

1. the ``Authorization`` header: ``AWS4-HMAC-SHA256 Credential=<key>/<yyyymmdd>/<region>/
   <service>/aws4_request, SignedHeaders=<h1;h2;...>, Signature=<64 hex>``;
2. the canonical request: method, canonical URI (the path with dot segments removed, each
   character outside ``A-Za-z0-9-_.~/`` percent-encoded: the path as sent is encoded again, as
   SigV4 specifies for every service but S3), canonical query string (names and values
   decoded, re-encoded, sorted), the signed headers (lower-cased names, values trimmed with
   inner whitespace collapsed, repeated headers joined by commas), the signed header list, and
   the hex SHA-256 of the body (``x-amz-content-sha256``, when sent, must equal it);
3. the string to sign: ``AWS4-HMAC-SHA256``, the request time (``X-Amz-Date``, else ``Date``),
   the scope ``<date>/<region>/<service>/aws4_request`` and the hex SHA-256 of the canonical
   request;
4. the signing key: HMAC-SHA256 chained over the date, region, service and ``aws4_request``,
   starting from ``"AWS4" + secret``.

Refused (`api.auth.errors`): an unsigned request; a malformed header; ``host`` or the date not
signed; a scope whose date differs from the request's, or whose region or service is not the
verifier's; an unknown key; a request time more than `MAX_SKEW` away from now (a replay
outside the window); a wrong signature.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from urllib.parse import quote, unquote

from api.auth.errors import (
    IncompleteSignature,
    InvalidClientTokenId,
    MissingAuthenticationToken,
    RequestExpired,
    SignatureDoesNotMatch,
)

ALGORITHM = "AWS4-HMAC-SHA256"
TERMINATOR = "aws4_request"
MAX_SKEW = timedelta(minutes=15)
"""How far the request time may be from the verifier's clock, either way (AWS's window)."""
AMZ_DATE = "%Y%m%dT%H%M%SZ"

_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256\s+"
    r"Credential=(?P<credential>[^,\s]+)\s*,\s*"
    r"SignedHeaders=(?P<headers>[a-z0-9\-;.]+)\s*,\s*"
    r"Signature=(?P<signature>[0-9a-f]{64})\s*$"
)
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class SignedRequest:
    """A request as received: ``path`` and ``query`` exactly as on the wire (still
    percent-encoded), every header line (name, value) in order, and the body."""

    method: str
    path: str
    query: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


@dataclass(frozen=True, slots=True)
class Credential:
    """The credential scope of a signature."""

    access_key_id: str
    date: str
    region: str
    service: str

    @property
    def scope(self) -> str:
        return f"{self.date}/{self.region}/{self.service}/{TERMINATOR}"


@dataclass(frozen=True, slots=True)
class Verified:
    """A request whose signature holds: who signed it, and when."""

    access_key_id: str
    signed_at: datetime


@dataclass(frozen=True, slots=True)
class Authorization:
    credential: Credential
    signed_headers: tuple[str, ...]
    signature: str


def parse_authorization(value: str | None) -> Authorization:
    """The parts of an ``Authorization`` header (`MissingAuthenticationToken` when absent,
    `IncompleteSignature` when malformed)."""
    if not value:
        raise MissingAuthenticationToken("Request is missing Authentication Token")
    match = _AUTHORIZATION.match(value.strip())
    if match is None:
        raise IncompleteSignature(
            f"Authorization header requires Credential, SignedHeaders and Signature ({ALGORITHM})."
        )
    parts = match.group("credential").split("/")
    if len(parts) != 5 or parts[4] != TERMINATOR or not all(parts):
        raise IncompleteSignature(
            "Credential must be <key>/<yyyymmdd>/<region>/<service>/aws4_request."
        )
    headers = tuple(match.group("headers").split(";"))
    if list(headers) != sorted(set(headers)) or "" in headers:
        raise IncompleteSignature("SignedHeaders must be sorted, distinct header names.")
    return Authorization(
        Credential(parts[0], parts[1], parts[2], parts[3]), headers, match.group("signature")
    )


def canonical_uri(path: str) -> str:
    segments: list[str] = []
    for segment in path.split("/"):
        if segment == "..":
            if segments:
                segments.pop()
        elif segment not in ("", "."):
            segments.append(segment)
    normalized = "/" + "/".join(segments)
    if path.endswith("/") and segments:
        normalized += "/"
    return quote(normalized, safe="/~")


def canonical_query(query: str) -> str:
    pairs: list[tuple[str, str]] = []
    for item in query.split("&") if query else ():
        name, _, value = item.partition("=")
        pairs.append((quote(unquote(name), safe="-_.~"), quote(unquote(value), safe="-_.~")))
    return "&".join(f"{n}={v}" for n, v in sorted(pairs))


def _header_values(headers: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, value in headers:
        out.setdefault(name.lower(), []).append(_SPACES.sub(" ", value.strip()))
    return out


def canonical_request(request: SignedRequest, signed: tuple[str, ...], payload: str) -> str:
    values = _header_values(request.headers)
    missing = [h for h in signed if h not in values]
    if missing:
        raise IncompleteSignature(f"Signed headers are missing from the request: {missing}")
    lines = "".join(f"{h}:{','.join(values[h])}\n" for h in signed)
    return "\n".join(
        (
            request.method.upper(),
            canonical_uri(request.path),
            canonical_query(request.query),
            lines,
            ";".join(signed),
            payload,
        )
    )


def string_to_sign(amz_date: str, scope: str, canonical: str) -> str:
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    return f"{ALGORITHM}\n{amz_date}\n{scope}\n{digest}"


def signing_key(secret: str, credential: Credential) -> bytes:
    key = f"AWS4{secret}".encode()
    for part in (credential.date, credential.region, credential.service, TERMINATOR):
        key = hmac.new(key, part.encode("utf-8"), hashlib.sha256).digest()
    return key


def _request_time(values: dict[str, list[str]], signed: tuple[str, ...]) -> datetime:
    if "x-amz-date" in values:
        if "x-amz-date" not in signed:
            raise IncompleteSignature("X-Amz-Date must be signed.")
        try:
            return datetime.strptime(values["x-amz-date"][0], AMZ_DATE).replace(tzinfo=UTC)
        except ValueError:
            raise IncompleteSignature("X-Amz-Date must be yyyymmddThhmmssZ.") from None
    if "date" in values and "date" in signed:
        try:
            return parsedate_to_datetime(values["date"][0]).astimezone(UTC)
        except (TypeError, ValueError):
            raise IncompleteSignature("The Date header is malformed.") from None
    raise IncompleteSignature("The request must carry a signed X-Amz-Date (or Date) header.")


def verify(
    request: SignedRequest,
    secret_of: Callable[[str], str | None],
    *,
    now: datetime,
    region: str,
    service: str,
    max_skew: timedelta = MAX_SKEW,
) -> Verified:
    """Check ``request``'s signature against the secret ``secret_of`` returns for its key (None:
    unknown key), for ``region`` and ``service``, at time ``now`` (timezone-aware). Returns who
    signed it; raises an `api.auth.errors.AuthError` otherwise."""
    values = _header_values(request.headers)
    auth = parse_authorization(values.get("authorization", [None])[0])
    credential = auth.credential
    if "host" not in auth.signed_headers:
        raise IncompleteSignature("The Host header must be signed.")
    signed_at = _request_time(values, auth.signed_headers)
    if credential.date != signed_at.strftime("%Y%m%d"):
        raise SignatureDoesNotMatch(
            f"Credential should be scoped to a valid date: {signed_at:%Y%m%d}, not "
            f"{credential.date!r}."
        )
    if credential.region != region:
        raise SignatureDoesNotMatch(
            f"Credential should be scoped to a valid region, not {credential.region!r}."
        )
    if credential.service != service:
        raise SignatureDoesNotMatch(f"Credential should be scoped to correct service: {service!r}.")
    if abs(now - signed_at) > max_skew:
        raise RequestExpired(
            f"Signature expired: {signed_at:{AMZ_DATE}} is more than {max_skew} from the "
            f"server's time {now.astimezone(UTC):{AMZ_DATE}}."
        )
    secret = secret_of(credential.access_key_id)
    if secret is None:
        raise InvalidClientTokenId("The security token included in the request is invalid.")
    payload = hashlib.sha256(request.body).hexdigest()
    declared = values.get("x-amz-content-sha256")
    if declared is not None and declared[0] != payload:
        raise SignatureDoesNotMatch("The body does not match x-amz-content-sha256.")
    canonical = canonical_request(request, auth.signed_headers, payload)
    to_sign = string_to_sign(signed_at.strftime(AMZ_DATE), credential.scope, canonical)
    expected = hmac.new(
        signing_key(secret, credential), to_sign.encode("utf-8"), hashlib.sha256
    ).hexdigest()
    if not hmac.compare_digest(expected, auth.signature):
        raise SignatureDoesNotMatch(
            "The request signature we calculated does not match the signature you provided."
        )
    return Verified(credential.access_key_id, signed_at)
