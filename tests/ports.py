"""Free loopback ports for tests that start real servers (`cmq.cli.launch.free_ports`)."""

from __future__ import annotations

from cmq.cli.launch import free_ports

__all__ = ["free_ports"]
