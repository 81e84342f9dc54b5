"""The leader merges the sends to one standard queue that arrive in one turn of the loop into
one `Produce` (`cmq.routing.coalesce`): the merged bytes are exactly what `encode_command`
gives for the sends' messages together; each send gets its own confirms; an error reaches every
send of the batch; a batch refused whole is proposed again send by send; FIFO queues and
imports are never merged; a caller that stops waiting leaves the others their answers."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cmq.errors import MessageTooLarge, OutcomeUnknown
from cmq.fsm.commands import (
    CommandFailed,
    NewMessage,
    Produce,
    Produced,
    decode_command,
    encode_command,
    merge_produce,
    produce_parts,
)
from cmq.model import OutgoingMessage, SentMessage
from cmq.routing.coalesce import MAX_MESSAGES
from cmq.routing.ops import LeaderOps
from cmq.routing.produce import ProduceBuilder
from raftlog.errors import NotLeader
from raftlog.runtime.host import SYSTEM_CLOCK
from tests.cmq.helpers import leader_ops

GROUP = 2
messages = st.builds(
    NewMessage,
    id=st.text(min_size=1, max_size=12),
    body=st.binary(max_size=40),
    binary=st.booleans(),
    attributes=st.lists(st.tuples(st.text(max_size=5), st.text(max_size=5)), max_size=2).map(tuple),
    delay_ms=st.none() | st.integers(0, 10**9),
    dedup_id=st.none() | st.text(max_size=8),
    group_id=st.none() | st.text(max_size=8),
    ttl_ms=st.none() | st.integers(1, 10**9),
    priority=st.integers(0, 9),
)


@settings(max_examples=150, deadline=None)
@given(sends=st.lists(st.lists(messages, max_size=4), min_size=1, max_size=5))
def test_merged_sends_are_the_encoding_of_all_their_messages(sends: list[list[NewMessage]]) -> None:
    parts = []
    for i, ms in enumerate(sends):
        got = produce_parts(encode_command(Produce("q-é", 1_000 + i, tuple(ms))))
        assert got is not None and (got.queue, got.count) == ("q-é", len(ms))
        parts.append(got)
    everything = tuple(m for ms in sends for m in ms)
    merged = merge_produce("q-é", 77, parts)
    assert merged == encode_command(Produce("q-é", 77, everything))
    assert cast(Produce, decode_command(merged)).messages == everything


def test_what_is_never_taken_apart() -> None:
    one = (NewMessage("a", b"x", False, (), None, None),)
    plain = encode_command(Produce("q", 5, one))
    assert produce_parts(plain) is not None
    assert produce_parts(encode_command(Produce("q", 5, one, expect_sent=3))) is None  # import
    for cut in range(1, len(plain)):  # truncated anywhere
        assert produce_parts(plain[:cut]) is None
    newer = bytearray(plain)
    newer[-1] |= 0x80  # the message's options byte with a bit this release does not know
    assert produce_parts(bytes(newer)) is None
    assert produce_parts(encode_command(Produce("q", 5, ()))) is not None
    assert produce_parts(b"\x07" + plain[1:]) is None  # another command type


class Group:
    """The runtime's ``propose`` answered as a queue's machine would: each message of a
    `Produce` gets the next seq; a body of ``too-large`` refuses the whole command; ``fail``
    raises instead. ``gate`` (set) holds every proposal until it is set."""

    def __init__(self) -> None:
        self.proposed: list[Produce] = []
        self.next_seq = 1
        self.fail: BaseException | None = None
        self.gate: asyncio.Event | None = None

    async def propose(self, group: int, data: bytes, timeout: float) -> object:
        cmd = decode_command(data)
        assert isinstance(cmd, Produce) and group == GROUP
        self.proposed.append(cmd)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        if any(m.body == b"too-large" for m in cmd.messages):
            return CommandFailed(MessageTooLarge.code, "a message body is too large")
        out = []
        for m in cmd.messages:
            out.append((m.id, self.next_seq))
            self.next_seq += 1
        return Produced(tuple(out))


def leader(group: Group, *, coalesce: bool = True) -> LeaderOps:
    return leader_ops(group, b"coalesce-test-secret-0123456789", coalesce_sends=coalesce)


BUILDER = ProduceBuilder(1, SYSTEM_CLOCK)


def send(ops: LeaderOps, queue: str, *bodies: bytes) -> asyncio.Task[list[SentMessage]]:
    call = BUILDER.build(GROUP, queue, [OutgoingMessage(b) for b in bodies])
    return asyncio.ensure_future(ops.execute(call))


async def test_the_sends_of_one_turn_are_one_proposal_and_each_gets_its_confirms() -> None:
    group = Group()
    ops = leader(group)
    tasks = [send(ops, "q", *[b"m%d-%d" % (i, k) for k in range(i % 3 + 1)]) for i in range(20)]
    got = await asyncio.gather(*tasks)
    assert len(group.proposed) == 1
    bodies = [m.body for m in group.proposed[0].messages]
    assert bodies == [b"m%d-%d" % (i, k) for i in range(20) for k in range(i % 3 + 1)]
    by_id = {m.id: i for i, m in enumerate(group.proposed[0].messages, start=1)}
    for i, sent in enumerate(got):
        assert len(sent) == i % 3 + 1
        assert [by_id[s.id] for s in sent] == [s.seq for s in sent]  # its own seqs
    assert sorted(s.seq for sent in got for s in sent) == list(range(1, len(bodies) + 1))
    # The next turn's sends are the next proposal.
    await asyncio.gather(send(ops, "q", b"later"), send(ops, "other", b"elsewhere"))
    assert [len(p.messages) for p in group.proposed] == [len(bodies), 1, 1]


async def test_fifo_queues_off_and_full_batches_propose_apart() -> None:
    group = Group()
    await asyncio.gather(*(send(leader(group), "q.fifo", b"x") for _ in range(5)))
    assert len(group.proposed) == 5
    group.proposed.clear()
    off = leader(group, coalesce=False)
    await asyncio.gather(*(send(off, "q", b"x") for _ in range(5)))
    assert len(group.proposed) == 5
    group.proposed.clear()
    ops = leader(group)
    got = await asyncio.gather(*(send(ops, "q", b"x") for _ in range(MAX_MESSAGES + 44)))
    assert [len(p.messages) for p in group.proposed] == [MAX_MESSAGES, 44]
    first = group.next_seq - MAX_MESSAGES - 44
    assert sorted(s[0].seq for s in got) == list(range(first, group.next_seq))


async def test_an_error_reaches_every_send_and_a_refusal_only_its_own() -> None:
    group = Group()
    ops = leader(group)
    group.fail = NotLeader(3, "not the leader")
    results = await asyncio.gather(
        *(send(ops, "q", b"x") for _ in range(4)), return_exceptions=True
    )
    assert all(isinstance(r, NotLeader) for r in results) and len(group.proposed) == 1
    group.fail = None
    group.proposed.clear()
    results = await asyncio.gather(
        send(ops, "q", b"a"),
        send(ops, "q", b"too-large"),
        send(ops, "q", b"b", b"c"),
        return_exceptions=True,
    )
    assert isinstance(results[1], MessageTooLarge)
    assert [len(cast(list[SentMessage], r)) for r in (results[0], results[2])] == [1, 2]
    # The merged command, refused whole, then each send alone.
    assert [len(p.messages) for p in group.proposed] == [4, 1, 1, 2]


async def held_batch(group: Group) -> tuple[LeaderOps, list[asyncio.Task[list[SentMessage]]]]:
    """Three sends merged into one proposal that ``group`` holds until its gate is set."""
    group.gate = asyncio.Event()
    ops = leader(group)
    tasks = [send(ops, "q", b"m%d" % i) for i in range(3)]
    while not group.proposed:
        await asyncio.sleep(0)
    return ops, tasks


async def test_a_caller_that_stops_waiting_leaves_the_others_their_answers() -> None:
    group = Group()
    _, tasks = await held_batch(group)
    tasks[1].cancel()
    assert group.gate is not None
    group.gate.set()
    first, third = await tasks[0], await tasks[2]
    assert (first[0].seq, third[0].seq) == (1, 3)
    with pytest.raises(asyncio.CancelledError):
        await tasks[1]


async def test_closing_fails_a_batch_in_flight_as_outcome_unknown() -> None:
    group = Group()
    ops, tasks = await held_batch(group)
    await ops.close()
    for t in tasks:
        with pytest.raises(OutcomeUnknown):
            await t
