"""``cmq cluster set-groups N``: grow the number of data groups of a running cluster.

The catalog places the new groups on the active nodes like the founding ones (`cmq.meta`); new
queues go to the least-loaded group (so first to the new ones) and existing queues stay where
they are. Asking for fewer groups than the cluster has is refused (``InvalidParameter``).
"""

from __future__ import annotations

import argparse
from typing import Any

from cmq.cli_nodes import DEFAULT_URL
from cmq.errors import CmqError


def add_cluster_commands(sub: Any) -> None:
    """``cmq cluster set-groups N``."""
    c = sub.add_parser("cluster", help="cluster-wide administration (data groups)")
    csub = c.add_subparsers(dest="cluster_cmd", required=True)
    sg = csub.add_parser("set-groups", help="grow the number of data groups to N (never shrink)")
    sg.add_argument("groups", type=int, metavar="N")
    sg.add_argument("--url", default=DEFAULT_URL)
    sg.add_argument("--json", action="store_true", help="print the JSON result")
    c.set_defaults(func=_cluster)


def _cluster(args: argparse.Namespace) -> int:
    from cmq import cli_output  # imported late, like the client: ``cmq serve`` needs neither
    from cmq.client import SyncClient

    try:
        with SyncClient(args.url) as client:
            added = client.set_groups(args.groups)
    except CmqError as e:
        cli_output.report_error(e.code, e.message, as_json=args.json)
        return 1
    result = {"groups": args.groups, "added": added}
    if args.json:
        cli_output.print_json(result)
    elif added:
        print(f"{args.groups} data groups: added {', '.join(map(str, added))}")
    else:
        print(f"{args.groups} data groups: nothing to add")
    return 0
