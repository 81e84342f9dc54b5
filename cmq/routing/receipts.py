"""Receipt handles: opaque, HMAC-signed tokens binding a queue, a message seq and a lease id.

Two layouts, told apart by their length; both are accepted forever.

Layout 1 (`LAYOUT_SINGLE`, since release 0.1.0): ``base64url(seq:u64 | lease:u64 | mac[16])``
where ``mac`` is HMAC-SHA256 over (queue name, seq, lease) with the cluster's receipt key: 32
bytes, 43 characters. Minting costs one HMAC per message.

Layout 2 (`LAYOUT_RUN`, flag ``batch_receipts``): ``base64url(seq:u64 | lease:u64 |
first:u64 | count:u32 | mac[16])`` where ``mac`` is HMAC-SHA256 over (queue name, 2, the
queue's group and incarnation, first, count): it signs the *run* of lease ids
``first .. first+count-1`` that one `Lease` answer handed out in that incarnation of the queue,
and each message of that answer carries it with its own (seq, lease). The group and
incarnation are not in the receipt: the verifier reads them from its replica, so a run of a
deleted queue does not verify for a queue re-created under its name (whose lease ids start
again). 44 bytes, 59
characters. Minting a run of n messages costs one HMAC; `ReceiptSigner.verify_many` checks each
distinct run's MAC once per call. It is minted only while the flag is enabled (a node of the
previous release reads layout 1 only), see `ReceiptSigner.mint_leased`.

Why the seq (and the lease within its run) need not be under the MAC in layout 2: the state
machine hands out each lease id of a queue's incarnation once (its ``lease_counter`` only
grows), to one seq, and settles an entry (ack, nack, change visibility) only when its lease id
is that seq's *current* lease. Whoever holds a run's MAC was given every lease id of the run in
one answer; altering the seq or the lease (within the run) of such a receipt names either a
message of that same answer (which the holder could settle with its own receipt anyway) or a
(seq, lease) pair that is not current, answered per entry ``LeaseStale`` and changing nothing.
Leaving the run, the queue or its incarnation fails the MAC (``ReceiptInvalid``). So layout 2
grants what layout 1 grants, and no more across a queue's re-creation.

A tampered receipt, or one minted for another queue, fails verification; a well-formed receipt
whose lease is no longer current is answered per entry by the state machine (``LeaseStale``). A
receipt of any other length answers `ReceiptInvalid` saying its layout is unknown (perhaps
minted by a newer release), never with a decoding exception.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import struct
from collections.abc import Iterable, Sequence

from cmq.errors import ReceiptInvalid

_BODY = struct.Struct(">QQ")
_RUN = struct.Struct(">QI")
_SCOPE = struct.Struct(">IQ")
"""A layout-2 MAC's (group, incarnation) of the queue."""
_MAC_LEN = 16
_RAW_LEN = _BODY.size + _MAC_LEN
_RUN_BODY_LEN = _BODY.size + _RUN.size
_RUN_RAW_LEN = _RUN_BODY_LEN + _MAC_LEN
_RUN_TAG = b"\x02"
_MAX_CHARS = 64
_SEQ_MAX = 2**63 - 1
"""A layout-2 receipt's seq is not under its MAC: one beyond any seq a queue has is refused."""
LAYOUT_SINGLE = 1
"""Layout 1: one MAC per message (`_RAW_LEN` bytes)."""
LAYOUT_RUN = 2
"""Layout 2: one MAC per run of lease ids (`_RUN_RAW_LEN` bytes)."""
RECEIPT_LAYOUT_VERSION = LAYOUT_RUN
"""The newest layout this release reads; a layout is implicit in the receipt's length."""

_b64encode = base64.urlsafe_b64encode
_FROM_URLSAFE = bytes.maketrans(b"-_", b"+/")


def _unknown_layout(what: str) -> ReceiptInvalid:
    return ReceiptInvalid(
        f"receipt layout is unknown ({what}; this release reads layout {LAYOUT_SINGLE} of "
        f"{_RAW_LEN} bytes and layout {LAYOUT_RUN} of {_RUN_RAW_LEN} bytes): not a receipt of this "
        f"cluster, or one minted by a newer release"
    )


def runs(leases: Sequence[int]) -> list[tuple[int, int]]:
    """``leases`` cut into maximal runs of consecutive ids, in order: ``(start index, length)``
    pairs (``[7, 8, 9, 3]`` -> ``[(0, 3), (3, 1)]``)."""
    out: list[tuple[int, int]] = []
    start = 0
    for i in range(1, len(leases) + 1):
        if i == len(leases) or leases[i] != leases[i - 1] + 1:
            out.append((start, i - start))
            start = i
    return out


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
        """The layout-1 receipt for ``(queue, seq, lease_id)``."""
        body = _BODY.pack(seq, lease_id)
        return _b64encode(body + self._mac(queue, body)).decode().rstrip("=")

    def mint_leased(
        self,
        queue: str,
        leased: Sequence[tuple[int, int]],
        *,
        runs_ok: bool,
        group: int = 0,
        incarnation: int = 0,
    ) -> list[str]:
        """The receipts of one `Lease` answer's ``(seq, lease_id)`` pairs, in order: layout 2
        (one MAC per run of consecutive lease ids, `runs`) when ``runs_ok`` (the flag
        ``batch_receipts`` is enabled), else layout 1. A FIFO replay's old lease ids are cut
        into runs as they come. ``group`` and ``incarnation``: the queue's (layout 2 signs
        them; `verify_many` must be given the same)."""
        if not runs_ok:
            return [self.mint(queue, s, lease) for s, lease in leased]
        out: list[str] = []
        pack_body = _BODY.pack
        prefix = queue.encode() + b"\x00" + _RUN_TAG + _SCOPE.pack(group, incarnation)
        for start, n in runs([lease for _, lease in leased]):
            first = leased[start][1]
            run = _RUN.pack(first, n)
            tail = run + hmac.new(self._key, prefix + run, hashlib.sha256).digest()[:_MAC_LEN]
            for seq, lease in leased[start : start + n]:
                out.append(_b64encode(pack_body(seq, lease) + tail).decode().rstrip("="))
        return out

    def verify(self, queue: str, receipt: object) -> tuple[int, int]:
        """``(seq, lease_id)`` from a receipt (either layout) minted for ``queue``;
        `ReceiptInvalid` otherwise."""
        got = self.verify_many(queue, (receipt,))[0]
        if isinstance(got, ReceiptInvalid):
            raise got
        return got

    def verify_many(
        self, queue: str, receipts: Iterable[object], *, group: int = 0, incarnation: int = 0
    ) -> list[tuple[int, int] | ReceiptInvalid]:
        """Per receipt, in order: its ``(seq, lease_id)``, or the `ReceiptInvalid` saying why
        it is not a receipt minted for ``queue`` (layout 2: in its ``group`` and
        ``incarnation``). Each distinct layout-2 run's MAC is computed once per call."""
        qprefix = queue.encode() + b"\x00"
        scope = _RUN_TAG + _SCOPE.pack(group, incarnation)
        run_macs: dict[bytes, bytes] = {}
        out: list[tuple[int, int] | ReceiptInvalid] = []
        for receipt in receipts:
            try:
                out.append(self._verify_one(qprefix, scope, receipt, run_macs))
            except ReceiptInvalid as e:
                out.append(e)
        return out

    def _verify_one(
        self, qprefix: bytes, scope: bytes, receipt: object, run_macs: dict[bytes, bytes]
    ) -> tuple[int, int]:
        if not isinstance(receipt, str):
            raise ReceiptInvalid("receipt must be a receipt string")
        if len(receipt) > _MAX_CHARS:
            raise _unknown_layout(f"{len(receipt)} characters")
        try:
            text = receipt.encode("ascii").translate(_FROM_URLSAFE)
            raw = binascii.a2b_base64(text + b"=" * (-len(text) % 4), strict_mode=True)
        except (binascii.Error, ValueError):
            raise ReceiptInvalid("receipt is not valid base64url") from None
        if len(raw) == _RAW_LEN:
            body = raw[: _BODY.size]
            expect = hmac.new(self._key, qprefix + body, hashlib.sha256).digest()[:_MAC_LEN]
            if not hmac.compare_digest(raw[_BODY.size :], expect):
                raise ReceiptInvalid("receipt was not issued for this queue (or was altered)")
            seq, lease = _BODY.unpack(body)
            return seq, lease
        if len(raw) != _RUN_RAW_LEN:
            raise _unknown_layout(f"{len(raw)} bytes")
        run = raw[_BODY.size : _RUN_BODY_LEN]
        expect_run = run_macs.get(run)
        if expect_run is None:
            msg = qprefix + scope + run
            expect_run = hmac.new(self._key, msg, hashlib.sha256).digest()[:_MAC_LEN]
            run_macs[run] = expect_run
        if not hmac.compare_digest(raw[_RUN_BODY_LEN:], expect_run):
            raise ReceiptInvalid("receipt was not issued for this queue (or was altered)")
        seq, lease = _BODY.unpack_from(raw)
        first, count = _RUN.unpack(run)
        if not (first <= lease < first + count and seq <= _SEQ_MAX):
            raise ReceiptInvalid("receipt was not issued for this queue (or was altered)")
        return seq, lease
