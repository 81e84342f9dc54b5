"""Script-style tests of the core: each ``testdata/*.txt`` file is a list of cases

    command arg arg
    ----
    expected output

run against a `Cluster`. ``RAFT_REWRITE=1 pytest tests/raftlog/core/test_scripts.py`` rewrites
the expected outputs (review the diff before committing). Commands:

- ``nodes N [pre_vote=0] [check_quorum=0]``  a fresh cluster of N voters
- ``campaign ID`` / ``propose ID DATA`` / ``transfer FROM TO`` / ``tick N`` / ``stabilize``
- ``isolate ID`` / ``heal`` / ``compact ID``
- ``add-learner LEADER ID`` / ``promote LEADER ID`` / ``remove LEADER ID``
- ``status [ID...]``  role, term, leader, commit, applied, last index per node
- ``progress ID``     the leader's view of each peer
- ``applied ID``      data applied by node ID
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from raftlog.core import ConfChange, ConfChangeKind, ConfState
from raftlog.errors import RaftError
from tests.raftlog.core.harness import Cluster, compact

DATA = Path(__file__).parent / "testdata"


def parse(text: str) -> list[tuple[str, str]]:
    """[(command block, expected output)] from a script file."""
    cases: list[tuple[str, str]] = []
    blocks = text.split("\n\n")
    for block in blocks:
        if not block.strip():
            continue
        cmd, sep, expected = block.partition("\n----\n")
        if not sep:
            cmd, expected = block.rstrip("\n").removesuffix("\n----"), ""
        cases.append((cmd.strip(), expected.strip("\n")))
    return cases


class Runner:
    def __init__(self) -> None:
        self.c = Cluster(3)

    def run(self, line: str) -> str:
        words = line.split()
        cmd, args = words[0], words[1:]
        c = self.c
        try:
            if cmd == "nodes":
                opts = dict(a.split("=") for a in args[1:])
                self.c = Cluster(
                    int(args[0]),
                    pre_vote=opts.get("pre_vote", "1") == "1",
                    check_quorum=opts.get("check_quorum", "1") == "1",
                )
                return "ok"
            if cmd == "campaign":
                c.nodes[int(args[0])].campaign()
                c.stabilize()
            elif cmd == "propose":
                idx = c.nodes[int(args[0])].propose(args[1].encode())
                c.stabilize()
                return f"index {idx}"
            elif cmd == "transfer":
                c.nodes[int(args[0])].transfer_leader(int(args[1]))
                c.stabilize()
            elif cmd == "tick":
                c.tick(int(args[0]))
            elif cmd == "stabilize":
                c.stabilize()
            elif cmd == "isolate":
                c.isolate(int(args[0]))
            elif cmd == "heal":
                c.heal()
            elif cmd == "compact":
                return f"snapshot at {compact(c, int(args[0]))}"
            elif cmd in ("add-learner", "promote", "remove"):
                kind = {
                    "add-learner": ConfChangeKind.ADD_LEARNER,
                    "promote": ConfChangeKind.PROMOTE,
                    "remove": ConfChangeKind.REMOVE,
                }[cmd]
                node = int(args[1])
                if kind is ConfChangeKind.ADD_LEARNER and node not in c.nodes:
                    c.add_node(node, ConfState())
                c.nodes[int(args[0])].propose_conf_change(ConfChange(kind, node))
                c.stabilize()
            elif cmd == "status":
                ids = [int(a) for a in args] or sorted(c.nodes)
                return "\n".join(self.status_line(i) for i in ids)
            elif cmd == "progress":
                st = c.nodes[int(args[0])].status()
                return "\n".join(f"{p}: {ps_line}" for p, ps_line in self.progress(st.peers))
            elif cmd == "applied":
                return " ".join(d.decode() for _, _, d in c.applied[int(args[0])]) or "(none)"
            else:
                raise ValueError(f"unknown command {cmd!r}")
        except RaftError as e:
            return f"error {e.code}: {e}"
        return "ok"

    def status_line(self, i: int) -> str:
        s = self.c.nodes[i].status()
        voters = ",".join(map(str, s.conf.voters))
        learners = ",".join(map(str, s.conf.learners))
        conf = f"voters=({voters})" + (f" learners=({learners})" if learners else "")
        return (
            f"{i}: {s.role.name} term={s.term} lead={s.leader} commit={s.commit} "
            f"applied={s.applied} last={s.last_index} {conf}"
        )

    @staticmethod
    def progress(peers: dict[int, object]) -> list[tuple[int, str]]:
        out = []
        for p, ps in sorted(peers.items()):
            match, nxt, state = ps.match, ps.next, ps.state  # type: ignore[attr-defined]
            out.append((p, f"{state.name} match={match} next={nxt}"))
        return out


@pytest.mark.parametrize("path", sorted(DATA.glob("*.txt")), ids=lambda p: p.stem)
def test_script(path: Path) -> None:
    runner = Runner()
    cases = parse(path.read_text())
    assert cases, f"{path.name} has no cases"
    actual = []
    for cmd, _ in cases:
        outputs = [runner.run(line) for line in cmd.splitlines() if line.strip()]
        actual.append("\n".join(o for o in outputs if o != "ok") or "ok")
    if os.environ.get("RAFT_REWRITE") == "1":
        path.write_text(
            "\n\n".join(f"{cmd}\n----\n{out}" for (cmd, _), out in zip(cases, actual, strict=True))
            + "\n"
        )
        return
    for (cmd, expected), got in zip(cases, actual, strict=True):
        assert got == expected, f"{path.name}: {cmd!r}\n--- expected\n{expected}\n--- got\n{got}"


def test_runner_reports_a_wrong_expectation() -> None:
    runner = Runner()
    assert runner.run("campaign 1") == "ok"
    assert runner.run("status 1").startswith("1: LEADER term=1")
    assert runner.run("propose 2 x").startswith("error NotLeader")
