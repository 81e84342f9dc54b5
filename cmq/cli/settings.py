"""``cmq serve``'s value settings, each written once: its flag, its ``CMQ_*`` environment
variable, its TOML key, how it is parsed and checked, and its default, which for a setting of
`cmq.node.config.NodeConfig` is that field's own default (never restated here).

A value comes from the flag, else the environment variable ``CMQ_<NAME>``, else the TOML file's
``<name>``, else the default (`resolve`). A value that does not parse or is out of range exits
with ``--<flag> must be <requirement>``. The flags' help texts name the default and the
variable (`add_settings`). Settings that are not one value (``--data-dir``, ``--peers``, the
secret, TLS files, ``--rejoin``) stay with the command (`cmq.cli.serve`, `cmq.cli.keys`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_NODE_DEFAULT: Any = object()
"""`Setting.default` meaning: the default of the `NodeConfig` field of the same name."""


def on_off(value: object) -> bool:
    """A switch from a flag (``on``/``off``), the environment (also ``1``/``0``, ``true``/
    ``false``) or TOML (a boolean); `ValueError` otherwise."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("on", "1", "true", "yes"):
        return True
    if text in ("off", "0", "false", "no"):
        return False
    raise ValueError(value)


@dataclass(frozen=True, slots=True)
class Setting:
    """One value setting of ``cmq serve`` (module docstring)."""

    name: str
    """The TOML key; the flag is ``--`` + ``name`` with dashes, the variable ``CMQ_`` + upper."""
    help: str
    parse: Callable[[Any], Any] = str
    """A flag's, variable's or TOML value to the setting's (`ValueError` or `TypeError`: bad)."""
    valid: Callable[[Any], bool] = lambda v: True
    requirement: str = "a valid value"
    """What the error says a value must be."""
    default: Any = _NODE_DEFAULT
    unit: float = 1
    """The `NodeConfig` value is the given one times this (``scrub_rate``: MB/s to bytes/s)."""
    choices: tuple[str, ...] | None = None
    node: bool = True
    """A `NodeConfig` field (else a setting of the server around the node)."""
    shown: str | None = None
    """The default as the help names it, when the default is None and another part decides."""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def default_value(self) -> Any:
        """The default, as given on the command line (before `unit`); a callable default is
        called (the module that owns it is imported only when a value or help needs it)."""
        if self.default is not _NODE_DEFAULT:
            return self.default() if callable(self.default) else self.default
        from cmq.node.config import NodeConfig

        field = {f.name: f for f in dataclasses.fields(NodeConfig)}[self.name]
        value: Any = field.default
        if value is dataclasses.MISSING:
            raise TypeError(f"NodeConfig.{self.name} has no default: give the setting one")
        if self.unit != 1:
            value = value / self.unit
            return int(value) if float(value).is_integer() else value
        return value

    def help_text(self) -> str:
        """The flag's help: what it does, its default and its variable."""
        value = self.default_value()
        default = self.shown or ("none" if value in (None, "") else value)
        if isinstance(value, bool):
            default = "on" if value else "off"
        return f"{self.help} (default {default}; env CMQ_{self.name.upper()})"


def _metrics_top() -> int:
    from cmq.node.queue_metrics import DEFAULT_TOP

    return DEFAULT_TOP


def _positive(v: float) -> bool:
    return v > 0


def _at_least_one(v: int) -> bool:
    return v >= 1


def _not_negative(v: float) -> bool:
    return v >= 0


SERVE_SETTINGS: tuple[Setting, ...] = (
    Setting("groups", "data groups", int, _at_least_one, "at least 1"),
    Setting(
        "segment_max_bytes",
        "seal a queue's segment at this size (recorded per queue)",
        int,
        _at_least_one,
        "at least 1",
    ),
    Setting(
        "segment_max_age",
        "seal a queue's segment at this age in seconds",
        float,
        _not_negative,
        ">= 0",
    ),
    Setting(
        "coalesce_sends",
        "at the leader, propose the sends to one queue that arrive together as one command",
        on_off,
        requirement="on or off",
        choices=("on", "off"),
    ),
    Setting(
        "max_inflight_sends",
        "sends carried at once by this node; more wait",
        int,
        _at_least_one,
        "at least 1",
    ),
    Setting(
        "disk_reserve_bytes",
        "free space kept per data directory for receives and acks: below it, sends to the "
        "groups led there are refused with 507 DiskFull",
        int,
        _not_negative,
        ">= 0",
    ),
    Setting(
        "slow_fsync_seconds",
        "a WAL fsync running longer than this makes its disk slow: the groups led there hand "
        "their leadership to a peer",
        float,
        _positive,
        "> 0",
    ),
    Setting(
        "scrub_rate",
        "MB/s at most that the scrubber re-reads sealed segments and snapshots to find damage "
        "before a read does (0: off)",
        float,
        _not_negative,
        ">= 0",
        unit=1 << 20,
    ),
    Setting(
        "clock_bound_ms",
        "a clock further than this many ms from the median of its peers' stops this node "
        "leading until it is back",
        float,
        _positive,
        "> 0",
    ),
    Setting("zone", "failure-domain label: a group's replicas prefer distinct zones"),
    Setting(
        "replication",
        "voting replicas per data group",
        int,
        lambda v: v in (1, 3, 5),
        "3 or 5 (1 for a single node)",
    ),
    Setting(
        "http_workers",
        "front-end processes that serve HTTP instead of the node process, sharing the port "
        "and checking signed requests themselves",
        int,
        _not_negative,
        ">= 0",
        default=0,
        node=False,
    ),
    Setting(
        "otlp_endpoint",
        "export server spans (send, receive, ack) by OTLP/HTTP to this collector, e.g. "
        "http://127.0.0.1:4318 (needs the otel-export extra)",
        default=None,
        node=False,
    ),
    Setting(
        "log_format",
        "log lines on stderr: text for people or one JSON object per line (docs/operations.md, "
        '"Logs")',
        lambda v: str(v).lower(),
        default=None,
        shown="text",
        choices=("text", "json"),
        valid=lambda v: v in ("text", "json"),
        requirement="text or json",
        node=False,
    ),
    Setting(
        "metrics_queues",
        "GLOB[,GLOB...]: queues whose names match get their own series on /metrics; the "
        'others are folded into queue="_other" (a TOML file may give a list)',
        lambda v: v,
        default=None,
        shown="*",
        node=False,
    ),
    Setting(
        "metrics_top_queues",
        "at most this many queues (the deepest) get their own series on /metrics; the rest "
        'are folded into queue="_other"',
        int,
        _at_least_one,
        "at least 1",
        default=_metrics_top,
        node=False,
    ),
)


class _SettingFlag(argparse.Action):
    """A setting's flag: stores its value as given; its help is written when help is shown,
    so building the parser imports no node module (every ``cmq`` command builds it)."""

    def __init__(self, option_strings: list[str], dest: str, setting: Setting, **kw: Any) -> None:
        self._setting = setting
        super().__init__(option_strings, dest, **kw)

    @property
    def help(self) -> str:
        return self._setting.help_text()

    @help.setter
    def help(self, value: str | None) -> None:
        """argparse sets the help it was given (None): the setting writes its own."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)


def add_settings(parser: argparse.ArgumentParser, settings: Iterable[Setting]) -> None:
    """One flag per setting; unset flags are None, so `resolve` can look further."""
    for s in settings:
        parser.add_argument(s.flag, action=_SettingFlag, setting=s, choices=s.choices)


def resolve(
    args: argparse.Namespace,
    conf: Mapping[str, Any],
    settings: Iterable[Setting],
    environ: Mapping[str, str] = os.environ,
) -> dict[str, Any]:
    """Each setting's value by name (module docstring), parsed, checked and in `NodeConfig`'s
    unit; `SystemExit` naming the flag for a bad one."""
    out: dict[str, Any] = {}
    for s in settings:
        given = getattr(args, s.name, None)
        if given is None:
            given = environ.get("CMQ_" + s.name.upper())
        if given is None:
            given = conf.get(s.name)
        if given is None:
            value = s.default_value()
        else:
            try:
                value = s.parse(given)
            except (ValueError, TypeError):
                value = _INVALID
            if value is _INVALID or not s.valid(value):
                raise SystemExit(f"{s.flag} must be {s.requirement} (got {given!r})")
        if value is not None and s.unit != 1:
            value = value * s.unit
        out[s.name] = value
    return out


_INVALID: Any = object()


def node_settings(values: Mapping[str, Any]) -> dict[str, Any]:
    """The `NodeConfig` fields among `resolve`'s ``values``."""
    node = {s.name for s in SERVE_SETTINGS if s.node}
    return {k: v for k, v in values.items() if k in node}
