"""Test-only clock faults of a running node: ``CMQ_CLOCK_FILE`` names a JSON file holding
``{"offset_ms": int, "drift_ppm": float}``; this node's clock (`cmq.routing.clock.NodeClock`)
adds the offset plus the drift accumulated since the file last changed. The file is re-read at
most once a second (on a clock reading), so a test or the chaos runner can jump or drift the
clock of a live process. Unset in production. A missing file means no fault; an unreadable or
malformed one leaves the last good setting in force (a half-written file must not jump the clock).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import msgspec

CLOCK_FILE_ENV = "CMQ_CLOCK_FILE"
REREAD_SECONDS = 1.0


class ClockSetting(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The file's content: a fixed offset and a drift rate (parts per million of elapsed time;
    positive: the clock runs fast)."""

    offset_ms: int = 0
    drift_ppm: float = 0.0


_decoder = msgspec.json.Decoder(ClockSetting)


@dataclass(slots=True)
class FileClock:
    """The offset a ``CMQ_CLOCK_FILE`` file imposes, re-read at most once a second."""

    path: str
    setting: ClockSetting = field(default_factory=ClockSetting)
    since: float = 0.0
    """Monotonic time the current setting took effect (its drift counts from there)."""
    base_ms: float = 0.0
    """Drift accumulated under earlier settings (kept: a changed rate does not jump back)."""
    raw: bytes = b""
    next_read: float = 0.0
    monotonic: Callable[[], float] = time.monotonic
    """The node's monotonic clock (seconds): the drift counts on it, re-reads are timed by it."""

    def offset_ms(self) -> int:
        """The offset to add to the wall clock now."""
        now = self.monotonic()
        if now >= self.next_read:
            self.next_read = now + REREAD_SECONDS
            self._reload(now)
        drift = self.setting.drift_ppm * 1e-6 * (now - self.since) * 1000.0
        return self.setting.offset_ms + round(self.base_ms + drift)

    def _reload(self, now: float) -> None:
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raw = b'{"offset_ms": 0, "drift_ppm": 0}'
        except OSError:
            return
        if raw == self.raw:
            return
        try:
            setting = _decoder.decode(raw)
        except msgspec.DecodeError:
            return
        if setting.drift_ppm == 0:
            self.base_ms = 0.0  # a setting without drift: the clock is exactly wall + offset
        else:
            self.base_ms += self.setting.drift_ppm * 1e-6 * (now - self.since) * 1000.0
        self.raw, self.setting, self.since = raw, setting, now


def from_environment(
    environ: Mapping[str, str], monotonic: Callable[[], float]
) -> FileClock | None:
    """The `FileClock` ``CMQ_CLOCK_FILE`` names in ``environ``, or None when it is unset."""
    path = environ.get(CLOCK_FILE_ENV, "")
    return FileClock(path, monotonic=monotonic) if path else None
