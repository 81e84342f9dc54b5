"""Message bodies of ``cmq bench``: a printable header (run tag, producer, sequence number, send
time in µs) then padding, so consumers tell this run's messages from others', measure
end-to-end latency and detect duplicates and gaps. Pure: no I/O, no clock.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Final

_MAGIC: Final = "cmqbench"
_HEADER_FORMAT: Final = "{magic} {tag} {producer:04x} {seq:012x} {sent_us:012x} "
HEADER_LEN: Final = len(
    _HEADER_FORMAT.format(magic=_MAGIC, tag="0" * 8, producer=0, seq=0, sent_us=0)
)
"""The length of the body header: ``--size`` must be at least this."""
MAX_PRODUCERS: Final = 0xFFFF
MAX_SEQ: Final = 0xFFFF_FFFF_FFFF
_MAX_SENT_US: Final = 0xFFFF_FFFF_FFFF
_HEX: Final = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class Stamp:
    """What a body's header says: which run and producer sent it, its sequence, when (µs)."""

    tag: str
    producer: int
    seq: int
    sent_us: int


def new_run_tag() -> str:
    """A random 8-hex-digit tag telling this run's messages from any other run's."""
    return secrets.token_hex(4)


def encode_body(stamp: Stamp, size: int) -> str:
    """A printable ASCII body of exactly ``size`` bytes that starts with ``stamp``'s header.

    ``size`` must be at least :data:`HEADER_LEN`; the tag is 8 lowercase hex digits, the
    producer below 2**16, the sequence and the timestamp below 2**48 (``ValueError`` otherwise).
    """
    if size < HEADER_LEN:
        raise ValueError(f"a body needs at least {HEADER_LEN} bytes; got {size}")
    if len(stamp.tag) != 8 or not set(stamp.tag) <= _HEX:
        raise ValueError(f"the run tag must be 8 lowercase hex digits; got {stamp.tag!r}")
    if not (
        0 <= stamp.producer <= MAX_PRODUCERS
        and 0 <= stamp.seq <= MAX_SEQ
        and 0 <= stamp.sent_us <= _MAX_SENT_US
    ):
        raise ValueError(f"stamp out of range: {stamp}")
    header = _HEADER_FORMAT.format(
        magic=_MAGIC, tag=stamp.tag, producer=stamp.producer, seq=stamp.seq, sent_us=stamp.sent_us
    )
    return header + _padding(size - HEADER_LEN)


_PAD_CACHE: dict[int, str] = {}


def _padding(n: int) -> str:
    pad = _PAD_CACHE.get(n)
    if pad is None:
        pad = ("0123456789abcdefghijklmnopqrstuvwxyz" * (n // 36 + 1))[:n]
        if len(_PAD_CACHE) < 16:  # bounded: a run uses one size
            _PAD_CACHE[n] = pad
    return pad


def decode_body(body: str) -> Stamp | None:
    """The header of a body made by :func:`encode_body`, or None for anything else."""
    if len(body) < HEADER_LEN or not body.startswith(_MAGIC + " "):
        return None
    parts = body[len(_MAGIC) + 1 : HEADER_LEN].split(" ")
    if len(parts) != 5 or parts[4] != "":
        return None
    tag, producer, seq, sent_us = parts[0], parts[1], parts[2], parts[3]
    if (len(tag), len(producer), len(seq), len(sent_us)) != (8, 4, 12, 12) or not set(
        tag + producer + seq + sent_us
    ) <= _HEX:
        return None
    return Stamp(tag, int(producer, 16), int(seq, 16), int(sent_us, 16))
