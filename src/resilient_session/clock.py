"""The one injectable source of time: monotonic instants, wall time and sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """What the pipeline needs of time; tests pass a ``testing.FakeClock``."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back: deadlines, breaker timers, refills."""

    def wall(self) -> float:
        """Epoch seconds: only for Retry-After HTTP-dates."""

    def sleep(self, seconds: float) -> None:
        """Block for *seconds*."""


class SystemClock:
    """The real clock."""

    __slots__ = ()

    def monotonic(self) -> float:
        return time.monotonic()  # noqa: TID251 - this is the one place real time is read

    def wall(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)  # noqa: TID251 - this is the one place that really sleeps

    def __reduce__(self) -> str:
        # Unpickles to the shared singleton rather than a copy.
        return "SYSTEM_CLOCK"


SYSTEM_CLOCK = SystemClock()
