"""A seed fixes the workload's choices, and the printed replay command gives the same run."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

from tests.chaos.__main__ import config_of
from tests.chaos.history import History
from tests.chaos.runner import RunConfig, replay_command
from tests.chaos.surfaces import SURFACES
from tests.chaos.workload import Workload, WorkloadConfig


def workload(seed: int) -> Workload:
    return Workload({1: "http://a", 2: "http://b"}, History(), WorkloadConfig(), seed, "s1")


def test_choices_depend_on_the_seed_and_the_decision_only() -> None:
    a, b, c = workload(7), workload(7), workload(8)
    draws = [("producer-0", 3), ("consumer-1", 40), ("fate", "s1-p0-3-1", 2)]
    # Drawing in another order (other outcomes, other timing) changes nothing.
    first = [a.choices(*d).random() for d in draws]
    assert [b.choices(*d).random() for d in reversed(draws)] == first[::-1]
    assert [c.choices(*d).random() for d in draws] != first
    assert a.choices("producer-0", 3).random() != a.choices("producer-0", 4).random()


def test_bodies_are_seeded_and_a_corrupted_one_is_not_taken_for_its_key() -> None:
    w = workload(7)
    bodies = {k: w.body(k) for k in (f"s1-p0-{i}-0" for i in range(40))}
    assert bodies == {k: workload(7).body(k) for k in bodies}
    assert len({len(b) for b in bodies.values()}) > 2  # several sizes
    for k, body in bodies.items():
        assert w.key_of(body) == k
    k, body = next((k, b) for k, b in bodies.items() if len(b) > len(k) + 1)
    assert w.key_of(body[:-1]) == body[:-1]  # short: reported under the whole body
    assert w.key_of(k) == k  # the pinned clients send bare keys


def test_the_replay_command_gives_the_same_config() -> None:
    cfg = RunConfig(
        seed=42,
        nodes=5,
        groups=3,
        duration=12.5,
        faults=["kill", "pinned"],
        lazyfs="none",
        overlap=0.5,
        snapshot_entries=100,
        known_issues=("segment missing",),
        workdir=Path("/tmp/cmq-chaos"),
        keep=True,
    )
    cmd = replay_command(cfg)
    assert cmd.startswith("python -m tests.chaos run --seeds 42 ")
    assert config_of(shlex.split(cmd)[3:]) == cfg
    # A workload's default is the native surface; the command line's is every surface.
    assert "--surfaces native " in cmd
    every = dataclasses.replace(cfg, workload=WorkloadConfig(surfaces=SURFACES))
    assert "--surfaces" not in replay_command(every)
    some = dataclasses.replace(cfg, workload=WorkloadConfig(surfaces=("native", "fifo", "sqs")))
    cmd = replay_command(some)
    assert "--surfaces native,fifo,sqs" in cmd and "WorkloadConfig" not in cmd
    assert config_of(shlex.split(cmd)[3:]) == some
