"""``cmq backup --out DIR`` and ``cmq restore DIR`` (`cmq.backup`): a copy of a running
cluster's catalog and live messages, and its recreation in another cluster. Both print a
summary (``--json``: machine-readable) and exit 1 on an error, reported as one line.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from cmq.cli.keys import DEFAULT_URL


def _print(payload: dict[str, Any], as_json: bool) -> None:
    from cmq.cli import output as cli_output

    if as_json:
        cli_output.print_json(payload)
        return
    for key, value in payload.items():
        print(f"{key}: {value}")


def _backup(args: argparse.Namespace) -> int:
    from cmq.backup.dump import backup
    from cmq.client import Client

    async def run() -> dict[str, Any]:
        async with Client(args.url) as client:
            return (await backup(client, args.out)).to_dict()

    _print(asyncio.run(run()), args.json)
    return 0


def _restore(args: argparse.Namespace) -> int:
    from cmq.backup.load import restore
    from cmq.client import Client

    async def run() -> dict[str, Any]:
        async with Client(args.url) as client:
            return (await restore(client, args.directory)).to_dict()

    _print(asyncio.run(run()), args.json)
    return 0


def add_backup_commands(sub: Any) -> None:
    """``backup`` and ``restore`` on the ``cmq`` parser's subcommands."""
    b = sub.add_parser(
        "backup", help="write the catalog and every queue's live messages to a directory"
    )
    b.add_argument("--url", default=DEFAULT_URL, help="URL[,URL...] of the cluster")
    b.add_argument("--out", required=True, help="directory to create (must not hold files)")
    b.add_argument("--json", action="store_true", help="machine-readable output")
    b.set_defaults(func=_backup)
    r = sub.add_parser("restore", help="recreate a backup's queues, keys and messages")
    r.add_argument("directory", help="a directory written by cmq backup")
    r.add_argument("--url", default=DEFAULT_URL, help="URL[,URL...] of the target cluster")
    r.add_argument("--json", action="store_true", help="machine-readable output")
    r.set_defaults(func=_restore)
