"""`MessageCache`: the recently appended messages of a segment store (`cmq.fsm.framed`), so that
receives rarely read the segment bytes. Bounded by the messages' approximate size, oldest
evicted first. Pure: memory only.
"""

from __future__ import annotations

from collections import OrderedDict

from cmq.fsm.store import StoredMessage

Key = tuple[str, int]
"""A cached message's ``(queue, seq)``."""


class MessageCache:
    """Messages by ``(queue, seq)``, oldest first, their `cost` summed at most ``limit`` (a
    limit of 0 or less caches nothing)."""

    __slots__ = ("_bytes", "_limit", "_messages")

    def __init__(self, limit: int) -> None:
        self._messages: OrderedDict[Key, StoredMessage] = OrderedDict()
        self._bytes = 0
        self._limit = limit

    def get(self, key: Key) -> StoredMessage | None:
        return self._messages.get(key)

    def remember(self, key: Key, message: StoredMessage) -> None:
        """Keep ``message``, evicting the oldest while over the limit."""
        if self._limit <= 0:
            return
        self._messages[key] = message
        self._bytes += cost(message)
        while self._bytes > self._limit and self._messages:
            _, old = self._messages.popitem(last=False)
            self._bytes -= cost(old)

    def forget(self, key: Key) -> None:
        old = self._messages.pop(key, None)
        if old is not None:
            self._bytes -= cost(old)

    def forget_queue(self, queue: str) -> None:
        """Forget every message of ``queue``."""
        for key in [k for k in self._messages if k[0] == queue]:
            self.forget(key)

    def clear(self) -> None:
        self._messages.clear()
        self._bytes = 0


def cost(m: StoredMessage) -> int:
    """Approximate memory of a cached message (body plus a fixed overhead)."""
    return len(m.body) + 256


__all__ = ["MessageCache", "cost"]
