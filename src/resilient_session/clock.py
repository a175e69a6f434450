"""The one injectable source of time: monotonic instants, wall time and sleeping, blocking or
awaited; and the default source of the jitter drawn for waits."""

from __future__ import annotations

import random
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

    async def asleep(self, seconds: float) -> None:
        """Wait *seconds* without blocking the event loop (asyncio or trio): what an async
        caller awaits wherever a sync one would call :meth:`sleep`."""


class SystemClock:
    """The real clock.

    Reading it calls the ``time`` functions themselves; sleeping looks ``time.sleep`` up on
    each call, so a test that patches it sees every sleep. An awaited sleep is anyio's, so it
    works under whichever event loop anyio finds running (asyncio or trio). While
    ``resilient_session.testing.fast()`` is on, it replaces the four methods on the class:
    sleeps are recorded, not slept, and readings move on by them.
    """

    __slots__ = ()

    # The one place real time is read.
    # hot path: system-clock
    monotonic = staticmethod(time.monotonic)  # noqa: TID251
    wall = staticmethod(time.time)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)  # noqa: TID251 - the one place that really sleeps

    async def asleep(self, seconds: float) -> None:
        # anyio comes with the httpx extra and is imported on the first awaited sleep, so
        # `import resilient_session` never loads it, nor an event loop's modules.
        import anyio

        await anyio.sleep(seconds)

    def __reduce__(self) -> str:
        # Unpickles to the shared singleton rather than a copy.
        return "SYSTEM_CLOCK"


SYSTEM_CLOCK = SystemClock()


def let_others_run() -> None:
    """Hand the interpreter to a thread waiting for it, if there is one, and carry on.

    CPython makes a thread that waits for the GIL wait the switch interval (5 ms) before it
    asks the running one to give it up; a thread that runs long Python work in the
    background calls this between pieces of it, so a call that needs the GIL back after each
    socket read does not wait 5 ms each time. Not a wait: ``testing.fast()`` leaves it be.
    """
    time.sleep(0)  # noqa: TID251 - sleeping no time releases the GIL to a waiting thread


# Set by resilient_session.testing.fast() while it is on.
_fixed_seed: int | None = None


def jitter_source() -> random.Random:
    """A new source of jitter, for a session or adapter given none: seeded while
    ``resilient_session.testing.fast()`` is on, so the waits it draws repeat run after run."""
    seed = _fixed_seed
    return random.Random() if seed is None else random.Random(seed)  # noqa: S311 - jitter


def fix_jitter_seed(seed: int | None) -> int | None:
    """Seed every source of jitter made from now on with *seed* (None: unseeded, the
    default); returns the seed in force before."""
    global _fixed_seed
    previous, _fixed_seed = _fixed_seed, seed
    return previous
