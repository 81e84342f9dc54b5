"""What release this is: the package version and the range of peer protocols it speaks.

`RELEASE` is `SOURCE_RELEASE`, the version written here, which a unit test keeps equal to
``pyproject.toml``'s.

Releases and the commits they were cut from are recorded in ``RELEASES.toml`` (the source of
truth; git tags are a convenience and need not survive a clone).
"""

from __future__ import annotations

from typing import Any

SOURCE_RELEASE = "0.2.0"
"""This tree's version, equal to ``pyproject.toml``'s ``[project] version`` (a test checks)."""

PEER_PROTOCOL_MIN = 1
"""The oldest peer protocol this release speaks."""
PEER_PROTOCOL_MAX = 1
"""The newest peer protocol this release speaks. Two nodes speak the protocols both ranges
cover, and a connection runs at the highest of them (``min(max_a, max_b)``, provided it is at
least ``max(min_a, min_b)``; otherwise they cannot talk). Protocol 1 is the peer protocol of
releases 0.1.0 and 0.2.0."""


RELEASE: str = SOURCE_RELEASE
"""The release of the running code: the version written in this tree (never an installed
package's metadata, which an editable install or a stale virtualenv can carry from another
tree: a node must never report a release it is not)."""


def describe() -> dict[str, Any]:
    """``{"release": RELEASE, "protocol": {"min": ..., "max": ...}}`` (``/v1/status``)."""
    return {"release": RELEASE, "protocol": {"min": PEER_PROTOCOL_MIN, "max": PEER_PROTOCOL_MAX}}


def version_line() -> str:
    """What ``cmq --version`` prints: ``cmq 0.2.0 (peer protocol 1-1)``."""
    return f"cmq {RELEASE} (peer protocol {PEER_PROTOCOL_MIN}-{PEER_PROTOCOL_MAX})"
