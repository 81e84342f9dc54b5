"""Three real node processes: load, kill -9 the busiest leader, restart it, then verify that every
acknowledged proposal is applied on every replica exactly once and in the same order."""

from __future__ import annotations

import asyncio
import base64
import itertools
from pathlib import Path

import aiohttp
import pytest

from tests.raftlog.harness.localcluster import ProcCluster, get_json, leaders, wait_ready

pytestmark = pytest.mark.slow

GROUPS = 4


async def client(
    session: aiohttp.ClientSession,
    c: ProcCluster,
    group: int,
    wid: int,
    *,
    stop: asyncio.Event,
    acked: set[bytes],
    attempted: set[bytes],
    hint: dict[int, int],
) -> None:
    """Propose unique commands in a loop; a failed attempt is never retried with the same
    payload, so any duplicate in a replica's log is a replication bug."""
    seq = itertools.count()
    while not stop.is_set():
        cmd = b"g%d-w%d-%d" % (group, wid, next(seq))
        nid = hint.get(group) or min(c.procs, default=1)
        if nid not in c.procs:
            nid = min(c.procs)
        attempted.add(cmd)
        try:
            async with session.post(
                f"{c.http[nid]}/propose/{group}",
                data=cmd,
                timeout=aiohttp.ClientTimeout(total=5),
            ) as r:
                body = await r.json()
                if r.status == 200:
                    acked.add(cmd)
                elif body.get("leader"):
                    hint[group] = body["leader"]
                else:
                    await asyncio.sleep(0.05)
        except (TimeoutError, aiohttp.ClientError):
            hint.pop(group, None)
            await asyncio.sleep(0.05)


async def applied(session: aiohttp.ClientSession, c: ProcCluster, nid: int, g: int) -> list[bytes]:
    data = await get_json(session, f"{c.http[nid]}/applied/{g}")
    assert data is not None
    cmds = data["commands"]
    assert isinstance(cmds, list)
    return [base64.b64decode(x) for x in cmds]


async def test_kill_leader_under_load_loses_nothing(tmp_path: Path) -> None:
    c = ProcCluster(tmp_path, groups=GROUPS)
    c.start_all()
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, c)
            stop = asyncio.Event()
            acked: set[bytes] = set()
            attempted: set[bytes] = set()
            hint: dict[int, int] = {}
            workers = [
                asyncio.create_task(
                    client(session, c, g, w, stop=stop, acked=acked, attempted=attempted, hint=hint)
                )
                for g in range(1, GROUPS + 1)
                for w in range(4)
            ]
            await asyncio.sleep(2.0)
            before_kill = len(acked)
            lead = await leaders(session, c)
            victim = max(set(lead.values()), key=lambda n: list(lead.values()).count(n))
            c.kill(victim)
            await asyncio.sleep(3.0)
            c.start(victim)
            await asyncio.sleep(3.0)
            stop.set()
            await asyncio.gather(*workers)
            await wait_ready(session, c)

            assert before_kill > 50, "load did not get going"
            # Replicas converge: wait until all report the same applied sequence per group.
            for g in range(1, GROUPS + 1):
                for _ in range(300):  # up to 30 s: a restarted node may still be catching up
                    seqs = [await applied(session, c, nid, g) for nid in sorted(c.procs)]
                    if all(s == seqs[0] for s in seqs):
                        break
                    await asyncio.sleep(0.1)
                assert all(s == seqs[0] for s in seqs), f"group {g} replicas differ"
                log = seqs[0]
                assert len(log) == len(set(log)), f"group {g}: a proposal was applied twice"
                mine = {x for x in acked if x.startswith(b"g%d-" % g)}
                lost = mine - set(log)
                unexpected = set(log) - attempted
                assert not lost, f"group {g}: {len(lost)} acknowledged proposals lost"
                assert not unexpected, f"group {g}: {len(unexpected)} never proposed"
            print(f"acked={len(acked)} attempted={len(attempted)} victim={victim}")
    finally:
        c.stop_all()
