"""The adaptive throttle a fleet shares: a window that also holds the other workers' tries."""

from __future__ import annotations

import random

from resilient_session.clock import Clock
from resilient_session.policy import ThrottlePolicy

from .throttle import AdaptiveThrottle, ThrottleSnapshot


class FleetThrottle(AdaptiveThrottle):
    """An adaptive throttle whose window also holds the other workers' tries and accepts.

    The refusal chance is computed over this worker's window plus the rest of the fleet's, as
    of the last exchange; without the fleet it is the memory throttle's.
    """

    __slots__ = ("_others_accepts", "_others_tries", "_sent_accepts", "_sent_tries")

    def __init__(self, policy: ThrottlePolicy, clock: Clock, rng: random.Random) -> None:
        super().__init__(policy, clock, rng)
        self._others_tries = 0
        self._others_accepts = 0
        self._sent_tries = 0
        self._sent_accepts = 0

    @property
    def width(self) -> float:
        """Seconds per bucket of the window."""
        return self._width

    @property
    def buckets(self) -> int:
        """Buckets in the window."""
        return self._buckets

    def ask(self) -> float | None:
        with self._lock:
            now = self._clock.monotonic() // self._width
            if now > self._newest:
                self._slide(int(now))
            tries = self._total_tries + self._others_tries
            if tries < self._min_tries:
                return None
            excess = tries - self._k * (self._total_accepts + self._others_accepts)
            if excess <= self._slack:
                return None
            probability = excess / (tries + 1)
            if self._rng.random() >= probability:
                return None
            self._throttled += 1
            return probability

    def record(self, accepted: bool) -> None:
        with self._lock:
            now = self._clock.monotonic() // self._width
            if now > self._newest:
                self._slide(int(now))
            index = self._newest % self._buckets
            self._tries[index] += 1
            self._total_tries += 1
            self._sent_tries += 1
            if accepted:
                self._accepts[index] += 1
                self._total_accepts += 1
                self._sent_accepts += 1

    def reset(self) -> None:
        super().reset()
        with self._lock:
            self._others_tries = self._others_accepts = 0

    def snapshot(self) -> ThrottleSnapshot:
        with self._lock:
            self._slide(int(self._clock.monotonic() // self._width))
            tries = self._total_tries + self._others_tries
            accepts = self._total_accepts + self._others_accepts
            return ThrottleSnapshot(
                self._probability(tries, accepts), tries, accepts, self._throttled
            )

    def exchange(self) -> tuple[int, int, int, int]:
        """``(tries, accepts)`` counted since the last exchange, then this worker's window
        totals ``(tries, accepts)``, which the fleet's include."""
        with self._lock:
            tries, accepts = self._sent_tries, self._sent_accepts
            self._sent_tries = self._sent_accepts = 0
            return tries, accepts, self._total_tries, self._total_accepts

    def unsend(self, tries: int, accepts: int) -> None:
        """Put back counts whose sync failed, to go out with the next one."""
        with self._lock:
            self._sent_tries += tries
            self._sent_accepts += accepts

    def adopt(self, fleet_tries: int, fleet_accepts: int, own_tries: int, own_accepts: int) -> None:
        """Count the fleet's window, less this worker's own share of it (*own_*), as others'."""
        with self._lock:
            self._others_tries = max(0, fleet_tries - own_tries)
            self._others_accepts = max(0, fleet_accepts - own_accepts)

    def isolate(self) -> None:
        """The fleet is out of reach: refuse from this worker's own window only."""
        with self._lock:
            self._others_tries = self._others_accepts = 0
