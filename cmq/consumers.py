"""`Subscriptions`: how many stream subscriptions are open per queue in this process.

The streaming protocol (`api.stream`) opens and closes subscriptions; the node's metrics read
the counts (`cmq.node.queue_metrics`). It lives among the contract modules so that both sides
reach it without the API importing the node or the node the API. Single-threaded: used from
the event loop only.
"""

from __future__ import annotations

__all__ = ["Subscriptions"]


class Subscriptions:
    """Open stream subscriptions per queue (only queues with at least one are kept)."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[str, int] = {}

    def opened(self, queue: str) -> None:
        """A subscription to ``queue`` started."""
        self._open[queue] = self._open.get(queue, 0) + 1

    def closed(self, queue: str) -> None:
        """A subscription to ``queue`` ended (one `opened` before it; extra calls ignored)."""
        left = self._open.get(queue, 0) - 1
        if left > 0:
            self._open[queue] = left
        else:
            self._open.pop(queue, None)

    def counts(self) -> dict[str, int]:
        """Queue -> subscriptions open now (a copy)."""
        return dict(self._open)
