"""A send whose outcome is unknown is not silently retried (it could be stored twice), unless
every message carries a dedup_id; an attempt that provably never left the node is retried."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cmq.errors import OutcomeUnknown
from cmq.model import OutgoingMessage, QueueAttributes
from raftlog.errors import PeerUnavailable
from tests.cmq.helpers import Twins, configs, queue_with_follower, running


async def test_unknown_outcomes_of_forwarded_sends(tmp_path: Path) -> None:
    async with running(configs(tmp_path), Twins((1, 2, 3))) as nodes:
        _, leader, follower = await queue_with_follower(nodes, "unknown", QueueAttributes())
        real_call = follower.raft.call
        calls: list[int] = []
        failure: list[PeerUnavailable] = []

        async def flaky_call(peer: int, payload: bytes, timeout: float, **kw: Any) -> bytes:
            calls.append(peer)
            if failure:
                raise failure.pop()
            return await real_call(peer, payload, timeout, **kw)

        follower.raft.call = flaky_call  # type: ignore[method-assign]

        def fail_once(unknown: bool) -> None:
            calls.clear()
            failure.append(PeerUnavailable("lost in transit", outcome_unknown=unknown))

        plain = [OutgoingMessage(body=b"plain")]
        fail_once(unknown=True)
        with pytest.raises(OutcomeUnknown):
            await follower.send("unknown", plain)
        assert len(calls) == 1  # not repeated: it could have been stored

        fail_once(unknown=False)  # never left the node: retried, stored once
        sent = await follower.send("unknown", plain)
        assert len(calls) == 2 and len(sent) == 1

        fail_once(unknown=True)  # every message deduplicated: a repeat is harmless
        sent = await follower.send("unknown", [OutgoingMessage(body=b"d", dedup_id="d-1")])
        assert len(calls) == 2 and len(sent) == 1

        _, stats = await nodes[leader].get_queue("unknown")
        assert stats.sent_total == 2  # the failed attempts above never reached the leader
