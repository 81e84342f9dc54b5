"""One pysyncobj 0.3.17 node process: the baseline side of ``bench/raftlog_bench.py``.

Hosts ``--groups`` independent `SyncObj` instances (pysyncobj has one Raft group per
`SyncObj`; each gets its own port and its own tick thread), each with a journal file on disk and
a full-dump file, and generates load *inside* the process for the groups it leads, the same way
``tests.raftlog.harness.node``'s ``POST /bench`` does: ``concurrency`` proposals in flight per
group, each one re-issued from the commit callback until the deadline, latency measured from the
call to the callback (the command applied on this leader).

Modes:

- ``stock``: pysyncobj as shipped. Its `FileJournal` writes entries into an mmap and never
  flushes it (``msync`` only in ``_destroy``), so nothing it acknowledges is durable.
- ``msync``: one ``msync(MS_SYNC)`` of the journal's mmap per *batch* of appends, before the
  batch is made visible to anyone. The hook is the transport's ``send``: a follower acknowledges
  an AppendEntries (``next_node_idx``) only through ``send``, and a leader's entries reach the
  followers (so can become committed) only through ``send``; flushing the journal when it has
  unflushed appends right before any ``send`` therefore makes every acknowledged entry durable on
  the node that acknowledged it, with one msync per AppendEntries batch (leader: per send round,
  followers: per received AppendEntries). pysyncobj's own metadata file (term/vote/commit) is
  left as shipped (written without fsync) in both modes.

Control protocol: one JSON object per line on stdin, one JSON reply per line on stdout:
``{"cmd": "status"}``, ``{"cmd": "bench", "groups": [...], "concurrency": n, "seconds": s,
"size": bytes}``, ``{"cmd": "quit"}``. EOF on stdin also ends the process.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
from typing import Any

import pysyncobj.syncobj as _syncobj_mod
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.journal import FileJournal
from pysyncobj.transport import TCPTransport


class FlushingJournal(FileJournal):  # type: ignore[misc]
    """`FileJournal` that remembers unflushed appends and msyncs them on demand."""

    def __init__(self, journal_file: str) -> None:
        self.dirty = False
        self.records = 0
        self.flushes = 0
        self.flush_seconds = 0.0
        self._compacting = False
        super().__init__(journal_file)

    def add(self, command: bytes, idx: int, term: int) -> None:
        super().add(command, idx, term)
        self.dirty = True
        if not self._compacting:
            self.records += 1

    def deleteEntriesTo(self, entryTo: int) -> None:
        # Log compaction rewrites the kept tail through add(): not new records, but it does
        # leave the journal dirty (flushed before the next send like any other write).
        self._compacting = True
        try:
            super().deleteEntriesTo(entryTo)
        finally:
            self._compacting = False

    def flush_if_dirty(self) -> None:
        if self.dirty:
            t0 = time.perf_counter()
            self.flush()  # ResizableFile.flush -> mmap.flush -> msync(MS_SYNC)
            self.flush_seconds += time.perf_counter() - t0
            self.flushes += 1
            self.dirty = False


class FlushBeforeSendTransport(TCPTransport):  # type: ignore[misc]
    """Makes the journal durable before anything leaves the node (see the module docstring)."""

    def send(self, node: Any, message: Any) -> bool:
        journal = getattr(self._syncObj, "_SyncObj__raftLog", None)
        if isinstance(journal, FlushingJournal):
            journal.flush_if_dirty()
        ok: bool = super().send(node, message)
        return ok


def _create_flushing_journal(journal_file: str | None = None) -> FlushingJournal:
    assert journal_file is not None
    return FlushingJournal(journal_file)


class BenchLog(SyncObj):  # type: ignore[misc]
    """The replicated state: a count and a byte total of appended payloads."""

    def __init__(self, self_addr: str, partners: list[str], conf: SyncObjConf, msync: bool):
        kwargs: dict[str, Any] = {}
        if msync:
            kwargs["transportClass"] = FlushBeforeSendTransport
        super().__init__(self_addr, partners, conf, **kwargs)
        self.count = 0
        self.nbytes = 0

    @replicated  # type: ignore[misc]
    def append(self, data: bytes) -> int:
        self.count += 1
        self.nbytes += len(data)
        return self.count


class _GroupLoad:
    """``concurrency`` proposals kept in flight on one group until ``deadline``."""

    def __init__(self, obj: BenchLog, concurrency: int, deadline: float, payload: bytes):
        self.obj = obj
        self.concurrency = concurrency
        self.deadline = deadline
        self.payload = payload
        self.latencies: list[float] = []
        self.errors: dict[str, int] = {}
        self.inflight = 0
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.last_done = time.perf_counter()

    def start(self) -> None:
        with self.lock:
            self.inflight = self.concurrency
        for _ in range(self.concurrency):
            self._issue()

    def _issue(self) -> None:
        t0 = time.perf_counter()

        def on_result(_res: object, err: int) -> None:
            now = time.perf_counter()
            if err == FAIL_REASON.SUCCESS:
                self.latencies.append(now - t0)
            else:
                name = _FAIL_NAMES.get(err, str(err))
                self.errors[name] = self.errors.get(name, 0) + 1
            self.last_done = now
            if now < self.deadline:
                if err == FAIL_REASON.SUCCESS:
                    self._issue()
                else:
                    threading.Timer(0.01, self._issue).start()
                return
            with self.lock:
                self.inflight -= 1
                if self.inflight == 0:
                    self.done.set()

        self.obj.append(self.payload, callback=on_result)


_FAIL_NAMES = {v: k for k, v in vars(FAIL_REASON).items() if k.isupper() and isinstance(v, int)}


def run_load(
    objs: dict[int, BenchLog], groups: list[int], concurrency: int, seconds: float, size: int
) -> dict[str, object]:
    payload = b"x" * size
    started = time.perf_counter()
    deadline = started + seconds
    loads = [_GroupLoad(objs[g], concurrency, deadline, payload) for g in groups]
    for ld in loads:
        ld.start()
    timed_out = False
    for ld in loads:
        if not ld.done.wait(max(0.0, deadline - time.perf_counter()) + 30):
            timed_out = True
    finished = max((ld.last_done for ld in loads), default=time.perf_counter())
    latencies = sorted(x for ld in loads for x in ld.latencies)
    errors: dict[str, int] = {}
    for ld in loads:
        for k, v in ld.errors.items():
            errors[k] = errors.get(k, 0) + v
    if timed_out:
        errors["drain_timeout"] = errors.get("drain_timeout", 0) + 1
    return {
        "committed": len(latencies),
        "seconds": max(finished - started, 1e-9),
        "errors": errors,
        "p50": latencies[len(latencies) // 2] if latencies else None,
        "p99": latencies[int(len(latencies) * 0.99)] if latencies else None,
    }


def status(objs: dict[int, BenchLog]) -> dict[str, object]:
    groups = {}
    records = flushes = 0
    flush_seconds = 0.0
    for g, obj in objs.items():
        leader = obj._getLeader()
        groups[str(g)] = {
            "leader": bool(obj._isLeader()),
            "ready": bool(obj.isReady()),
            "known_leader": None if leader is None else str(leader),
            "applied": obj.raftLastApplied,
        }
        journal = getattr(obj, "_SyncObj__raftLog", None)
        if isinstance(journal, FlushingJournal):
            records += journal.records
            flushes += journal.flushes
            flush_seconds += journal.flush_seconds
    return {
        "groups": groups,
        "wal": {"records": records, "fsyncs": flushes, "fsync_seconds": flush_seconds},
    }


def serve(objs: dict[int, BenchLog], out: Any) -> None:
    """Answer control requests from stdin until ``quit`` or EOF."""
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        cmd = req.get("cmd")
        reply: dict[str, object]
        if cmd == "status":
            reply = status(objs)
        elif cmd == "bench":
            reply = run_load(
                objs,
                [int(g) for g in req["groups"]],
                int(req.get("concurrency", 64)),
                float(req.get("seconds", 5.0)),
                int(req.get("size", 1024)),
            )
        elif cmd == "quit":
            return
        else:
            reply = {"error": f"unknown command {cmd!r}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--index", type=int, required=True, help="this node's index, 0-based")
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument(
        "--ports", required=True, help="comma-separated, group-major: g0n0,g0n1,g0n2,g1n0,..."
    )
    p.add_argument("--groups", type=int, default=1)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--mode", choices=("stock", "msync"), default="stock")
    args = p.parse_args(argv)

    ports = [int(x) for x in args.ports.split(",")]
    if len(ports) != args.groups * args.nodes:
        raise SystemExit("--ports must list groups*nodes ports")
    os.makedirs(args.data_dir, exist_ok=True)
    msync = args.mode == "msync"
    if msync:
        # SyncObj.__init__ calls the createJournal it imported into its own module.
        _syncobj_mod.createJournal = _create_flushing_journal

    objs: dict[int, BenchLog] = {}
    for g in range(1, args.groups + 1):
        addrs = [f"127.0.0.1:{ports[(g - 1) * args.nodes + i]}" for i in range(args.nodes)]
        me = addrs[args.index]
        conf = SyncObjConf(
            journalFile=os.path.join(args.data_dir, f"g{g}.journal"),
            fullDumpFile=os.path.join(args.data_dir, f"g{g}.dump"),
        )
        objs[g] = BenchLog(me, [a for a in addrs if a != me], conf, msync)

    out = sys.stdout
    out.write(json.dumps({"ready": True, "pid": os.getpid()}) + "\n")
    out.flush()
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C reaches the whole process group
        serve(objs, out)
    for obj in objs.values():
        obj.destroy()
    out.flush()
    os._exit(0)  # the tick threads are not daemons; the data on disk is all we leave behind


if __name__ == "__main__":
    main()
