"""Request signing for the clients: AWS Signature Version 4 (header form), as every cmq node
verifies it (``docs/api.md``, "Authentication"), and where a client finds its access key.

`AccessKey.resolve` picks, in order: the key given, the environment (``CMQ_ACCESS_KEY_ID`` and
``CMQ_SECRET_ACCESS_KEY``), a key file (``CMQ_KEY_FILE``: the JSON a node writes as
``admin-key.json``, or the answer of ``cmq key create``); None when there is none (anonymous
requests, which only a node run with ``--anonymous`` serves). ``CMQ_CA_FILE`` names the CA
bundle an ``https`` URL is verified with (`ssl_context`).

Each request signs ``host``, ``x-amz-date`` and ``x-amz-content-sha256`` (the body's SHA-256)
in the credential scope ``<date>/<region>/sqs/aws4_request`` (region ``us-east-1`` unless
``CMQ_REGION`` or the key says otherwise: nodes accept any region).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import orjson

SERVICE = "sqs"
DEFAULT_REGION = "us-east-1"


@dataclass(frozen=True, slots=True, repr=False)
class AccessKey:
    """An access key id and its secret (never shown by ``repr``)."""

    access_key_id: str
    secret_access_key: str
    region: str = DEFAULT_REGION

    def __repr__(self) -> str:
        return f"AccessKey({self.access_key_id!r}, region={self.region!r})"

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> AccessKey:
        """The key of a JSON file with ``access_key_id`` and ``secret_access_key``;
        `ValueError` naming the file when it has neither."""
        try:
            data = orjson.loads(Path(path).read_bytes())
            return cls(
                str(data["access_key_id"]),
                str(data["secret_access_key"]),
                os.environ.get("CMQ_REGION", DEFAULT_REGION),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError) as e:
            raise ValueError(f"{path} is not an access key file ({type(e).__name__})") from None

    @classmethod
    def resolve(cls, given: AccessKey | tuple[str, str] | None = None) -> AccessKey | None:
        """The key to sign with (see the module docstring)."""
        if isinstance(given, AccessKey):
            return given
        region = os.environ.get("CMQ_REGION", DEFAULT_REGION)
        if given is not None:
            return cls(given[0], given[1], region)
        key_id, secret = (
            os.environ.get("CMQ_ACCESS_KEY_ID"),
            os.environ.get("CMQ_SECRET_ACCESS_KEY"),
        )
        if key_id and secret:
            return cls(key_id, secret, region)
        path = os.environ.get("CMQ_KEY_FILE")
        return cls.from_file(path) if path else None

    def sign(
        self, method: str, url: str, body: bytes | None, now: datetime | None = None
    ) -> dict[str, str]:
        """The headers that sign a request of ``method`` to ``url`` (scheme, host, path,
        query as sent) with ``body``: ``Host``, ``X-Amz-Date``, ``X-Amz-Content-Sha256`` and
        ``Authorization``."""
        when = (now or datetime.now(UTC)).astimezone(UTC)
        amz_date = when.strftime("%Y%m%dT%H%M%SZ")
        date = amz_date[:8]
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
        payload = hashlib.sha256(body or b"").hexdigest()
        headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
        signed = ";".join(sorted(headers))
        canonical = "\n".join(
            (
                method.upper(),
                quote(parts.path or "/", safe="/~"),
                _canonical_query(parts.query),
                "".join(f"{k}:{headers[k]}\n" for k in sorted(headers)),
                signed,
                payload,
            )
        )
        scope = f"{date}/{self.region}/{SERVICE}/aws4_request"
        to_sign = "\n".join(
            ("AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest())
        )
        key = f"AWS4{self.secret_access_key}".encode()
        for part in (date, self.region, SERVICE, "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        return {
            "Host": host,
            "X-Amz-Date": amz_date,
            "X-Amz-Content-Sha256": payload,
            "Authorization": f"AWS4-HMAC-SHA256 Credential={self.access_key_id}/{scope}, "
            f"SignedHeaders={signed}, Signature={signature}",
        }


def _canonical_query(query: str) -> str:
    pairs = []
    for item in query.split("&") if query else ():
        name, _, value = item.partition("=")
        pairs.append((quote(unquote(name), safe="-_.~"), quote(unquote(value), safe="-_.~")))
    return "&".join(f"{n}={v}" for n, v in sorted(pairs))


def ssl_context(ca_file: str | None = None) -> ssl.SSLContext | None:
    """The context ``https`` URLs are verified with: ``ca_file`` (else ``CMQ_CA_FILE``) as
    the trusted CAs; None (the system's CAs) when neither is given."""
    ca_file = ca_file or os.environ.get("CMQ_CA_FILE")
    if not ca_file:
        return None
    return ssl.create_default_context(cafile=ca_file)
