"""The ``cmq`` command's access keys and HTTP security options.

* ``cmq key create|list|grant|revoke|delete`` (admin keys only): ``create`` prints the new
  key's secret, the one time it is ever shown;
* ``--key-file`` and ``--ca-file`` (before the subcommand, for every client command): the key
  requests are signed with and the CA bundle ``https`` URLs are verified with; the same as
  ``CMQ_KEY_FILE`` / ``CMQ_CA_FILE`` (``CMQ_ACCESS_KEY_ID`` and ``CMQ_SECRET_ACCESS_KEY`` name a
  key too, `cmq.client.signing`);
* ``cmq serve --anonymous`` (serve unsigned requests: a loud warning), ``--tls-cert`` and
  ``--tls-key`` (serve HTTPS).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from cmq.errors import CmqError
from cmq.grants import ACTIONS

DEFAULT_URL = "http://127.0.0.1:8080"


def add_security_options(parser: argparse.ArgumentParser) -> None:
    """``--key-file`` and ``--ca-file`` on the top-level parser."""
    parser.add_argument(
        "--key-file", help="access key file to sign requests with (env CMQ_KEY_FILE)"
    )
    parser.add_argument("--ca-file", help="CA bundle for https URLs (env CMQ_CA_FILE)")


def apply_security_options(args: argparse.Namespace) -> None:
    """Make the options the clients' defaults (they read the environment)."""
    if getattr(args, "key_file", None):
        os.environ["CMQ_KEY_FILE"] = args.key_file
        os.environ.pop("CMQ_ACCESS_KEY_ID", None)
    if getattr(args, "ca_file", None):
        os.environ["CMQ_CA_FILE"] = args.ca_file


def add_serve_security(serve: argparse.ArgumentParser) -> None:
    """``cmq serve``'s ``--anonymous``, ``--tls-cert`` and ``--tls-key``."""
    serve.add_argument(
        "--anonymous",
        action="store_true",
        help="serve requests without signatures (anyone can do anything: development only)",
    )
    serve.add_argument("--tls-cert", help="serve HTTPS: the certificate chain file (PEM)")
    serve.add_argument("--tls-key", help="the certificate's private key file (PEM)")


def serve_security(args: argparse.Namespace, conf: dict[str, Any]) -> Any:
    """The `cmq.cli.server.HttpSecurity` of ``cmq serve``'s options (or the TOML file's
    ``anonymous``, ``tls_cert``, ``tls_key``; ``CMQ_ANONYMOUS=1`` too)."""
    from cmq.cli.server import HttpSecurity

    anonymous = bool(args.anonymous or conf.get("anonymous")) or os.environ.get(
        "CMQ_ANONYMOUS", ""
    ) in ("1", "true")
    cert = args.tls_cert or conf.get("tls_cert") or os.environ.get("CMQ_TLS_CERT")
    key = args.tls_key or conf.get("tls_key") or os.environ.get("CMQ_TLS_KEY")
    if (cert is None) != (key is None):
        raise SystemExit("--tls-cert and --tls-key go together")
    return HttpSecurity(anonymous, cert, key)


def add_key_commands(sub: Any) -> None:
    """``cmq key create|list|grant|revoke|delete``."""
    k = sub.add_parser("key", help="access keys and their grants (admin keys only)")
    ksub = k.add_subparsers(dest="key_cmd", required=True)
    grant_help = f"PATTERN=ACTION[,ACTION...] (actions: {', '.join(ACTIONS)})"
    create = ksub.add_parser("create", help="a new key: its secret is printed this once")
    create.add_argument("--grant", "-g", action="append", default=[], help=grant_help)
    ls = ksub.add_parser("list", help="keys and their grants (never secrets)")
    grant = ksub.add_parser("grant", help="add a grant to a key")
    grant.add_argument("key")
    grant.add_argument("grant", help=grant_help)
    revoke = ksub.add_parser("revoke", help="remove a key's grant on a pattern")
    revoke.add_argument("key")
    revoke.add_argument("pattern")
    delete = ksub.add_parser("delete", help="delete a key: its requests are refused from now")
    delete.add_argument("key")
    for c in (create, ls, grant, revoke, delete):
        c.add_argument("--url", default=DEFAULT_URL)
        c.add_argument("--json", action="store_true", help="print the JSON result")
    k.set_defaults(func=_key)


def _grant(text: str) -> dict[str, Any]:
    pattern, sep, actions = text.rpartition("=")
    if not sep or not pattern:
        raise SystemExit(f"a grant is PATTERN=ACTION[,ACTION...], not {text!r}")
    return {"pattern": pattern, "actions": [a for a in actions.split(",") if a]}


def _key(args: argparse.Namespace) -> int:
    from cmq.cli import output as cli_output
    from cmq.client import SyncClient
    from cmq.client.errors import server_error

    cmd = args.key_cmd
    if cmd == "create":
        method, path, body = "POST", "/v1/keys", {"grants": [_grant(g) for g in args.grant]}
    elif cmd == "list":
        method, path, body = "GET", "/v1/keys", None
    elif cmd == "grant":
        method, path, body = "POST", f"/v1/keys/{args.key}/grants", _grant(args.grant)
    elif cmd == "revoke":
        method, path, body = "POST", f"/v1/keys/{args.key}/revoke", {"pattern": args.pattern}
    else:
        method, path, body = "DELETE", f"/v1/keys/{args.key}", None
    try:
        with SyncClient(args.url) as client:
            raw = client.request(method, path, body)
        if raw.status >= 300:
            error = raw.payload.get("error", {}) if isinstance(raw.payload, dict) else {}
            code = str(error.get("code", "HttpError"))
            raise server_error(raw.status, code, str(error.get("message", raw.status)))
    except CmqError as e:
        cli_output.report_error(e.code, e.message, as_json=args.json)
        return 1
    result = raw.payload
    if args.json or cmd != "list":
        cli_output.print_json(result)
        if cmd == "create" and not args.json:
            print("the secret_access_key is shown this once: keep it (e.g. in a key file)")
        return 0
    for key in result.get("keys", []):
        grants = " ".join(f"{g['pattern']}={','.join(g['actions'])}" for g in key["grants"])
        print(f"{key['access_key_id']}  {grants or '(no grants)'}")
    return 0
