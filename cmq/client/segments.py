"""The archive read side for `cmq.client`: parsing segment listings and claim answers, and the
checked reading of a records stream (``docs/api.md``, "Segments and the archive").

`RecordsReader` turns the chunks of a ``GET .../segments/{first_seq}/records`` answer into
`SegmentRecord`s, one line at a time (memory: one chunk plus one line), and checks the trailer
when the stream ends: present (else the stream was cut), its ``count`` and ``stream_crc`` equal
to what was received, its ``checksum`` equal to the listing's when the caller gives it. Any
failure is `CorruptSegment` (retriable: read the segment from another replica).
"""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from cmq.errors import CorruptSegment
from cmq.segment_values import (
    ArchiveResult,
    ClaimResult,
    Refused,
    SegmentClaim,
    SegmentInfo,
    SegmentListing,
    SegmentRecord,
)


def listing_from_json(data: Mapping[str, Any]) -> SegmentListing:
    segments = tuple(
        SegmentInfo(
            s["first_seq"],
            s["last_seq"],
            s["count"],
            s["bytes"],
            s["state"],
            s["checksum"],
            None if s.get("claim") is None else SegmentClaim(**s["claim"]),
        )
        for s in data["segments"]
    )
    return SegmentListing(data["queue"], data["group"], data.get("leader"), segments)


def _refused(items: list[Mapping[str, Any]]) -> tuple[Refused, ...]:
    return tuple(Refused(r["first_seq"], r["reason"], r.get("batch_id")) for r in items)


def claim_from_json(data: Mapping[str, Any]) -> ClaimResult:
    return ClaimResult(tuple(data["claimed"]), _refused(data["refused"]))


def archived_from_json(data: Mapping[str, Any]) -> ArchiveResult:
    return ArchiveResult(tuple(data["archived"]), tuple(data["already"]), _refused(data["refused"]))


class RecordsReader:
    """Feed it the stream's chunks (`feed`), then call `finish`; see the module docstring.
    ``checksum``: the listing's, checked against the trailer's (None: not checked)."""

    def __init__(self, where: str, checksum: str | None = None) -> None:
        self.where = where
        self.checksum = checksum
        self.count = 0
        self.crc = 0
        self._pending = b""
        self._trailer: dict[str, Any] | None = None

    def feed(self, chunk: bytes) -> Iterator[SegmentRecord]:
        """The records completed by ``chunk``."""
        data = self._pending + chunk if self._pending else chunk
        start = 0
        while True:
            end = data.find(b"\n", start)
            if end < 0:
                break
            line = data[start : end + 1]
            start = end + 1
            record = self._line(line)
            if record is not None:
                yield record
        self._pending = data[start:]

    def _line(self, line: bytes) -> SegmentRecord | None:
        if self._trailer is not None:
            raise CorruptSegment(f"{self.where}: data after the trailer")
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise CorruptSegment(f"{self.where}: a line is not JSON") from None
        if not isinstance(obj, dict):
            raise CorruptSegment(f"{self.where}: a line is not an object")
        if obj.get("end") is True:
            self._trailer = obj
            return None
        self.crc = zlib.crc32(line, self.crc)
        self.count += 1
        try:
            return SegmentRecord(
                int(obj["seq"]),
                str(obj["id"]),
                int(obj["sent_at_ms"]),
                int(obj["receive_count"]),
                tuple((str(k), str(v)) for k, v in obj["attributes"].items()),
                base64.b64decode(obj["body_b64"], validate=True),
                str(obj["outcome"]),
                int(obj.get("priority", 0)),  # absent from an older node's lines
            )
        except (KeyError, TypeError, ValueError, AttributeError, binascii.Error) as e:
            raise CorruptSegment(f"{self.where}: malformed record line: {e}") from None

    def finish(self) -> str:
        """Check the trailer; returns the segment checksum it carries."""
        trailer = self._trailer
        if self._pending or trailer is None:
            raise CorruptSegment(f"{self.where}: the stream was cut (no trailer)")
        if trailer.get("count") != self.count:
            raise CorruptSegment(
                f"{self.where}: trailer counts {trailer.get('count')}, received {self.count}"
            )
        if trailer.get("stream_crc") != f"{self.crc:08x}":
            raise CorruptSegment(f"{self.where}: stream_crc mismatch")
        checksum = str(trailer.get("checksum"))
        if self.checksum is not None and checksum != self.checksum:
            raise CorruptSegment(
                f"{self.where}: checksum {checksum}, the listing says {self.checksum}"
            )
        return checksum
