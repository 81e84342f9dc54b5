"""The catalog image: the bytes of a catalog snapshot (`cmq.catalog.meta.CatalogMachine`).

JSON (msgspec). Field order and defaults are 0.1.0's, then the fields added since, omitted at
their defaults, so a catalog with no flag enabled encodes to the bytes 0.1.0 writes (golden
sample ``catalog_image.no_flags``).

Versions: the image carries ``version`` (`CATALOG_IMAGE_VERSION`, omitted when 1), read before
anything else so that a newer image is refused by its version with both named (`NewerFormat`),
not by the fields it adds; any field this release does not know is refused by name.
"""

from __future__ import annotations

from typing import Any

import msgspec

from cmq.catalog.placement import GroupPlacement, NodeInfo
from cmq.errors import InvariantBroken, NewerFormat
from cmq.upgrade.release import RELEASE

CATALOG_IMAGE_VERSION = 1
"""The catalog image's layout version (omitted when 1, so images from before it are identical).
A reader refuses a newer version, and any field it does not know, by name."""


class CatalogImage(msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True):
    """The catalog image. ``queues``, ``nodes`` and ``groups`` are always written, even empty
    (0.1.0 requires them); the fields after them are omitted at their defaults."""

    queues: dict[str, int]
    nodes: dict[int, NodeInfo]
    groups: dict[int, GroupPlacement]
    replication: int = 0
    founders: tuple[int, ...] = ()
    meta: dict[str, dict[str, str]] = {}
    keys: dict[str, Any] = {}
    version: int = CATALOG_IMAGE_VERSION
    features: dict[str, int] = {}


_image_decoder = msgspec.json.Decoder(CatalogImage)


class _ImageVersion(msgspec.Struct, frozen=True):
    """The version of a catalog image alone (any other field ignored)."""

    version: int = CATALOG_IMAGE_VERSION


_image_version_decoder = msgspec.json.Decoder(_ImageVersion)


def encode_image(image: CatalogImage) -> bytes:
    """The bytes of ``image`` (the caller sorts its mappings: equal catalogs, equal bytes)."""
    return msgspec.json.encode(image)


def decode_image(index: int, data: bytes) -> CatalogImage:
    """The image in ``data``, the snapshot at log ``index`` (named in errors).

    Raises `NewerFormat` when its version is beyond `CATALOG_IMAGE_VERSION` (checked before any
    other field), `InvariantBroken` when it does not decode."""
    try:  # the version first: a newer image may have fields this release does not know
        version = _image_version_decoder.decode(data).version
    except msgspec.DecodeError as e:
        raise InvariantBroken(f"undecodable catalog snapshot at {index}: {e}") from None
    if version > CATALOG_IMAGE_VERSION:
        raise NewerFormat(
            f"catalog snapshot at {index} has version {version}; this release reads versions "
            f"up to {CATALOG_IMAGE_VERSION} (release {RELEASE}): a newer release wrote it"
        )
    try:
        return _image_decoder.decode(data)
    except msgspec.DecodeError as e:
        raise InvariantBroken(f"undecodable catalog snapshot at {index}: {e}") from None


__all__ = ["CATALOG_IMAGE_VERSION", "CatalogImage", "decode_image", "encode_image"]
