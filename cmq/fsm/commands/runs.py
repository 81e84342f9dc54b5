"""Ack entries as runs (pure): the body of an `ACK_RUNS` command (flag ``batch_receipts``).

A consumer acks a receive's messages together, and one `Lease` hands out consecutive lease ids,
usually to consecutive seqs: such an ack's entries are runs ``(seq0 + i, lease0 + i)`` for
``i < n``. `ACK_RUNS` carries each run as ``[i64 seq0][i64 lease0][u32 n]`` (20 bytes) instead
of n ``(seq, lease)`` pairs (16 bytes each), and decodes to the very `Ack` the pairs would (the
machine applies it unchanged). The encoder picks it only when it is smaller.

Layout after the type byte: ``[text queue][i64 now_ms][u32 run count][runs]``. A decoded ack
has at most `MAX_RUN_ENTRIES` entries, and every seq and lease of a run fits in an i64.
"""

from __future__ import annotations

from cmq.errors import InvalidParameter
from cmq.fsm.commands.definitions import Ack
from cmq.fsm.wire import Reader, Writer

__all__ = ["MAX_RUN_ENTRIES", "read_ack_runs", "runs_of", "write_ack_runs"]

MAX_RUN_ENTRIES = 65_536
"""The most entries one `ACK_RUNS` may decode to (a forged count cannot allocate more)."""
_RUN_SIZE = 20
_I64_MAX = 2**63 - 1


def runs_of(entries: tuple[tuple[int, int], ...]) -> list[tuple[int, int, int]]:
    """``entries`` as maximal runs ``(seq0, lease0, n)`` in order (each entry once)."""
    out: list[tuple[int, int, int]] = []
    if not entries:
        return out
    seq0, lease0 = entries[0]
    n = 1
    for seq, lease in entries[1:]:
        if seq == seq0 + n and lease == lease0 + n:
            n += 1
            continue
        out.append((seq0, lease0, n))
        seq0, lease0, n = seq, lease, 1
    out.append((seq0, lease0, n))
    return out


def write_ack_runs(w: Writer, cmd: Ack, runs: list[tuple[int, int, int]]) -> None:
    """The body of ``cmd`` as ``runs`` (`runs_of` its entries), after its type byte."""
    w.text(cmd.queue)
    w.i64(cmd.now_ms)
    w.u32(len(runs))
    for seq0, lease0, n in runs:
        w.i64(seq0)
        w.i64(lease0)
        w.u32(n)


def read_ack_runs(r: Reader) -> Ack:
    """Inverse of `write_ack_runs`: the `Ack` of the expanded entries; a malformed body (an
    empty run, a run leaving the i64 range, more than `MAX_RUN_ENTRIES`) `InvalidParameter`."""
    queue, now_ms = r.text(), r.i64()
    count = r.count(_RUN_SIZE)
    entries: list[tuple[int, int]] = []
    for _ in range(count):
        seq0, lease0, n = r.i64(), r.i64(), r.u32()
        if n == 0 or len(entries) + n > MAX_RUN_ENTRIES:
            raise InvalidParameter(f"an ack run of {n} entries (at most {MAX_RUN_ENTRIES} in all)")
        if max(seq0, lease0) + n - 1 > _I64_MAX:
            raise InvalidParameter(f"an ack run ({seq0}, {lease0}) x {n} leaves the i64 range")
        entries.extend(zip(range(seq0, seq0 + n), range(lease0, lease0 + n), strict=True))
    return Ack(queue, now_ms, tuple(entries))
