"""The checksums SQS returns with sends and receives, computed as SQS computes them (SDKs that
verify them refuse any other value). Pure.

* ``MD5OfMessageBody`` / ``MD5OfBody``: hex MD5 of the body's UTF-8 bytes.
* ``MD5OfMessageAttributes`` (and ``MD5OfMessageSystemAttributes`` over the system attributes
  of a send): hex MD5 over the attributes sorted by name, each encoded as
  ``len(name) name len(type) type transport value`` where lengths are 4-byte big-endian byte
  counts, strings are UTF-8, ``transport`` is one byte (1: a string value, 2: a binary value)
  and ``value`` is ``len(bytes) bytes`` (the UTF-8 string, or the raw binary).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

STRING_TRANSPORT = 1
BINARY_TRANSPORT = 2


@dataclass(frozen=True, slots=True)
class AttributeValue:
    """One typed message attribute: ``data_type`` is ``String``, ``Number`` or ``Binary``,
    optionally followed by ``.`` and a custom label; exactly one of the values is set, by the
    type's base."""

    data_type: str
    string_value: str | None = None
    binary_value: bytes | None = None

    @property
    def is_binary(self) -> bool:
        return self.data_type.split(".", 1)[0] == "Binary"


def md5_of_body(body: str) -> str:
    return hashlib.md5(body.encode("utf-8"), usedforsecurity=False).hexdigest()


def _field(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def md5_of_attributes(attributes: Mapping[str, AttributeValue]) -> str | None:
    """The checksum of ``attributes``; None when there are none (SQS then omits the field)."""
    if not attributes:
        return None
    digest = hashlib.md5(usedforsecurity=False)
    for name in sorted(attributes):
        value = attributes[name]
        digest.update(_field(name.encode("utf-8")))
        digest.update(_field(value.data_type.encode("utf-8")))
        if value.is_binary:
            digest.update(bytes([BINARY_TRANSPORT]))
            digest.update(_field(value.binary_value or b""))
        else:
            digest.update(bytes([STRING_TRANSPORT]))
            digest.update(_field((value.string_value or "").encode("utf-8")))
    return digest.hexdigest()
