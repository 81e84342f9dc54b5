"""`PeerReleases`: the release each registered node runs, as it last told this node.

How releases are exchanged, and why this way: every `interval` seconds this node sends each node
of the catalog a `cmq.routing.rpc.ReleaseCall` over the authenticated peer connection it already
keeps (one small call per peer; no HTTP, no credentials, no TLS trust to set up), and keeps the
answers for ``/v1/status`` (`cmq.node.status.render_status`), which `cmq status`, `cmq node list`
and the web console render. Nothing is written to the replicated catalog, whose command encoding
stays as it is: a release is live data, true of the process that answered, and changes with a
restart.

A mixed cluster keeps working: a node older than the call cannot decode it and answers
``InvalidParameter`` on the same connection (as for any unknown call); that node predates release
reporting and is shown as `UNREPORTED_RELEASE`. A node that did not answer at all (down,
unreachable) is shown with the release it last reported, for `FORGET_SECONDS`, then as unknown.
The answer is a map (`cmq.routing.rpc.ReleaseInfo`), so a later release can add fields to it safely.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cmq.catalog.meta import CatalogMachine
from cmq.errors import InvalidParameter
from cmq.routing.rpc import ReleaseCall, decode_error
from cmq.upgrade.features import KNOWN
from cmq.upgrade.release import PEER_PROTOCOL_MAX, PEER_PROTOCOL_MIN, RELEASE, describe
from raftlog.errors import Overloaded, PeerUnavailable
from raftlog.runtime import Clock, MultiRaft, RemoteCallError

log = logging.getLogger("cmq.releases")

UNREPORTED_RELEASE = "0.1.0"
"""What a node that refuses the release call runs: 0.1.0, the last release without release
reporting (RELEASES.toml), or an earlier unversioned build."""
UNREPORTED_PROTOCOL = (1, 1)
"""The peer protocol of releases before 0.2.0 (they had no number for it: protocol 1)."""
INTERVAL_SECONDS = 10.0
"""How often every node is asked (a release only changes with a restart)."""
CALL_TIMEOUT = 2.0
FORGET_SECONDS = 60.0
"""How long a node that stopped answering is still shown with its last reported release."""


@dataclass(frozen=True, slots=True)
class SeenRelease:
    """A node's release as it last answered, and when (monotonic seconds)."""

    release: str
    protocol_min: int
    protocol_max: int
    reported: bool
    """False: the node refused the call (it predates release reporting)."""
    at: float
    features: tuple[str, ...] = ()
    """The feature flags it supports (none: it predates feature flags)."""

    def describe(self) -> dict[str, Any]:
        """``{"release", "protocol": {"min", "max"}, "reported"}`` (a node of ``/v1/status``)."""
        return {
            "release": self.release,
            "protocol": {"min": self.protocol_min, "max": self.protocol_max},
            "reported": self.reported,
        }


class PeerReleases:
    """Asks every registered node for its release (see the module docstring)."""

    def __init__(
        self,
        node_id: int,
        raft: MultiRaft,
        catalog: CatalogMachine,
        *,
        clock: Clock,
        interval: float = INTERVAL_SECONDS,
    ) -> None:
        """``clock``: this node's (`cmq.routing.clock.NodeClock`): its monotonic time dates
        each answer."""
        self._id = node_id
        self._raft = raft
        self._catalog = catalog
        self._interval = interval
        self._clock = clock.monotonic
        self._seen: dict[int, SeenRelease] = {}

    async def run(self) -> None:
        """Ask every node each `interval` seconds (every second while a node has not
        answered yet: a node that just started or joined shows up soon), until cancelled."""
        while True:
            try:
                await self.poll()
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug here must not stop the node's other work
                log.exception(
                    "asking the nodes for their releases failed",
                    extra={"event": "release_poll_failed"},
                )
            pending = any(n != self._id and n not in self._seen for n in self._catalog.nodes)
            await asyncio.sleep(min(self._interval, 1.0) if pending else self._interval)

    async def poll(self) -> None:
        """Ask every registered node but this one for its release, all at once."""
        peers = [n for n in sorted(self._catalog.nodes) if n != self._id]
        await asyncio.gather(*(self._ask(n) for n in peers))
        for n in list(self._seen):
            if n not in self._catalog.nodes:
                del self._seen[n]

    async def _ask(self, node: int) -> SeenRelease | None:
        call = ReleaseCall(0)
        try:
            reply = await self._raft.call(node, call.encode(), timeout=CALL_TIMEOUT)
            info = call.decode_reply(reply)
        except RemoteCallError as e:
            if isinstance(decode_error(e.payload), InvalidParameter):  # it knows no such call
                lo, hi = UNREPORTED_PROTOCOL
                seen = SeenRelease(UNREPORTED_RELEASE, lo, hi, False, self._clock())
                self._seen[node] = seen
                return seen
            return None
        except (PeerUnavailable, Overloaded, InvalidParameter):
            return None  # unknown this round; the last answer stands until FORGET_SECONDS
        seen = SeenRelease(
            info.release,
            info.protocol_min,
            info.protocol_max,
            True,
            self._clock(),
            tuple(sorted(info.features)),
        )
        self._seen[node] = seen
        return seen

    async def ask_now(self) -> dict[int, SeenRelease | None]:
        """Every registered node's answer asked afresh (None: it did not answer), this node's
        own included: what an operator's decision (enabling a feature flag) is checked on."""
        peers = [n for n in sorted(self._catalog.nodes) if n != self._id]
        answers = await asyncio.gather(*(self._ask(n) for n in peers))
        out: dict[int, SeenRelease | None] = dict(zip(peers, answers, strict=True))
        if self._id in self._catalog.nodes or not out:
            out[self._id] = self.own()
        return out

    def own(self) -> SeenRelease:
        """This node's release, as it would answer."""
        lo, hi = PEER_PROTOCOL_MIN, PEER_PROTOCOL_MAX
        return SeenRelease(RELEASE, lo, hi, True, self._clock(), tuple(sorted(KNOWN)))

    def releases(self) -> Mapping[int, dict[str, Any]]:
        """Per node id, its release as `SeenRelease.describe` renders it: this node's own, and
        every other node's that answered within `FORGET_SECONDS`."""
        now = self._clock()
        out: dict[int, dict[str, Any]] = {
            n: s.describe() for n, s in self._seen.items() if now - s.at <= FORGET_SECONDS
        }
        out[self._id] = describe() | {"reported": True}
        return out
