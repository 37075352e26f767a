"""Time as an injectable port, so the core never reads the wall clock itself.

Pure (the real clock only reads ``time.monotonic``).
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Monotonic time in seconds, injected so tests move it by hand."""

    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic``."""

    def now(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds
