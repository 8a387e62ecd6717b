"""Bounded logging of refusals: a flood of bad frames costs a few event lines, not megabytes.

Every refused frame used to write its own event (~200 bytes): 100,000 junk frames made a
20 MB events file. An :class:`EventLimiter` logs the first :data:`PER_KEY` refusals of
each (peer, reason) in a window in full, and at most :data:`TOTAL` full lines per window
over all keys; the rest are only counted. When the window ends (the next refusal after
it, or :meth:`EventLimiter.tick`, which the broker calls every heartbeat interval), one
line per key that lost some says how many: the same event with ``suppressed=N`` and
``window_s``. So a flood from one peer costs at most ``PER_KEY + 1`` lines a window, and
one from many connections (each a new routing id) at most ``TOTAL + KEYS`` lines.

The counts are exact: full lines plus every ``suppressed`` add up to the refusals.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from runtime.events import log

PER_KEY = 20
"""Full lines per (peer, reason) in one window: enough to see what a peer sends wrong
(the fuzz tests feed fewer than this per key and expect every refusal logged whole)."""
TOTAL = 200
"""Full lines per window over all keys: bounds a flood from many fresh connections."""
KEYS = 256
"""Keys counted apart in one window; refusals past this many keys are counted under the
peer ``*`` with their reason (routing ids are chosen by whoever connects)."""
WINDOW_S = 10.0
"""Seconds between summaries: a flood writes a few lines every ten seconds."""
PEER_CHARS = 64
"""Longest peer label logged (a routing id may be 255 bytes)."""


class EventLimiter:
    """Logs ``event`` (a warning) for refusals, limited per (peer, reason) and per window."""

    def __init__(
        self,
        event: str,
        names: tuple[str, str] = ("peer", "reason"),
        *,
        per_key: int = PER_KEY,
        total: int = TOTAL,
        keys: int = KEYS,
        window_s: float = WINDOW_S,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.event = event
        self.names = names
        """The fields a key's two parts are logged as."""
        self.per_key, self.total, self.keys, self.window_s = per_key, total, keys, window_s
        self._now = now
        self._started: float | None = None
        """When this window began (at its first refusal or tick: ``now`` may need a
        running event loop, which the limiter's maker may not have yet)."""
        self._logged: dict[tuple[str, str], int] = {}
        self._suppressed: dict[tuple[str, str], int] = {}
        self._full = 0
        self.logged = 0
        """Full lines written since this limiter was made."""
        self.suppressed = 0
        """Refusals only counted since this limiter was made."""

    def __call__(self, peer: str, reason: str, **fields: Any) -> None:
        """One refusal of ``reason`` from ``peer`` (logged as :attr:`names`); ``fields``
        go into its full line."""
        self.tick()
        peer = peer[:PEER_CHARS]
        key = (peer, reason)
        seen = self._logged.get(key, 0)
        if seen < self.per_key and self._full < self.total and self._room(key):
            self._logged[key] = seen + 1
            self._full += 1
            self.logged += 1
            log.warning(self.event, **dict(zip(self.names, key, strict=True)), **fields)
            return
        if key not in self._suppressed and not self._room(key):
            key = ("*", reason)
        self._suppressed[key] = self._suppressed.get(key, 0) + 1
        self.suppressed += 1

    def _room(self, key: tuple[str, str]) -> bool:
        known = key in self._logged or key in self._suppressed
        return known or len(self._logged) + len(self._suppressed) < self.keys

    def tick(self) -> None:
        """End the window if it is over: write its summaries and start a fresh one."""
        now = self._now()
        if self._started is None:
            self._started = now
        elif now - self._started >= self.window_s:
            self.flush()

    def flush(self) -> None:
        """Write one summary line per key that had refusals left out; start a new window."""
        now = self._now()
        window = round(now - (self._started if self._started is not None else now), 3)
        for key, count in self._suppressed.items():
            log.warning(
                self.event,
                **dict(zip(self.names, key, strict=True)),
                suppressed=count,
                window_s=window,
            )
        self._logged.clear()
        self._suppressed.clear()
        self._full = 0
        self._started = now
