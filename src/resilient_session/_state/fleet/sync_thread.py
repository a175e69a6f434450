"""The redis backend's sync thread: when to sync, never what a sync does."""

from __future__ import annotations

import contextlib
import math
import threading
import weakref
from typing import Final, Protocol

from resilient_session.clock import SYSTEM_CLOCK

# Syncs that a failure triggers come at most this often: a host failing at random keeps
# failing, and the thread must not spin on the interpreter lock the callers need.
URGENT_GAP: Final = 0.005


class Synced(Protocol):
    """What the thread needs of the backend it serves."""

    @property
    def degraded(self) -> bool: ...

    @property
    def hurried(self) -> bool:
        """A breaker opened since the last sync began: it goes out now, gap or not."""

    def serves(self, wake: threading.Event) -> bool:
        """True while the backend is open and still wakes this thread with *wake*."""

    def sync(self) -> None:
        """One round trip; never raises for a Redis error."""


def run(ref: weakref.ref[Synced], wake: threading.Event, interval: float) -> None:
    """Sync every *interval* seconds, and soon after *wake* is set; while degraded, every half
    interval whatever wakes it. Ends when the backend is closed, replaced (a forked child
    starts its own thread) or collected."""
    clock = SYSTEM_CLOCK
    next_tick = clock.monotonic()
    last_sync = -math.inf
    while True:
        backend = ref()
        if backend is None or not backend.serves(wake):
            return
        degraded = backend.degraded
        # Not held while waiting, so a session dropped without close() is still collected.
        del backend
        now = clock.monotonic()
        due = next_tick
        if degraded:
            # Redis is back within half an interval of returning, ticks or not: a worker
            # follows the fleet again within one sync interval.
            due = min(due, last_sync + interval / 2)
        if now < due:
            woke = wake.wait(due - now)
            now = clock.monotonic()
            if woke and now < due:
                if degraded:
                    # Redis is out of reach: retry on schedule, not on every failure.
                    wake.clear()
                    continue
                if now - last_sync < URGENT_GAP and not _hurried(ref):
                    wake.clear()
                    wake.wait(URGENT_GAP - (now - last_sync))
                    now = clock.monotonic()
        wake.clear()
        backend = ref()
        if backend is None or not backend.serves(wake):
            return
        # sync() catches every Redis error itself; the thread must outlive any other surprise.
        with contextlib.suppress(Exception):
            backend.sync()
        del backend
        last_sync = now
        if now >= next_tick:
            next_tick += interval * (math.floor((now - next_tick) / interval) + 1)


def _hurried(ref: weakref.ref[Synced]) -> bool:
    backend = ref()
    return backend is not None and backend.hurried
