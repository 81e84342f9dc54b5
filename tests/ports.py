"""Free loopback ports for tests that start real servers (`cmq.cli.launch.free_ports`), and the
port range each pytest worker takes them from (`worker_range`, set by ``tests/conftest.py``)."""

from __future__ import annotations

from cmq.cli.launch import PORT_RANGE_ENV, free_ports

__all__ = ["PORT_RANGE_ENV", "free_ports", "worker_range"]

TEST_PORTS = (20_000, 32_000)
"""The ports the suite's servers take, split between its workers: below the kernel's ephemeral
range (32768-60999 by default), so no client connection's source port lands on a port picked
for a server, and each worker (``pytest -n N``) has its own share, so two workers' clusters
never pick the same port."""


def worker_range(worker: str | None, count: str | None) -> str:
    """The `PORT_RANGE_ENV` value of xdist worker ``worker`` (``gw0``, ``gw1``, ...; None
    when pytest runs in one process) of ``count`` workers."""
    index = int(worker[2:]) if worker and worker.startswith("gw") else 0
    workers = max(1, int(count or 1))
    low, high = TEST_PORTS
    share = (high - low) // workers
    first = low + index * share
    return f"{first}-{first + share - 1}"
