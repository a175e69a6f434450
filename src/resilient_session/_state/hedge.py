"""A host's hedging: the recent try latencies ``delay: auto`` reads, and what health counts.

``auto`` hedges a try once it has been out longer than the host's p95 try latency (The Tail at
Scale: a second request after the p95 cut the p99.9 for about 5 % more requests). The p95 is
read from the first tries of the host's last ``WINDOW`` hedged calls and never taken below
``FLOOR``. A host that is slow on every try has that slowness as its p95, so ``auto`` then
hedges only the tries slower than most of its own: the budget is not spent on a host that no
second try would answer sooner.

What a first try teaches (``learn``) is what it says of the host, not what hedging did to it:

- a hedge's own time is never learned: it started late, on a worker, often on a new
  connection, and a hedge that won says only that its call's first try was slow;
- a first try that was cut because a hedge answered first, or that ran past ``OUTRUN`` times
  its delay with no hedge out against it (none could go: no token, no try number, or none
  was on the wire yet), is one of the slow tries hedging exists to cut: it is learned as the
  delay it outlasted, not as its time. A hedge sent at the delay answers within the delay 95 %
  of the time (the delay is the p95), so such a try is one a hedge would have beaten. Counted
  at the delay, it still holds the p95 up where 5 % of tries outlast it (left out, the window
  would hold only the tries that answered before a hedge could, and the p95 would sink
  towards the floor); it never pulls the p95 above the delay, so slow tries bunching in a
  window, or going unhedged while tokens are short, cannot lift the delay to their own
  slowness, which would stop hedging them;
- any other first try that ended on its own is learned as measured: one that answered within
  ``OUTRUN`` times its delay is the host's ordinary spread (the machine's own load included),
  and one that answered first while a hedge was out against it shows that a second try does
  not answer sooner (this is how ``auto`` rises to a host that turned slow on every try);
- a first try the deadline cut before its delay says only that it lasted that long: not
  learned.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import deque
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
# A first try that ran past this many times its delay with no hedge out against it is learned
# as the delay: a hedge sent at the delay would have answered first (the module's docstring).
OUTRUN: Final = 2.0


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
    """One host's hedging: its policy, its recent first-try latencies, its counts.

    The latencies are learned on every hedged call without a lock: a deque's append and a
    count's next are each one call into C, which the GIL runs whole (every caller of a busy
    session would otherwise queue on one lock once a call). The p95 is read from a copy. The
    counts health shows sit under the one lock, taken by hedged tries only.
    """

    def __init__(self, policy: HedgingPolicy) -> None:
        self.policy = policy
        fixed = policy.delay
        self._fixed: float | None = None if fixed == "auto" else float(fixed)
        self._lock = threading.Lock()
        self._samples: deque[float] = deque(maxlen=WINDOW)
        self._numbers = itertools.count(1)  # the number of each latency learned, from 1
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

    def delay_for(self, policy: HedgingPolicy) -> float | None:
        """The delay of a call hedged under *policy*: the host's own (``delay()``) unless the
        call's settings (``resilience=``, ``settings()``) set another; ``auto`` reads the
        latencies this host learns, which a host with a fixed delay never does (None)."""
        delay = policy.delay
        if delay == self.policy.delay:
            return self.delay()
        if delay == "auto":
            estimate = self._p95
            return None if estimate is None else max(FLOOR, estimate)
        return float(delay)

    def learn(self, seconds: float, delay: float | None, *, raced: bool, cut: bool) -> None:
        """What a hedged call's first try says of the host (the module's docstring has the
        rules): it took *seconds*, under *delay* (None: no hedge could follow it); *raced*
        when a hedge was out against it as it answered; *cut* when it did not end on its own
        (a hedge answered first, or the deadline ended it)."""
        if self._fixed is not None:
            return  # a fixed delay reads no latency
        if delay is not None and seconds >= delay:
            if cut or (not raced and seconds > OUTRUN * delay):
                seconds = delay
        elif cut:
            return
        self.record(seconds)

    def record(self, seconds: float) -> None:
        """One latency into the window the p95 is read from."""
        samples = self._samples
        samples.append(seconds)
        number = next(self._numbers)
        if number == MIN_SAMPLES or (number > MIN_SAMPLES and number % EVERY == 0):
            # A copy made whole under the GIL; another thread's reading may land first, and
            # either is recent.
            self._p95 = p95(list(samples))

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
