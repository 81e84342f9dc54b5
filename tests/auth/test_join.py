"""A node joins (``--join``) a cluster that asks for signatures: it registers with the
credential derived from the cluster secret, and every node writes the same bootstrap key."""

from __future__ import annotations

from pathlib import Path

import orjson

from cmq.admin.key_admin import ADMIN_KEY_FILE
from tests.cmq.scalecluster import ScaleCluster, until


async def test_join_under_authentication(tmp_path: Path) -> None:
    cluster = ScaleCluster(tmp_path, founders=1, spares=1, groups=1, anonymous=False)
    try:
        cluster.start(1)
        await cluster.wait_ready([1])
        cluster.start(2, join=[1])
        await cluster.wait_ready([1, 2])

        async def registered() -> bool:
            nodes = await cluster.node(1).list_nodes()
            return {n["id"] for n in nodes} == {1, 2}

        await until(registered, 30, "node 2 registered")
        files = [tmp_path / f"node{n}" / ADMIN_KEY_FILE for n in (1, 2)]

        async def written() -> bool:
            return all(f.exists() for f in files)

        await until(written, 30, "both nodes wrote the bootstrap key")
        one, two = (orjson.loads(f.read_bytes()) for f in files)
        assert one == two
    finally:
        await cluster.close()
