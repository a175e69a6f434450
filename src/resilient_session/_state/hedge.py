"""A host's hedging: the recent try latencies ``delay: auto`` reads, and what health counts.

``auto`` hedges a try once it has been out longer than the host's p95 try latency (The Tail at
Scale: a second request after the p95 cut the p99.9 for about 5 % more requests). The p95 is
read from the last ``WINDOW`` tries of the host's hedged calls and never taken below
``FLOOR``. A host that is slow on every try has that slowness as its p95, so ``auto`` then
hedges only the tries slower than most of its own: the budget is not spent on a host that no
second try would answer sooner.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Final

from resilient_session.config.policy import HedgingPolicy

# A try answered within this on a loopback or in-zone hop is never worth a second one.
FLOOR: Final = 0.010
# Tries of the host's hedged calls the p95 is read from: recent, and enough for a p95 (the 13th
# slowest of 256).
WINDOW: Final = 256
# No hedge on ``auto`` before this many tries were seen: a p95 of fewer says nothing.
MIN_SAMPLES: Final = 20
# The p95 is read again every this many tries, not on each: a sort of WINDOW floats.
EVERY: Final = 16


def p95(samples: list[float]) -> float:
    """The 95th percentile of *samples* (nearest rank); *samples* is not empty."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


@dataclass(frozen=True, slots=True)
class HedgeSnapshot:
    """A consistent read of a host's hedging.

    Attributes:
        hedges: hedge tries the guards let through, cancelled ones included.
        wins: calls a hedge answered first.
        cancelled: tries cancelled because another try of their call answered first.
        delay: the wait before a hedge now, in seconds; None while ``auto`` has too few tries.
    """

    hedges: int
    wins: int
    cancelled: int
    delay: float | None


class HedgeState:
    """One host's hedging: its policy, its recent try latencies, its counts.

    Owns one lock, for its own fields only; the p95 is computed outside it.
    """

    def __init__(self, policy: HedgingPolicy) -> None:
        self.policy = policy
        fixed = policy.delay
        self._fixed: float | None = None if fixed == "auto" else float(fixed)
        self._lock = threading.Lock()
        self._samples: list[float] = []
        self._next = 0  # where the next sample goes once the window is full
        self._seen = 0
        self._p95: float | None = None
        self._hedges = 0
        self._wins = 0
        self._cancelled = 0

    def delay(self) -> float | None:
        """Seconds a first try may be out before a hedge follows it; None: no hedge yet
        (``auto`` with fewer than ``MIN_SAMPLES`` tries seen)."""
        if self._fixed is not None:
            return self._fixed
        estimate = self._p95  # one attribute read: a stale estimate is still an estimate
        return None if estimate is None else max(FLOOR, estimate)

    def record(self, seconds: float) -> None:
        """One try's latency, from its send to its answer (or to its cut, a lower bound)."""
        with self._lock:
            samples = self._samples
            if len(samples) < WINDOW:
                samples.append(seconds)
            else:
                samples[self._next] = seconds
                self._next = (self._next + 1) % WINDOW
            self._seen += 1
            seen = self._seen
            due = seen == MIN_SAMPLES or (seen > MIN_SAMPLES and seen % EVERY == 0)
            kept = list(samples) if due else None
        if kept is not None:
            # Sorted outside the lock; a racing update may land first, and either is recent.
            self._p95 = p95(kept)

    def count(self, *, hedges: int = 0, wins: int = 0, cancelled: int = 0) -> None:
        """Add to the counts health shows."""
        with self._lock:
            self._hedges += hedges
            self._wins += wins
            self._cancelled += cancelled

    def after_fork(self) -> None:
        """In a forked child: a fresh lock, as one a parent's thread held stays held there."""
        self._lock = threading.Lock()

    def snapshot(self) -> HedgeSnapshot:
        with self._lock:
            return HedgeSnapshot(self._hedges, self._wins, self._cancelled, self.delay())
