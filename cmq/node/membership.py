"""`Membership`: carries out on this node what the catalog decided about nodes and replicas.

Every `NodeConfig.membership_interval` seconds each node:

1. registers itself in the catalog (address, HTTP address, data directories, zone) if the
   catalog does not show it as it is; a founding node (started with ``--peers``) proposes the
   catalog's ``init`` once every founder is registered. A node the catalog showed and then
   forgot (``cmq node remove``) was removed: it does not register again (a restart with
   ``--join`` does);
2. knows every registered node as a peer (a node that joined is dialed without a restart) and
   forgets nodes the catalog forgot;
3. opens the data groups the catalog places on it (a founder of a group that never moved
   bootstraps it with its founding voters; any other replica starts empty, in rejoin mode, and
   is caught up by the leader) and drops the ones it no longer hosts: when the group's own
   configuration no longer lists this node, or when the meta group's leader confirms it (a
   linearizable ``hosts`` read through the log) *and* this replica has had no leader for
   `LEADERLESS_BEFORE_DROP` seconds, never on a possibly stale local catalog alone. The catalog
   stops placing a group on a node before the group's configuration drops it (a move onto a
   node drained meanwhile is cancelled at once, and its leader removes the node later), so a
   replica that still hears a leader is a member in that leader's configuration and keeps its
   data; a replica removed while it was cut off never learns of its removal, has no leader
   since, and is dropped. A leader it knows but has not heard from for
   `SILENT_LEADER_TIMEOUTS` election timeouts counts as none: a leader that removed it never
   speaks to it again, and a replica that may not campaign (a learner, or a voter that
   recovery keeps out of elections because its log is below what its peers hold) never
   forgets that leader by itself (seed 26113: restarted mid-move, a node heard the new leader
   once, was removed before it caught up, and kept its replica for ever). The drop does not
   wait for registration or the catalog's founding: a round whose earlier steps fail still
   drops what it may;
4. for each data group it leads, takes one step from the group's Raft configuration towards the
   catalog's goal: add the new node as a learner, promote it once caught up, hand leadership
   away if this node is the one leaving, remove the old replica, then report the move done
   (``moved``) so the catalog plans the next. A crash anywhere resumes from the catalog (the
   move) and the group's configuration (how far it got): every step is idempotent;
5. on the meta group's leader, keeps every registered node in the meta group (learners) and
   about ``meta_voters`` voters among the active nodes (a draining voter is replaced first);
6. hands the leadership of a data group it leads to the group's preferred leader
   (`cmq.catalog.placement.preferred_leaders`, about G/N per node) once that replica is caught up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass

from cmq.catalog import META_GROUP
from cmq.catalog.meta import CatalogMachine
from cmq.catalog.placement import ACTIVE, StepKind, next_step
from cmq.errors import CmqError
from cmq.routing.router import Router
from cmq.routing.rpc import CatalogCall
from raftlog.core import ConfChangeKind
from raftlog.errors import RaftError
from raftlog.runtime import Clock, MultiRaft
from raftlog.transport import Address

log = logging.getLogger("cmq.node.membership")

OpenGroup = Callable[[int, tuple[int, ...], bool, int | None], Awaitable[None]]
"""Open data group (id, founding voters or (), rejoin mode, data directory index) here."""
DropGroup = Callable[[int], Awaitable[None]]
"""Stop a data group here and delete its state."""

LEADERLESS_BEFORE_DROP = 5.0
"""Seconds a replica the catalog no longer places here, still listed in the group's
configuration as it applied it, must have had no leader before it is dropped (an election
takes far less)."""
SILENT_LEADER_TIMEOUTS = 2
"""Election timeouts (the base one, in ticks) a ticking replica may go without hearing the
leader it knows before that leader counts as a memory, not a leader (a live leader heartbeats
each member several times per timeout; a replica that may campaign would have done so)."""
STUCK_AFTER = 30.0
"""Seconds of membership rounds deferred one after another before it is logged as a warning."""
TRANSFER_COOLDOWN = 5.0
"""Seconds between two leadership hand-overs of one group by this node."""
FULL_ROUND_EVERY = 10
"""Rounds between two looks at the groups with no move in flight."""
TRANSFERS_PER_ROUND = 8
"""Leadership hand-overs for balance a node starts per full round (bounded churn: with many
groups, balance is reached over several rounds instead of in one burst of elections)."""
STEP_TIMEOUT = 5.0
"""Seconds a membership step may take to apply before it is tried again."""


@dataclass(frozen=True, slots=True)
class Identity:
    """What this node registers: peer and HTTP addresses, data directories, zone."""

    node_id: int
    address: str
    http: str
    data_dirs: tuple[str, ...]
    zone: str


class Membership:
    """Reconciles this node with the catalog (see the module docstring)."""

    def __init__(
        self,
        *,
        me: Identity,
        raft: MultiRaft,
        catalog: CatalogMachine,
        router: Router,
        open_group: OpenGroup,
        drop_group: DropGroup,
        founders: tuple[int, ...],
        groups: int,
        replication: int,
        meta_voters: int,
        interval: float,
        clock: Clock,
        balance_leaders: bool = True,
        avoid_leader: Callable[[], Collection[int]] = tuple,
    ) -> None:
        """``clock``: this node's (`cmq.routing.clock.NodeClock`): its monotonic time spaces
        registrations, confirmations and leadership hand-overs."""
        self._me = me
        self._clock = clock
        self._id = me.node_id
        self._raft = raft
        self._catalog = catalog
        self._router = router
        self._open = open_group
        self._drop = drop_group
        self._founders = founders
        self._groups = groups
        self._replication = replication
        self._meta_voters = meta_voters
        self._interval = interval
        self._balance = balance_leaders
        self._avoid_leader = avoid_leader  # e.g. nodes whose clocks are off: never preferred
        self._transferred: dict[int, float] = {}
        self._last_register = 0.0
        self._seen_registered = False
        self._last_confirm: dict[int, float] = {}
        self._leaderless_since: dict[int, float] = {}
        self._rounds = 0
        self._transfer_budget = 0
        self._preferred: dict[int, int] = {}

    async def run(self) -> None:
        """Reconcile until cancelled; a failed round is logged and retried next interval."""
        last_full = self._clock.monotonic()
        warned = last_full
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.tick()
                last_full = self._clock.monotonic()
            except (CmqError, RaftError, TimeoutError) as e:
                now = self._clock.monotonic()
                if now - last_full > STUCK_AFTER and now - warned > STUCK_AFTER:
                    # Deferred round after round: say so where operators look (a round that
                    # never completes leaves replicas unplaced or leftover ones undropped).
                    warned = now
                    log.warning(
                        "membership rounds deferred for %.0f s on node %d: %s",
                        now - last_full,
                        self._id,
                        e,
                        extra={"event": "membership_deferred"},
                    )
                else:
                    log.info("membership step deferred: %s", e)
            except Exception:  # a bug must not end reconciliation on this node for good
                log.exception(
                    "membership round failed; retrying next round",
                    extra={"event": "membership_round_failed"},
                )

    async def tick_local(self) -> None:
        """What needs no other node: know the catalog's peers, open the groups placed here."""
        self._sync_peers()
        await self._open_hosted()

    async def tick(self) -> None:
        """One round (see the module docstring)."""
        self._sync_peers()
        await self._open_hosted()
        if not self._raft.leader_of(META_GROUP):
            return  # no catalog leader known: nothing can be proposed or confirmed
        # Each of these needs the catalog's leader only: one failing (a registration that
        # timed out) does not keep the others from running; the first failure ends the round.
        failed: CmqError | RaftError | TimeoutError | None = None
        for step in (self._register, self._init, self._drop_unhosted):
            try:
                await step()
            except (CmqError, RaftError, TimeoutError) as e:
                failed = failed or e
        if failed is not None:
            raise failed
        if self._raft.leader_of(META_GROUP) == self._id:
            await self._reconcile_meta()
        # Groups with a move in flight every round; the others (a configuration to repair,
        # leadership to balance) every `FULL_ROUND_EVERY` rounds: idle groups cost little.
        self._rounds += 1
        full = self._rounds % FULL_ROUND_EVERY == 0
        self._preferred = self._catalog.preferred_leaders() if full and self._balance else {}
        self._transfer_budget = TRANSFERS_PER_ROUND
        for g in list(self._catalog.placements) if full else self._catalog.moving():
            if g in self._raft.groups and self._raft.leader_of(g) == self._id:
                await self._reconcile_group(g)

    # -- 1. registration --------------------------------------------------------------------------
    async def _register(self) -> None:
        me = self._me
        info = self._catalog.node_info(self._id)
        if info is None and self._seen_registered:
            return  # removed from the cluster: stays out until restarted with --join
        self._seen_registered = info is not None
        if info is not None and (info.address, info.http, info.data_dirs, info.zone) == (
            me.address,
            me.http,
            me.data_dirs,
            me.zone,
        ):
            return
        now = self._clock.monotonic()
        if now - self._last_register < 1.0:
            return
        self._last_register = now
        cmd = CatalogMachine.register_node(
            self._id, me.address, me.data_dirs, zone=me.zone, http=me.http
        )
        await self._router.run(CatalogCall(META_GROUP, cmd))

    async def _init(self) -> None:
        if not self._founders or self._catalog.initialized:
            return
        if any(f not in self._catalog.nodes for f in self._founders):
            return
        cmd = CatalogMachine.init(self._groups, self._replication, list(self._founders))
        await self._router.run(CatalogCall(META_GROUP, cmd))

    # -- 2. peers ---------------------------------------------------------------------------------
    def _sync_peers(self) -> None:
        nodes = self._catalog.nodes
        known = set(self._raft.peers())
        for n, info in nodes.items():
            # A peer known already keeps its address: the static one may be a proxy's.
            if n != self._id and n not in known:
                try:
                    self._raft.add_peer(n, Address.parse(info.address))
                except ValueError:
                    log.warning(
                        "node %d registered a bad address %r",
                        n,
                        info.address,
                        extra={"event": "peer_bad_address"},
                    )
        if not self._catalog.initialized:
            return
        for n in self._raft.peers():
            if n not in nodes and not self._member_anywhere(n):
                self._raft.remove_peer(n)

    def _member_anywhere(self, node: int) -> bool:
        """Whether ``node`` is still in the configuration of a group open here."""
        return any(node in self._raft.status(g).conf.members() for g in list(self._raft.groups))

    # -- 3. hosting -------------------------------------------------------------------------------
    async def _open_hosted(self) -> None:
        for g in self._catalog.hosted_by(self._id):
            if g not in self._raft.groups:
                p = self._catalog.placement(g)
                assert p is not None
                founder = not p.moved and self._id in p.founders
                await self._open(g, p.founders if founder else (), not founder, p.dir_of(self._id))

    async def _drop_unhosted(self) -> None:
        if not self._catalog.initialized:
            return
        hosted = set(self._catalog.hosted_by(self._id))
        unhosted = set(self._raft.groups) - hosted - {META_GROUP}
        for g in [g for g in self._leaderless_since if g not in unhosted]:
            del self._leaderless_since[g]  # hosted again, or gone: a later look starts anew
        for g in sorted(unhosted):
            if await self._confirmed_gone(g):
                log.info("group %d no longer has a replica on node %d: dropping it", g, self._id)
                await self._drop(g)

    async def _confirmed_gone(self, group: int) -> bool:
        """Whether this replica of ``group`` (which the local catalog no longer places here)
        may be dropped (see the module docstring, 3.)."""
        if self._id not in self._raft.status(group).conf.members():
            return True
        now = self._clock.monotonic()
        driver = self._raft.group(group)
        if self._raft.leader_of(group) and not self._leader_silent(group):
            # Led: a member of its leader's configuration (the catalog cancelled a move onto
            # this node and the leader has not removed it yet). Deleting its log now would
            # take a voter's copy of committed entries away. (A leader unheard for long is
            # none: `_leader_silent`; the wait below starts.)
            self._leaderless_since.pop(group, None)
            if driver.quiesced:
                # Unless its leader is only a memory: a replica removed while its group was
                # quiesced hears nothing more and, not ticking, would keep that leader for
                # ever (the chaos run's seed 120 kept one). Ticking again, it either hears
                # its leader (a member after all) or times out leaderless, and the wait
                # below starts.
                driver.wake()
            return False
        if now - self._leaderless_since.setdefault(group, now) < LEADERLESS_BEFORE_DROP:
            return False
        if now - self._last_confirm.get(group, -1e9) < 1.0:
            return False
        self._last_confirm[group] = now
        cmd = CatalogMachine.hosts(self._id)
        res = await self._router.run(CatalogCall(META_GROUP, cmd))
        return isinstance(res, list) and group not in res

    def _leader_silent(self, group: int) -> bool:
        """Whether this replica of ``group``, ticking, has not heard the leader it knows for
        `SILENT_LEADER_TIMEOUTS` election timeouts: that leader is only a memory (it removed
        this replica, or it is gone, and this replica may not campaign, which would forget it).
        A quiesced replica does not tick: it is woken instead (see `_confirmed_gone`)."""
        driver = self._raft.group(group)
        if driver.quiesced:
            return False
        r = driver.raw.raft  # the core's own count: ticks since it heard its leader
        return r.lead != self._id and r.election_elapsed >= (
            SILENT_LEADER_TIMEOUTS * r.cfg.election_tick
        )

    # -- 4. moves ---------------------------------------------------------------------------------
    async def _reconcile_group(self, g: int) -> None:
        p = self._catalog.placement(g)
        if p is None:
            return
        conf = self._raft.conf(g)  # every led group each full round: no Status built
        step = next_step(
            set(conf.voters), set(conf.learners), set(p.goal()), self._id, p.move is not None
        )
        if step.kind is StepKind.ADD_LEARNER:
            await self._change(g, ConfChangeKind.ADD_LEARNER, step.node)
        elif step.kind is StepKind.PROMOTE:
            await self._change(g, ConfChangeKind.PROMOTE, step.node)
        elif step.kind is StepKind.REMOVE:
            await self._change(g, ConfChangeKind.REMOVE, step.node)
        elif step.kind is StepKind.HAND_OVER:
            self._hand_over(g, sorted(p.goal()))
        elif step.kind is StepKind.REPORT and p.move is not None:
            cmd = CatalogMachine.moved(g, p.move.add, p.move.remove)
            await self._router.run(CatalogCall(META_GROUP, cmd))
        elif step.kind is StepKind.NONE and self._preferred:
            self._balance_leader(g)

    async def _change(self, g: int, kind: ConfChangeKind, node: int) -> None:
        log.info("group %d: %s node %d", g, kind.name.lower(), node)
        try:
            async with asyncio.timeout(STEP_TIMEOUT):
                await self._raft.change_membership(g, kind, node)
        except RaftError as e:  # not caught up yet, a change pending, leadership moved
            log.info("group %d: %s of node %d deferred: %s", g, kind.name.lower(), node, e)

    def _hand_over(self, g: int, candidates: list[int]) -> None:
        """Give ``g``'s leadership to the most caught-up other voter in ``candidates``."""
        st = self._raft.status(g)
        best = max(
            (n for n in candidates if n != self._id and n in st.conf.voters and n in st.peers),
            key=lambda n: (st.peers[n].match, -n),
            default=0,
        )
        if best:
            self._transfer(g, best)

    def _transfer(self, g: int, to: int) -> None:
        now = self._clock.monotonic()
        if now - self._transferred.get(g, -1e9) < TRANSFER_COOLDOWN:
            return
        self._transferred[g] = now
        log.info("group %d: handing leadership to node %d", g, to)
        try:
            self._raft.transfer_leader(g, to)
        except RaftError as e:
            log.info("group %d: leadership hand-over deferred: %s", g, e)

    # -- 6. leader balance ------------------------------------------------------------------------
    def _balance_leader(self, g: int) -> None:
        pref = self._preferred.get(g)
        if pref is None or pref == self._id or pref in self._avoid_leader():
            return
        st = self._raft.status(g)
        peer = st.peers.get(pref)
        if (
            pref in st.conf.voters
            and peer is not None
            and peer.recent_active
            and peer.match == st.last_index
            and st.transferee == 0
            and self._transfer_budget > 0
        ):
            self._transfer_budget -= 1
            self._transfer(g, pref)

    # -- 5. the meta group ------------------------------------------------------------------------
    async def _reconcile_meta(self) -> None:
        st = self._raft.status(META_GROUP)
        voters, learners = set(st.conf.voters), set(st.conf.learners)
        nodes = self._catalog.nodes
        if not nodes:
            return
        for n in sorted(set(nodes) - voters - learners):
            await self._change(META_GROUP, ConfChangeKind.ADD_LEARNER, n)
            return
        active = {n for n, i in nodes.items() if i.state == ACTIVE}
        want = min(self._meta_voters, len(active))
        active_voters = voters & active
        if len(active_voters) < want:
            zones = {nodes[v].zone for v in active_voters if v in nodes}
            ready = [
                n
                for n in sorted(learners & active)
                if n in st.peers and st.peers[n].match >= st.commit
            ]
            if ready:
                best = min(ready, key=lambda n: (nodes[n].zone in zones and nodes[n].zone, n))
                await self._change(META_GROUP, ConfChangeKind.PROMOTE, best)
                return
        # Only a draining voter leaves (a founder that has not registered yet is no reason).
        leaving = sorted(v for v in voters if v in nodes and nodes[v].state != ACTIVE)
        if leaving and len(active_voters) >= want and len(voters) > 1:
            n = leaving[0]
            if n == self._id:
                self._hand_over(META_GROUP, sorted(active_voters))
            else:
                await self._change(META_GROUP, ConfChangeKind.REMOVE, n)
            return
        if not self._catalog.initialized:
            return
        for n in sorted(learners - set(nodes)):  # forgotten nodes
            await self._change(META_GROUP, ConfChangeKind.REMOVE, n)
            return
