"""A throwaway pod network for the chart boot test: one Linux network namespace per pod, joined
by a bridge in a namespace of its own, each with an /etc/hosts (``ip netns exec`` binds
``/etc/netns/<ns>/hosts`` over ``/etc/hosts`` for the processes it starts) that maps the pods'
DNS names to their addresses, as cluster DNS would. Nothing is added to the host's own network:
the addresses exist only inside these namespaces, which `PodNetwork.close` deletes.

Needs root and ``ip`` (iproute2); `PodNetwork.available` says whether this machine allows it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

SUBNET = "10.77.0"
"""The pods' /24 (inside the namespaces only)."""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass
class PodNetwork:
    """Namespaces named ``cmq<tag>-<pod>`` plus a hub; `add` one per pod (and one per client)."""

    tag: str = field(default_factory=lambda: secrets.token_hex(3))
    namespaces: list[str] = field(default_factory=list)
    addresses: dict[str, str] = field(default_factory=dict)
    """namespace -> address."""
    names: dict[str, str] = field(default_factory=dict)
    """DNS name -> address (written to every namespace's hosts file by `write_hosts`)."""

    @staticmethod
    def available() -> str | None:
        """None if network namespaces can be made here, else why not."""
        if os.geteuid() != 0:
            return "network namespaces need root"
        if shutil.which("ip") is None:
            return "iproute2 (ip) is not installed"
        probe = f"cmqprobe{secrets.token_hex(3)}"
        try:
            _ip("netns", "add", probe)
        except (subprocess.CalledProcessError, OSError) as e:
            return f"cannot create a network namespace: {e}"
        _ip("netns", "del", probe)
        return None

    @property
    def hub(self) -> str:
        return f"cmq{self.tag}-hub"

    def open(self) -> None:
        _ip("netns", "add", self.hub)
        self.namespaces.append(self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")

    def add(self, pod: str) -> str:
        """A namespace for ``pod`` with the next address on the bridge; returns its name."""
        ns = f"cmq{self.tag}-{pod}"
        index = len(self.addresses)
        address = f"{SUBNET}.{index + 2}"
        _ip("netns", "add", ns)
        self.namespaces.append(ns)
        veth = f"v{index}"
        _ip(
            "-n", self.hub, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns
        )
        _ip("-n", self.hub, "link", "set", veth, "master", "br0", "up")
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        self.addresses[ns] = address
        return ns

    def write_hosts(self) -> None:
        lines = ["127.0.0.1 localhost"]
        lines += [f"{addr} {name}" for name, addr in sorted(self.names.items())]
        for ns in self.addresses:
            d = Path("/etc/netns") / ns
            d.mkdir(parents=True, exist_ok=True)
            (d / "hosts").write_text("\n".join(lines) + "\n")

    def close(self) -> None:
        for ns in reversed(self.namespaces):
            subprocess.run(["ip", "netns", "del", ns], check=False, capture_output=True)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        self.namespaces.clear()
