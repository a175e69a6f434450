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
    """The real clock.

    Reading it calls the ``time`` functions themselves, so the hot path pays no Python frame
    for it; sleeping looks ``time.sleep`` up on each call, so a test that patches it sees
    every sleep.
    """

    __slots__ = ()

    # The one place real time is read.
    monotonic = staticmethod(time.monotonic)  # noqa: TID251
    wall = staticmethod(time.time)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)  # noqa: TID251 - the one place that really sleeps

    def __reduce__(self) -> str:
        # Unpickles to the shared singleton rather than a copy.
        return "SYSTEM_CLOCK"


SYSTEM_CLOCK = SystemClock()
