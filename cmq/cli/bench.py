"""``cmq bench`` on the command line: its flags to a `BenchConfig`, the run on a fresh event
loop, the report on stdout and the exit status (the run itself is `cmq.loadgen`)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from cmq.loadgen import BenchConfig, BenchError, format_report, report_to_json, run_bench


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    """The `BenchConfig` for the ``cmq bench`` flags (see `cmq.cli.main`)."""
    urls = tuple(u.strip() for u in str(args.url).split(",") if u.strip())
    seconds = args.seconds
    if seconds is None and not args.messages:
        seconds = 20.0
    return BenchConfig(
        urls=urls,
        queue=args.queue,
        producers=args.producers,
        consumers=args.consumers,
        size=args.size,
        window=args.window,
        batch=args.batch,
        recv_batch=args.recv_batch,
        recv_window=args.recv_window,
        rate=args.rate,
        messages=args.messages,
        seconds=seconds,
        drain=not args.no_drain,
        drain_timeout=args.drain_timeout,
        keep_queue=args.keep_queue,
        protocol=getattr(args, "protocol", "http"),
        leader_direct=not getattr(args, "no_leader_direct", False),
    )


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - non-Linux
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def main_from_args(args: argparse.Namespace) -> int:
    """``cmq bench``: run, print the report (text or ``--json``) on stdout; the exit status.

    0 when something was confirmed and, after a drain, nothing confirmed is missing; 1
    otherwise; 2 for bad settings or a queue that cannot be created.
    """
    import orjson

    try:
        cfg = config_from_args(args)
        cfg.validate()
    except ValueError as e:
        print(f"cmq bench: {e}", file=sys.stderr)
        return 2
    loop = _new_event_loop()
    try:
        report = loop.run_until_complete(run_bench(cfg))
    except BenchError as e:
        print(f"cmq bench: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\ncmq bench: interrupted", file=sys.stderr)
        return 130
    finally:
        loop.close()
    if args.json:
        sys.stdout.write(orjson.dumps(report_to_json(report), option=orjson.OPT_INDENT_2).decode())
        sys.stdout.write("\n")
    else:
        print(format_report(report))
    sys.stdout.flush()
    return 0 if report.ok else 1
