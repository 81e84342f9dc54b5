"""``cmq cluster``: cluster-wide administration.

``set-groups N`` grows the number of data groups of a running cluster; ``features`` lists the
feature flags with each node's support; ``enable-feature NAME`` (or ``--all``) enables flags
once every registered node runs a release that supports them (`cmq.admin.feature_admin`).

The catalog places the new groups on the active nodes like the founding ones (`cmq.catalog.meta`);
new queues go to the least-loaded group (so first to the new ones) and existing queues stay where
they are. Asking for fewer groups than the cluster has is refused (``InvalidParameter``).
"""

from __future__ import annotations

import argparse
from typing import Any

from cmq.cli.nodes import DEFAULT_URL
from cmq.errors import CmqError


def add_cluster_commands(sub: Any) -> None:
    """``cmq cluster set-groups N | features | enable-feature NAME|--all``."""
    c = sub.add_parser("cluster", help="cluster-wide administration (data groups, features)")
    csub = c.add_subparsers(dest="cluster_cmd", required=True)
    sg = csub.add_parser("set-groups", help="grow the number of data groups to N (never shrink)")
    sg.add_argument("groups", type=int, metavar="N")
    fl = csub.add_parser("features", help="the feature flags and which nodes support each")
    en = csub.add_parser(
        "enable-feature", help="enable feature flags once every node supports them"
    )
    which = en.add_mutually_exclusive_group(required=True)
    which.add_argument("names", nargs="*", default=[], metavar="NAME")
    which.add_argument("--all", action="store_true", help="every flag the node's release knows")
    for p in (sg, fl, en):
        p.add_argument("--url", default=DEFAULT_URL)
        p.add_argument("--json", action="store_true", help="print the JSON result")
    c.set_defaults(func=_cluster)


def _cluster(args: argparse.Namespace) -> int:
    from cmq.cli import (
        output as cli_output,  # imported late, like the client: ``cmq serve`` needs neither
    )
    from cmq.client import SyncClient

    try:
        with SyncClient(args.url) as client:
            if args.cluster_cmd == "features":
                return _print_features(client.list_features(), as_json=args.json)
            if args.cluster_cmd == "enable-feature":
                if not args.all and not args.names:
                    cli_output.report_error(
                        "MissingParameter", "name a feature flag, or --all", as_json=args.json
                    )
                    return 2
                done = client.enable_features(None if args.all else list(args.names))
                if args.json:
                    cli_output.print_json({"enabled": done})
                else:
                    print(f"enabled: {', '.join(done)}" if done else "nothing to enable")
                return 0
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


def _print_features(rows: list[dict[str, Any]], *, as_json: bool) -> int:
    from cmq.cli import output as cli_output

    if as_json:
        cli_output.print_json({"features": rows})
        return 0
    print(f"{'FEATURE':<16} {'SINCE':<7} {'ENABLED':<8} {'SUPPORTED BY':<14} MISSING")
    for r in rows:
        support = ",".join(map(str, r["supported_by"])) or "-"
        missing = ",".join(map(str, r["missing"])) or "-"
        enabled = "yes" if r["enabled"] else "no"
        print(f"{r['name']:<16} {r['since']:<7} {enabled:<8} {support:<14} {missing}")
    return 0
