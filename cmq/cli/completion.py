"""Shell completion for ``cmq`` (argcomplete): `complete` answers a completion request, and
``cmq completion bash|zsh`` prints the script that registers ``cmq`` with the shell (the same
as ``register-python-argcomplete cmq``).

A completion request is ``cmq`` started by the shell with ``_ARGCOMPLETE`` set (and
``COMP_LINE``, ``COMP_POINT``): `complete` then writes the candidates to the shell (file
descriptor 8, or ``_ARGCOMPLETE_STDOUT_FILENAME``) and exits the process; otherwise it returns
at once without importing argcomplete, so ordinary runs pay nothing for it.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

SHELLS = ("bash", "zsh")


def complete(parser: argparse.ArgumentParser, **options: Any) -> None:
    """Answer a shell's completion request for ``parser`` and exit, when this is one
    (``options`` go to ``argcomplete.autocomplete``: the tests give an output stream and an
    exit method); return otherwise."""
    if "_ARGCOMPLETE" not in os.environ:
        return
    import argcomplete

    argcomplete.autocomplete(parser, **options)


def add_completion_command(sub: Any) -> None:
    """``cmq completion bash|zsh``."""
    c = sub.add_parser(
        "completion",
        help="print the shell script that completes cmq's commands and options",
        description='Print the completion script for SHELL; e.g. eval "$(cmq completion bash)" '
        "in ~/.bashrc (the same as register-python-argcomplete cmq).",
    )
    c.add_argument("shell", choices=SHELLS)
    c.set_defaults(func=_completion)


def script(shell: str) -> str:
    """The script registering ``cmq`` for completion in ``shell``."""
    from argcomplete.shell_integration import shellcode

    return shellcode(["cmq"], shell=shell)


def _completion(args: argparse.Namespace) -> int:
    sys.stdout.write(script(args.shell))
    return 0
