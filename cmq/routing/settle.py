"""`Settler`: acks, nacks and visibility changes at the queue's leader.

Each call carries receipts; they are verified here (`cmq.routing.receipts.ReceiptSigner`), the
valid ones proposed as one command of (seq, lease) entries, and the answer is one code per
receipt in request order: None for an entry applied, the receipt's error or the machine's
per-entry outcome otherwise. An ack's entries are laid out as runs once the flag
``batch_receipts`` is enabled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from cmq.catalog.meta import CatalogMachine
from cmq.errors import InvariantBroken, ReceiptInvalid
from cmq.fsm.commands import Ack, ChangeVisibility, Nack, encode_ack
from cmq.fsm.machine import QueueMachine
from cmq.routing.proposer import Proposer, encoded
from cmq.routing.receipts import ReceiptSigner
from cmq.routing.rpc import AckCall, ChangeVisibilityCall, NackCall
from cmq.upgrade.features import BATCH_RECEIPTS


class Settler:
    """Runs `AckCall`, `NackCall` and `ChangeVisibilityCall` through ``proposer``."""

    def __init__(
        self,
        *,
        proposer: Proposer,
        catalog: CatalogMachine,
        machines: dict[int, QueueMachine],
        signer: ReceiptSigner,
    ) -> None:
        self._proposer = proposer
        self._catalog = catalog
        self._machines = machines
        self._signer = signer

    async def _entries(
        self,
        group: int,
        name: str,
        receipts: Iterable[str],
        make: Callable[[list[tuple[int, int, int]]], Ack | ChangeVisibility | Nack],
        encode: Callable[[Ack | ChangeVisibility | Nack], bytes] = encoded,
    ) -> tuple[str | None, ...]:
        """Verify ``receipts``; propose ``make([(position, seq, lease), ...])`` for the valid
        ones (as ``encode`` lays it out); merge its per-entry outcomes with the receipt errors,
        in request order."""
        codes: list[str | None] = []
        valid: list[tuple[int, int, int]] = []
        incarnation = self._machines[group].incarnation(name) or 0
        verified = self._signer.verify_many(name, receipts, group=group, incarnation=incarnation)
        for i, got in enumerate(verified):
            if isinstance(got, ReceiptInvalid):
                codes.append(got.code)
                continue
            codes.append(None)
            valid.append((i, *got))
        if valid:
            cmd = make(valid)
            res = await self._proposer.propose_as(
                group, encode(cmd), cmd.result_type, type(cmd).__name__
            )
            outcomes = iter(res.outcomes)
            codes = [next(outcomes) if c is None else c for c in codes]
        return tuple(codes)

    async def ack(self, call: AckCall) -> tuple[str | None, ...]:
        now, name = self._proposer.stamp(), call.name
        return await self._entries(
            call.group,
            name,
            call.receipts,
            lambda v: Ack(name, now, tuple((s, lease) for _, s, lease in v)),
            self._encode_ack,
        )

    def _encode_ack(self, cmd: Ack | ChangeVisibility | Nack) -> bytes:
        """An ack's entries as runs once the flag ``batch_receipts`` is enabled (a node of
        the previous release cannot read them), when that is smaller."""
        if not isinstance(cmd, Ack):
            raise InvariantBroken(f"not an ack: {cmd!r}")
        return encode_ack(cmd, runs_ok=self._catalog.feature_enabled(BATCH_RECEIPTS))

    async def change_visibility(self, call: ChangeVisibilityCall) -> tuple[str | None, ...]:
        now, name = self._proposer.stamp(), call.name
        timeouts = [seconds * 1000 for _, seconds in call.entries]
        return await self._entries(
            call.group,
            name,
            [r for r, _ in call.entries],
            lambda v: ChangeVisibility(
                name, now, tuple((s, lease, timeouts[i]) for i, s, lease in v)
            ),
        )

    async def nack(self, call: NackCall) -> tuple[str | None, ...]:
        now, name = self._proposer.stamp(), call.name
        delay = call.delay_seconds * 1000
        return await self._entries(
            call.group,
            name,
            call.receipts,
            lambda v: Nack(name, now, tuple((s, lease) for _, s, lease in v), delay),
        )
