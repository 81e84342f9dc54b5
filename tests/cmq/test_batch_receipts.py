"""Receipts of layout 2 (`cmq.routing.receipts`, flag ``batch_receipts``): one MAC per run of
lease ids; every byte of the run and its MAC is bound, a lease outside its run or a receipt of
another queue is invalid, layouts 1 and 2 verify side by side, and a receipt whose seq was
altered (the seq is not under the MAC) settles nothing in the queue machine."""

from __future__ import annotations

import base64

import pytest

from cmq.errors import ReceiptInvalid
from cmq.fsm.commands import Ack, EntryOutcomes
from cmq.routing.receipts import ReceiptSigner, runs

from .fsm.harness import leased, one_queue

T0 = 1_700_000_000_000
SIGNER = ReceiptSigner(b"k" * 32)


def _raw(receipt: str) -> bytes:
    return base64.urlsafe_b64decode(receipt + "=" * (-len(receipt) % 4))


def _text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_runs_cut_lease_ids_where_they_stop_being_consecutive() -> None:
    assert runs([]) == []
    assert runs([7, 8, 9, 3, 4, 10]) == [(0, 3), (3, 2), (5, 1)]


def test_a_run_is_minted_with_one_mac_and_verifies_to_each_pair() -> None:
    pairs = [(100, 7), (101, 8), (105, 9), (3, 20)]
    got = SIGNER.mint_leased("orders", pairs, runs_ok=True)
    assert all(len(r) == 59 for r in got)
    tails = {_raw(r)[16:] for r in got}
    assert len(tails) == 2  # (7, 3) and (20, 1): one run MAC each
    assert SIGNER.verify_many("orders", got) == pairs
    assert [SIGNER.verify("orders", r) for r in got] == pairs
    plain = SIGNER.mint_leased("orders", pairs, runs_ok=False)  # the flag is off: layout 1
    assert all(len(r) == 43 for r in plain)
    assert plain == [SIGNER.mint("orders", s, lease) for s, lease in pairs]


def test_tampering_with_the_run_or_its_mac_or_another_queue_is_invalid() -> None:
    receipt = SIGNER.mint_leased("orders", [(100, 7), (101, 8)], runs_ok=True)[1]
    raw = _raw(receipt)
    for i in range(16, len(raw)):  # first, count and the MAC are all bound
        altered = raw[:i] + bytes([raw[i] ^ 0x01]) + raw[i + 1 :]
        with pytest.raises(ReceiptInvalid):
            SIGNER.verify("orders", _text(altered))
    with pytest.raises(ReceiptInvalid):
        SIGNER.verify("other", receipt)
    with pytest.raises(ReceiptInvalid):
        ReceiptSigner(b"x" * 32).verify("orders", receipt)  # another cluster's key
    for lease in (6, 9, 2**64 - 1):  # the run is 7..8
        outside = (101).to_bytes(8, "big") + lease.to_bytes(8, "big") + raw[16:]
        with pytest.raises(ReceiptInvalid, match="altered"):
            SIGNER.verify("orders", _text(outside))
    inside = (555).to_bytes(8, "big") + (7).to_bytes(8, "big") + raw[16:]
    assert SIGNER.verify("orders", _text(inside)) == (555, 7)  # the machine decides: below


def test_verify_many_answers_each_receipt_mixed_layouts_in_order() -> None:
    run = SIGNER.mint_leased("q", [(1, 1), (2, 2)], runs_ok=True)
    single = SIGNER.mint("q", 9, 5)
    got = SIGNER.verify_many("q", [run[0], single, "nope", run[1], 5, "A" * 80])
    assert got[:2] == [(1, 1), (9, 5)] and got[3] == (2, 2)
    assert [type(g) for g in (got[2], got[4], got[5])] == [ReceiptInvalid] * 3
    assert "layout is unknown (80 characters" in str(got[5])


def test_a_receipt_with_an_altered_seq_settles_nothing() -> None:
    """The security argument of layout 2: the machine binds a lease id to one seq, so a
    receipt moved to another seq (inside its run) is answered LeaseStale and changes nothing;
    the genuine receipts of the run ack their own messages."""
    run = one_queue(4)
    pairs = [(m.seq, m.lease_id) for m in leased(run, "q", T0, 2, 30_000).messages]
    receipts = SIGNER.mint_leased("q", pairs, runs_ok=True)
    s1 = pairs[1][0]
    raw = _raw(receipts[0])
    for seq in (s1, s1 + 1, s1 + 2):  # the run's other message, one not leased, one unknown
        moved = _text(seq.to_bytes(8, "big") + raw[8:])
        forged = SIGNER.verify("q", moved)
        res = run(Ack("q", T0, (forged,)))
        assert isinstance(res, EntryOutcomes) and res.outcomes == ("LeaseStale",), seq
    res = run(Ack("q", T0, tuple(SIGNER.verify_many("q", receipts))))  # type: ignore[arg-type]
    assert isinstance(res, EntryOutcomes) and res.outcomes == (None, None)


def test_a_run_receipt_with_a_seq_beyond_any_queue_is_invalid() -> None:
    """The seq is not under the MAC: one that no command could carry (above the i64 range)
    is refused here, not left to fail the command's encoding."""
    raw = _raw(SIGNER.mint_leased("q", [(1, 1)], runs_ok=True)[0])
    for seq in (2**63, 2**64 - 1):
        with pytest.raises(ReceiptInvalid):
            SIGNER.verify("q", _text(seq.to_bytes(8, "big") + raw[8:]))
    assert SIGNER.verify("q", _text((2**63 - 1).to_bytes(8, "big") + raw[8:])) == (2**63 - 1, 1)


def test_a_run_is_bound_to_its_queue_s_group_and_incarnation() -> None:
    """A queue deleted and created again under its name starts its lease ids again: a run
    of the old incarnation (or of another group) does not verify for it."""
    run = SIGNER.mint_leased("q", [(1, 1), (2, 2)], runs_ok=True, group=3, incarnation=7)
    assert SIGNER.verify_many("q", run, group=3, incarnation=7) == [(1, 1), (2, 2)]
    for group, incarnation in ((3, 8), (4, 7), (0, 0)):
        got = SIGNER.verify_many("q", run, group=group, incarnation=incarnation)
        assert all(isinstance(g, ReceiptInvalid) for g in got), (group, incarnation)
    single = SIGNER.mint("q", 1, 1)  # layout 1 signs neither (as since 0.1.0)
    assert SIGNER.verify_many("q", [single], group=4, incarnation=8) == [(1, 1)]
