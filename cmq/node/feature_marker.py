"""The feature flags a node's data directories were written under, recorded in each of them.

Every data directory holds ``cmq-features.json`` (``{"version": 1, "features": [...]}``) once
the catalog this node applies has enabled a flag (`cmq.upgrade.features`): written right after the
apply that enabled it (`MarkedCatalog.after_apply`: a temporary file, fsynced, renamed, the
directory fsynced). A node checks the file of every data directory before it opens anything for
writing (`check`): a flag its release does not know, or a newer layout of the file, stops it with
`FeatureUnsupported` naming the file, the flags and its release — a downgrade past a flag is
refused without touching the data. (Release 0.1.0 predates this file and cannot refuse.)

A gated write can reach this node's data groups a moment before its own replica of the catalog
applies the flag (the groups replicate independently); the file then lags by that moment, and a
downgrade in it meets the unknown command or image version on replay instead (refused loudly by
the decoders, `InvariantBroken`), not silently.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import msgspec

from cmq.catalog.meta import CatalogMachine
from cmq.errors import FeatureUnsupported
from cmq.upgrade import features

MARKER = "cmq-features.json"
MARKER_VERSION = 1


class _Marker(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    version: int
    features: list[str]


ReadFile = Callable[[str], bytes | None]
"""Reads a file: its bytes, or None when it does not exist (`cmq.node.host.NodeFiles.read`)."""

WriteFile = Callable[[str, bytes], None]
"""Replaces a file atomically and durably (`cmq.node.host.NodeFiles.write_durably`)."""


def read_file(path: str) -> bytes | None:
    """A file's bytes from the file system; None when it does not exist."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        return None


def write_file_durably(path: str, data: bytes) -> None:
    """Replace a file atomically and durably: a temporary file, fsynced, renamed over it, the
    directory fsynced."""
    tmp = Path(path).with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check(data_dirs: Iterable[str], release: str, read: ReadFile = read_file) -> None:
    """Refuse (`FeatureUnsupported`) a data directory written under a flag this release does not
    know, or whose marker is newer than this release reads; reads only (through ``read``)."""
    for d in data_dirs:
        path = os.path.join(d, MARKER)
        raw = read(path)
        if raw is None:
            continue
        try:
            marker = msgspec.json.decode(raw, type=_Marker)
        except msgspec.DecodeError as e:
            raise FeatureUnsupported(
                f"{path}: unreadable feature marker ({e}); release {release} reads version "
                f"{MARKER_VERSION}"
            ) from None
        if marker.version > MARKER_VERSION:
            raise FeatureUnsupported(
                f"{path} has version {marker.version}; release {release} reads version "
                f"{MARKER_VERSION}: run a newer release"
            )
        unknown = features.unknown(marker.features)
        if unknown:
            raise FeatureUnsupported(
                f"{path}: this data was written with the feature flags {', '.join(unknown)}, "
                f"which release {release} does not support: run a release that does (a "
                f"downgrade past a feature flag is not possible)"
            )


def recorded(data_dirs: Iterable[str], read: ReadFile = read_file) -> frozenset[str]:
    """The flags every one of ``data_dirs`` records (empty when one has no readable marker):
    what this node may rely on before the catalog is open. `check` reports unreadable ones."""
    found: frozenset[str] | None = None
    for d in data_dirs:
        raw = read(os.path.join(d, MARKER))
        try:
            flags = frozenset(msgspec.json.decode(raw, type=_Marker).features) if raw else None
        except msgspec.DecodeError:
            flags = None
        if flags is None:
            return frozenset()
        found = flags if found is None else found & flags
    return found or frozenset()


def record(
    data_dirs: Iterable[str], enabled: Iterable[str], write: WriteFile = write_file_durably
) -> None:
    """Write the marker of every data directory: ``enabled`` sorted, durably (``write``)."""
    data = msgspec.json.encode(_Marker(MARKER_VERSION, sorted(enabled)))
    for d in data_dirs:
        write(os.path.join(d, MARKER), data)


class MarkedCatalog:
    """The catalog as the meta group runs it: `CatalogMachine` plus the ``after_apply`` hook
    that records newly enabled flags in the data directories (see the module docstring)."""

    __slots__ = ("_changed", "_dirs", "_recorded", "_write", "catalog")

    def __init__(
        self,
        catalog: CatalogMachine,
        data_dirs: tuple[str, ...],
        changed: Callable[[frozenset[str]], None] = lambda _: None,
        write: WriteFile = write_file_durably,
    ) -> None:
        """``changed``: called with the enabled flags after they were recorded (and once at
        the first apply), e.g. to require the peer protocol they need; ``write`` writes a
        marker file (the node's `cmq.node.host.NodeFiles`)."""
        self.catalog = catalog
        self._dirs = data_dirs
        self._changed = changed
        self._write = write
        self._recorded: frozenset[str] | None = None

    def apply(self, index: int, command: bytes) -> object:
        return self.catalog.apply(index, command)

    def snapshot(self) -> bytes:
        return self.catalog.snapshot()

    def restore(self, index: int, data: bytes) -> None:
        self.catalog.restore(index, data)
        self.after_apply()

    def after_apply(self) -> None:
        now = frozenset(self.catalog.features)
        if now == self._recorded:
            return
        if now or self._recorded is not None:
            record(self._dirs, now, self._write)
        self._recorded = now
        self._changed(now)
