"""Reading an archive's output back with pyarrow (never Spark) for the assertions."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as pads


def rows(out: Path) -> list[dict[str, Any]]:
    """Every row under ``out`` (hive partitions queue=/date=/batch_id= as columns); files and
    directories starting with ``_`` or ``.`` (manifests, staging, checksums) are not data."""
    if not any(p.name.startswith("queue=") for p in out.iterdir()):
        return []
    ds = pads.dataset(str(out), format="parquet", partitioning="hive")
    got: list[dict[str, Any]] = ds.to_table().to_pylist()
    return got


def manifests(out: Path) -> list[dict[str, Any]]:
    d = out / "_manifests"
    if not d.exists():
        return []
    return [json.loads(p.read_text()) for p in sorted(d.glob("*.json")) if p.name[0] not in "_."]


def check_exactly_once(out: Path, expected: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The output holds each expected record exactly once (by message id: a copy forward gives
    a message a new seq, never a new id), byte-identical, with its seq, outcome, sent_at,
    receive_count, priority and attributes, in the date partition of its UTC day and the batch
    whose manifest names its segment; the manifests' counts match. Returns the rows.

    An expected record with ``"seq_at_least": True`` (its seq as received from a real cluster)
    may be archived under a later seq: its sparse segment was copied forward after the
    receive (`cmq.fsm.lifecycle.copy_forward`), and the ack by the old receipt acked the copy.
    """
    import base64

    got = rows(out)
    keys = Counter((str(r["queue"]), str(r["id"])) for r in got)
    dupes = [k for k, n in keys.items() if n > 1]
    assert not dupes, f"records archived more than once: {dupes[:10]}"
    seqs = Counter((str(r["queue"]), int(r["seq"])) for r in got)
    assert max(seqs.values(), default=1) == 1, "two records under one seq"
    want = {(r["queue"], r["id"]): r for r in expected}
    assert set(keys) == set(want), (
        f"missing {sorted(set(want) - set(keys))[:10]}, extra {sorted(set(keys) - set(want))[:10]}"
    )
    ms = manifests(out)
    owner = {
        (s["queue"], seq): m["batch_id"]
        for m in ms
        for s in m["segments"]
        for seq in range(s["first_seq"], s["last_seq"] + 1)
    }
    for r in got:
        w = want[(str(r["queue"]), str(r["id"]))]
        if w.get("seq_at_least"):
            assert int(r["seq"]) >= w["seq"], (r["seq"], w["seq"])
        else:
            assert int(r["seq"]) == w["seq"], (r["seq"], w["seq"])
        assert r["body"] == base64.b64decode(w["body_b64"]), r["seq"]
        assert r["outcome"] == w["outcome"]
        assert r["receive_count"] == w["receive_count"]
        assert r["priority"] == w.get("priority", 0), r["seq"]  # the level it was sent at
        assert dict(r["attributes"] or []) == w["attributes"]
        sent = r["sent_at"]
        assert int(sent.timestamp() * 1000) == w["sent_at_ms"]
        day = dt.datetime.fromtimestamp(w["sent_at_ms"] / 1000, dt.UTC).date().isoformat()
        assert str(r["date"]) == day
        assert r["batch_id"] == owner[(str(r["queue"]), int(r["seq"]))]
    for m in ms:
        assert (
            m["rows"] == sum(s["rows"] for s in m["segments"]) == sum(f["rows"] for f in m["files"])
        )
        for s in m["segments"]:
            assert s["rows"] == s["count"]
            n = sum(
                1
                for r in got
                if r["queue"] == s["queue"] and s["first_seq"] <= r["seq"] <= s["last_seq"]
            )
            assert n == s["count"], (m["batch_id"], s)
        for f in m["files"]:
            assert (out / f["path"]).stat().st_size == f["bytes"]
    return got
