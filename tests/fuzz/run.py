"""Run one fuzz target under atheris (libFuzzer, coverage-guided over raftlog, cmq and api).

    python -m tests.fuzz.run TARGET|all [--runs N | --seconds S] [--out DIR]

``all`` runs every target in turn, each in a forked child of one instrumented process (the
instrumented imports cost seconds; a fork costs nothing), and exits non-zero if any target had a
finding. Each target starts from the committed seeds in ``tests/fuzz/corpus/TARGET`` (read
only: new inputs go to a scratch corpus ``--out``, default a temporary directory). Exits 0 when
the run ends without a finding; on one, libFuzzer prints the exception and writes the input as
``crash-*`` (or ``timeout-*``: an input that takes over ``--timeout`` seconds, i.e. a hang) into
``--out``, and the exit code is non-zero.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

import atheris

with atheris.instrument_imports(include=["raftlog", "cmq", "api"]):
    from tests.fuzz.targets import CORPUS, TARGETS


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz.run")
    p.add_argument("target", choices=[*sorted(TARGETS), "all"])
    p.add_argument("--runs", type=int, default=None, help="inputs to try (after the seeds)")
    p.add_argument("--seconds", type=int, default=None, help="or: how long to run")
    p.add_argument("--timeout", type=int, default=10, help="seconds one input may take")
    p.add_argument("--out", type=Path, default=None, help="scratch corpus and findings")
    p.add_argument("--seed", type=int, default=1, help="libFuzzer's random seed")
    args = p.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix=f"fuzz-{args.target}-"))
    if args.target != "all":
        _fuzz(args.target, args, out)
    failed = []
    for name in sorted(TARGETS):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child exits through SystemExit (so libFuzzer's
            _fuzz(name, args, out / name)  # exit handler writes a finding's input)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        print(f"fuzz target {name}: exit {status}", file=sys.stderr, flush=True)
        if status != 0:
            failed.append(name)
    if failed:
        sys.exit(f"findings in: {', '.join(failed)} (inputs under {out})")


def _fuzz(name: str, args: argparse.Namespace, out: Path) -> NoReturn:
    """Fuzz target ``name`` in this process; libFuzzer exits the process when it is done."""
    out.mkdir(parents=True, exist_ok=True)
    flags = [
        sys.argv[0],
        f"-timeout={args.timeout}",
        f"-seed={args.seed}",
        f"-artifact_prefix={out}/",
        "-max_len=4096",
        "-print_final_stats=1",
    ]
    if args.runs is not None:
        flags.append(f"-runs={args.runs}")
    if args.seconds is not None:
        flags.append(f"-max_total_time={args.seconds}")
    flags += [str(out), str(CORPUS / name)]
    check = TARGETS[name].check

    def one(data: bytes) -> None:
        check(data)

    atheris.Setup(flags, one)
    atheris.Fuzz()
    raise SystemExit(0)


if __name__ == "__main__":
    main()
