"""Leader-direct routing for `cmq.client`: which node to send a queue's calls to first. Pure: no
I/O, no clock.

A node that answers a call about a queue it does not lead names the leader's HTTP address in the
``Cmq-Leader`` response header (``host:port`` as the cluster's catalog records it; docs/api.md,
"Leader hint"). `Leaders` keeps, per queue, the base URL that header resolved to, and the client
sends that queue's next call there first, skipping the node-to-node forwarding hop. The map is
bounded (least recently learned queues are forgotten first) and only ever a preference:

* a hint is followed only when it names one of the client's URLs (same host and port), or, with
  ``any_node``, any well-formed ``host:port`` (reached with the scheme of the client's URLs); a
  malformed hint, or one naming an address outside the client's URLs without ``any_node``, is
  ignored and drops what the queue had;
* the preference is dropped when an attempt through it fails in any way (the client then falls
  back to its normal rotation, under its unchanged retry rules: `cmq.client.retry`), and
  replaced when the preferred node answers with a hint of its own (leadership moved);
* an answer without the header leaves it as it is (the leader answered, or an older node that
  sends no hints).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

LEADER_HEADER: Final = "Cmq-Leader"
"""The response header a node names the queue's leader in (``host:port``)."""
MAX_QUEUES: Final = 1024
"""Queues whose preferred node a client remembers (the least recently learned go first)."""
MAX_HINT_CHARS: Final = 300
"""A longer header is not a ``host:port`` (a DNS name is at most 253 characters)."""


def host_port(text: str) -> str | None:
    """``text`` as a lowercase ``host:port`` if it is exactly that (a DNS name, an IPv4 address or
    a bracketed IPv6 address, and a port in 1..65535; nothing else: no scheme, user, path, query
    or spaces); None otherwise."""
    if not text or len(text) > MAX_HINT_CHARS or any(c in text for c in "/?#@\\ \t\r\n"):
        return None
    try:
        parts = urlsplit(f"//{text}")
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname
    if not host or port is None or not 1 <= port <= 65535 or parts.netloc != text:
        return None
    if ":" in host:  # IPv6: must have come bracketed
        return f"[{host}]:{port}"
    if not all(c.isalnum() or c in ".-_" for c in host):
        return None
    return f"{host.lower()}:{port}"


def url_host_port(url: str) -> str | None:
    """The ``host:port`` a base URL reaches (the scheme's default port when it names none)."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    host = parts.hostname
    if not host:
        return None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return f"[{host}]:{port}" if ":" in host else f"{host.lower()}:{port}"


class Leaders:
    """Per-queue preferred base URLs (see the module docstring). ``urls``: the client's nodes,
    which a hint may name; ``any_node``: also follow a hint naming another address."""

    __slots__ = ("_by_address", "_preferred", "_scheme", "any_node", "capacity")

    def __init__(
        self, urls: Iterable[str], *, any_node: bool = False, capacity: int = MAX_QUEUES
    ) -> None:
        urls = tuple(urls)
        self._by_address: dict[str, str] = {}
        for url in urls:
            address = url_host_port(url)
            if address is not None:
                self._by_address.setdefault(address, url)
        self._scheme = urlsplit(urls[0]).scheme if urls else "http"
        self._preferred: OrderedDict[str, str] = OrderedDict()
        self.any_node = any_node
        self.capacity = capacity

    def __len__(self) -> int:
        return len(self._preferred)

    def get(self, queue: str) -> str | None:
        """The base URL to send ``queue``'s next call to first (None: the normal rotation)."""
        return self._preferred.get(queue)

    def resolve(self, hint: str) -> str | None:
        """The base URL a ``Cmq-Leader`` value leads to, or None when it is not followed."""
        address = host_port(hint.strip())
        if address is None:
            return None
        url = self._by_address.get(address)
        if url is None and self.any_node:
            url = f"{self._scheme}://{address}"
        return url

    def learn(self, queue: str, answered: str, hint: str | None) -> None:
        """Record an answer from base URL ``answered`` to a call about ``queue`` carrying the
        header value ``hint`` (None: no header)."""
        if hint is None:
            return
        url = self.resolve(hint)
        if url is None or url == answered:
            self._preferred.pop(queue, None)
            return
        self._preferred[queue] = url
        self._preferred.move_to_end(queue)
        while len(self._preferred) > self.capacity:
            self._preferred.popitem(last=False)

    def failed(self, queue: str, url: str) -> None:
        """An attempt about ``queue`` sent to ``url`` failed: stop preferring ``url`` for it."""
        if self._preferred.get(queue) == url:
            del self._preferred[queue]

    def lost(self, url: str) -> None:
        """The connection to ``url`` failed (a stream client's): stop preferring it for every
        queue."""
        for queue in [q for q, u in self._preferred.items() if u == url]:
            del self._preferred[queue]
