"""Acks as runs (`cmq.fsm.commands.runs`, command type `ACK_RUNS`, flag ``batch_receipts``):
chosen only when asked and smaller, decoded to the very `Ack` the pairs encode, applied alike,
and a malformed body refused with `InvalidParameter`."""

from __future__ import annotations

import struct

import pytest

from cmq.errors import InvalidParameter
from cmq.fsm.commands import (
    Ack,
    CommandType,
    EntryOutcomes,
    decode_command,
    encode_ack,
    encode_command,
)
from cmq.fsm.commands.runs import MAX_RUN_ENTRIES, runs_of
from cmq.fsm.wire import Writer

from .harness import leased, one_queue

T0 = 1_700_000_000_000


def test_runs_of_cuts_where_seq_or_lease_stops_following() -> None:
    assert runs_of(()) == []
    entries = ((5, 10), (6, 11), (7, 12), (9, 13), (10, 20), (10, 21))
    assert runs_of(entries) == [(5, 10, 3), (9, 13, 1), (10, 20, 1), (10, 21, 1)]


def test_an_ack_is_runs_only_when_asked_and_smaller_and_decodes_to_itself() -> None:
    batch = Ack("q", T0, tuple((100 + i, 7 + i) for i in range(100)))
    scattered = Ack("q", T0, tuple((100 + 2 * i, 7 + i) for i in range(10)))
    assert encode_ack(batch, runs_ok=False) == encode_command(batch)  # the flag is off
    assert encode_ack(scattered, runs_ok=True) == encode_command(scattered)  # not smaller
    runs = encode_ack(batch, runs_ok=True)
    assert runs[0] == CommandType.ACK_RUNS and len(runs) < len(encode_command(batch)) // 40
    assert decode_command(runs) == batch
    mixed = Ack("q", T0, ((1, 1), (2, 2), (3, 3), (9, 4), (20, 30), (21, 31)))
    assert decode_command(encode_ack(mixed, runs_ok=True)) == mixed


def test_the_machine_applies_an_ack_of_runs_as_the_pairs() -> None:
    outcomes = []
    for runs_ok in (False, True):
        run = one_queue(6)
        pairs = tuple((m.seq, m.lease_id) for m in leased(run, "q", T0, 4, 30_000).messages)
        ack = Ack("q", T0, (*pairs, (pairs[-1][0] + 1, pairs[-1][1] + 1)))  # one not leased
        run.index += 1
        res = run.machine.apply(run.index, encode_ack(ack, runs_ok=runs_ok))
        assert isinstance(res, EntryOutcomes)
        outcomes.append((res.outcomes, run.machine.stats("q", T0)))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] == (None, None, None, None, "LeaseStale")


def _runs_body(*runs: tuple[int, int, int], count: int | None = None) -> bytes:
    w = Writer()
    w.u8(CommandType.ACK_RUNS)
    w.text("q")
    w.i64(T0)
    w.u32(len(runs) if count is None else count)
    for seq0, lease0, n in runs:
        w.i64(seq0)
        w.i64(lease0)
        w.u32(n)
    return w.getvalue()


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (_runs_body((1, 1, 0)), "run of 0 entries"),
        (_runs_body((1, 1, MAX_RUN_ENTRIES + 1)), "at most"),
        (_runs_body((1, 1, MAX_RUN_ENTRIES), (5, 5, 1)), "at most"),
        (_runs_body((2**63 - 2, 1, 3)), "i64 range"),
        (_runs_body((1, 2**63 - 1, 2)), "i64 range"),
        (_runs_body((1, 1, 2), count=2), "exceeds the remaining"),
        (_runs_body((1, 1, 2)) + b"\x00", "trailing|remaining|bytes"),
        (_runs_body((1, 1, 2))[:-1], "exceeds the remaining"),
    ],
)
def test_a_malformed_ack_of_runs_is_refused(body: bytes, match: str) -> None:
    with pytest.raises(InvalidParameter, match=match):
        decode_command(body)


def test_the_run_layout_is_what_the_module_says() -> None:
    body = encode_ack(Ack("q", 5, ((3, 4), (4, 5))), runs_ok=True)
    assert body == bytes([18]) + struct.pack("<I", 1) + b"q" + struct.pack("<qIqqI", 5, 1, 3, 4, 2)


def test_an_ack_longer_than_runs_may_decode_is_written_as_pairs() -> None:
    """Runs would be smaller, but an `ACK_RUNS` of more than `MAX_RUN_ENTRIES` entries is
    refused by every decoder: the encoder must not write it (it would poison the log)."""
    n = MAX_RUN_ENTRIES + 1
    cmd = Ack("q", 1, tuple((i, i + 7) for i in range(n)))
    data = encode_ack(cmd, runs_ok=True)
    assert data == encode_command(cmd)
    assert decode_command(data) == cmd
