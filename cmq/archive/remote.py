"""A thin, blocking client of the archive's HTTP contract (docs/api.md, "Archive"), with no
dependency but the standard library and msgspec, so Spark executors can use it as is.

Driver side: `ClusterClient` lists segments, claims them, marks them archived and maps each
URL to the node id it reaches (``GET /v1/status``). The records stream of one segment is read
by `cmq.archive.records` (one replica at a time, checked end to end).

Each call tries the URLs in order and moves to the next on a connection error or a 5xx answer,
for up to ``timeout`` seconds in all; a 4xx answer is the cluster's word and raises `ApiError`
at once. Every call here is idempotent (listing, status; a claim by the same batch renews it;
MarkArchived of an archived segment answers "already"), so retrying one is safe. Requests are
signed with the process's access key when it has one (`cmq.archive.auth`).
"""

from __future__ import annotations

import http.client
import time
import urllib.error
import urllib.parse
from collections.abc import Sequence
from typing import Any

import msgspec

from cmq.archive.auth import open_url
from cmq.archive.errors import ApiError, ClusterUnavailable

DEFAULT_TIMEOUT = 30.0


class Claim(msgspec.Struct, frozen=True):
    """A batch's claim on a released segment (contract §3)."""

    batch_id: str
    expires_at_ms: int


class Segment(msgspec.Struct, frozen=True):
    """One segment as the listing reports it (contract §1)."""

    first_seq: int
    last_seq: int
    count: int
    bytes: int
    state: str
    checksum: str
    claim: Claim | None = None


class Listing(msgspec.Struct, frozen=True):
    """``GET /v1/queues/{name}/segments``: the group's leader (node id or None) and segments."""

    queue: str
    group: int
    leader: int | None
    segments: list[Segment]


class Refusal(msgspec.Struct, frozen=True):
    """A segment a claim or MarkArchived did not take, and why."""

    first_seq: int
    reason: str
    batch_id: str | None = None


class ClaimResult(msgspec.Struct, frozen=True):
    claimed: list[int]
    refused: list[Refusal] = []


class MarkResult(msgspec.Struct, frozen=True):
    archived: list[int]
    already: list[int] = []
    refused: list[Refusal] = []


def split_urls(urls: str | Sequence[str]) -> tuple[str, ...]:
    """``"http://a,http://b"`` or a sequence of them -> a tuple of URLs without a trailing
    slash; empty parts dropped."""
    parts = urls.split(",") if isinstance(urls, str) else list(urls)
    return tuple(p.strip().rstrip("/") for p in parts if p.strip())


def queue_path(queue: str) -> str:
    return "/v1/queues/" + urllib.parse.quote(queue, safe="")


def _api_error(status: int, payload: bytes) -> ApiError:
    try:
        err = msgspec.json.decode(payload)["error"]
        return ApiError(status, str(err["code"]), str(err.get("message", "")))
    except (msgspec.DecodeError, KeyError, TypeError):
        return ApiError(status, "http_error", payload[:200].decode("utf-8", "replace"))


class ClusterClient:
    """Blocking JSON calls to the first answering URL of ``urls`` (see the module docstring)."""

    def __init__(self, urls: str | Sequence[str], timeout: float = DEFAULT_TIMEOUT) -> None:
        self.urls = split_urls(urls)
        if not self.urls:
            from cmq.archive.errors import InvalidArgument

            raise InvalidArgument("no cluster URL given")
        self.timeout = timeout

    def _once(self, url: str, method: str, path: str, body: bytes | None) -> bytes:
        with open_url(url + path, self.timeout, method, body) as resp:
            data: bytes = resp.read()
            return data

    def call(self, method: str, path: str, body: Any = None) -> bytes:
        """The raw body of the first 2xx answer; `ApiError` on a 4xx; `ClusterUnavailable`
        when no URL gave an answer within ``timeout`` seconds."""
        payload = None if body is None else msgspec.json.encode(body)
        deadline = time.monotonic() + self.timeout
        reasons: list[str] = []
        while True:
            for url in self.urls:
                try:
                    return self._once(url, method, path, payload)
                except urllib.error.HTTPError as e:
                    data = e.read()
                    if e.code < 500:
                        raise _api_error(e.code, data) from None
                    reasons.append(f"{url}: {_api_error(e.code, data).message}")
                except (OSError, http.client.HTTPException) as e:
                    reasons.append(f"{url}: {e}")
            if time.monotonic() >= deadline:
                raise ClusterUnavailable(
                    f"{method} {path}: no node answered: " + "; ".join(reasons[-len(self.urls) :])
                )
            time.sleep(0.2)

    def node_ids(self) -> dict[str, int | None]:
        """Each URL -> the node id its ``GET /v1/status`` reports (None when unreachable)."""
        out: dict[str, int | None] = {}
        for url in self.urls:
            try:
                got = msgspec.json.decode(self._once(url, "GET", "/v1/status", None))
                out[url] = int(got["node"])
            except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError):
                out[url] = None
        return out

    def queues(self) -> list[str]:
        got = msgspec.json.decode(self.call("GET", "/v1/queues"))
        return sorted(str(q["name"]) for q in got["queues"])

    def queue_archives(self, queue: str) -> bool:
        """Whether ``queue`` has the attribute ``archive`` set (False when it has none)."""
        got = msgspec.json.decode(self.call("GET", queue_path(queue)))
        return bool(got.get("attributes", {}).get("archive", False))

    def segments(self, queue: str, state: str = "released") -> Listing:
        path = f"{queue_path(queue)}/segments?state={state}"
        return msgspec.json.decode(self.call("GET", path), type=Listing)

    def claim(
        self, queue: str, batch_id: str, first_seqs: Sequence[int], ttl_ms: int
    ) -> ClaimResult:
        body = {"batch_id": batch_id, "segments": list(first_seqs), "ttl_ms": ttl_ms}
        raw = self.call("POST", f"{queue_path(queue)}/segments/claim", body)
        return msgspec.json.decode(raw, type=ClaimResult)

    def mark_archived(self, queue: str, batch_id: str, first_seqs: Sequence[int]) -> MarkResult:
        body = {"batch_id": batch_id, "segments": list(first_seqs)}
        raw = self.call("POST", f"{queue_path(queue)}/segments/archived", body)
        return msgspec.json.decode(raw, type=MarkResult)
