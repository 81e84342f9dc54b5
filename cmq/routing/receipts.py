"""Receipt handles: opaque, HMAC-signed tokens binding a queue, a message seq and a lease id.

A receipt is ``base64url(seq:u64 | lease:u64 | mac[16])`` where ``mac`` is HMAC-SHA256 over
(queue name, seq, lease) with the cluster's receipt key. A tampered receipt, or one minted for
another queue, fails verification; a well-formed receipt whose lease is no longer current is
answered per entry by the state machine (``LeaseStale``).

Versions: this layout is version 1 (`RECEIPT_LAYOUT_VERSION`), implicit in its length (32 bytes,
43 characters); it is unchanged since release 0.1.0. A later layout would have another length:
`ReceiptSigner.verify` answers such a receipt `ReceiptInvalid` saying its layout is unknown
(perhaps minted by a newer release), never with a decoding exception.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct

from cmq.errors import ReceiptInvalid

_BODY = struct.Struct(">QQ")
_MAC_LEN = 16
_RAW_LEN = _BODY.size + _MAC_LEN
RECEIPT_LAYOUT_VERSION = 1
"""The layout above; implicit (carried by the receipt's length, `_RAW_LEN` bytes)."""


class ReceiptSigner:
    """Mints and verifies receipts with one secret key (the same on every node)."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("receipt key must be at least 16 bytes")
        self._key = hashlib.sha256(b"cmq-receipt\x00" + key).digest()

    def _mac(self, queue: str, body: bytes) -> bytes:
        msg = queue.encode() + b"\x00" + body
        return hmac.new(self._key, msg, hashlib.sha256).digest()[:_MAC_LEN]

    def mint(self, queue: str, seq: int, lease_id: int) -> str:
        """The receipt for ``(queue, seq, lease_id)``."""
        body = _BODY.pack(seq, lease_id)
        return base64.urlsafe_b64encode(body + self._mac(queue, body)).decode().rstrip("=")

    def verify(self, queue: str, receipt: object) -> tuple[int, int]:
        """``(seq, lease_id)`` from a receipt minted for ``queue``; `ReceiptInvalid` otherwise."""
        if not isinstance(receipt, str):
            raise ReceiptInvalid("receipt must be a receipt string")
        if len(receipt) > 64:
            raise ReceiptInvalid(
                f"receipt layout is unknown ({len(receipt)} characters; this release reads "
                f"layout {RECEIPT_LAYOUT_VERSION} of {_RAW_LEN} bytes): not a receipt of this "
                f"cluster, or one minted by a newer release"
            )
        try:
            raw = base64.urlsafe_b64decode(receipt + "=" * (-len(receipt) % 4))
        except (binascii.Error, ValueError):
            raise ReceiptInvalid("receipt is not valid base64url") from None
        if len(raw) != _RAW_LEN:
            raise ReceiptInvalid(
                f"receipt layout is unknown ({len(raw)} bytes; this release reads layout "
                f"{RECEIPT_LAYOUT_VERSION} of {_RAW_LEN} bytes): not a receipt of this cluster, "
                f"or one minted by a newer release"
            )
        body, mac = raw[: _BODY.size], raw[_BODY.size :]
        if not hmac.compare_digest(mac, self._mac(queue, body)):
            raise ReceiptInvalid("receipt was not issued for this queue (or was altered)")
        seq, lease = _BODY.unpack(body)
        return seq, lease
