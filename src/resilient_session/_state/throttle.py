"""The per-host adaptive throttle: tries and accepts over a sliding window, behind one lock."""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass

from resilient_session.clock import Clock
from resilient_session.config.policy import ThrottlePolicy

from .counter import Tally

# The window is kept as a ring of fixed buckets, so memory is fixed and expiry costs one
# bucket per bucket-width of time. One bucket per second up to this many, wider beyond: a day's
# window in 120 buckets of 12 minutes reacts no worse than the day it spans.
_MAX_BUCKETS = 120


@dataclass(frozen=True, slots=True)
class ThrottleSnapshot:
    """A consistent read of a throttle: the refusal chance now and the counts behind it."""

    probability: float
    tries: int
    accepts: int
    throttled: int


class AdaptiveThrottle:
    """Client-side throttling (Google SRE book, "Handling Overload"): over the last ``window``
    seconds, a try is refused with probability ``max(0, (tries - k * accepts) / (tries + 1))``.

    ``tries`` counts the tries sent and answered, ``accepts`` those the host answered without
    failing; both are counted when the answer comes, so tries in flight never read as failures
    (a cold burst of 64 calls to a healthy host would otherwise hold 64 tries and no accept,
    and refuse nearly all of them).

    Tries refused here are counted apart (``throttled``), not in ``tries``, unlike the SRE
    book's client, which was made for a backend that rejects from overload and accepts more
    as the load falls. A host that fails a fixed share of tries at random accepts less as it
    is sent less: counting refusals as tries then feeds on itself, and over five minutes at
    100 tries a second a host failing 90 % of tries got over 99.5 % refused, one failing 70 %
    96-99 %, one failing 50 % drifted to 4-34 %. Counted apart, the refusal chance settles at
    ``1 - k * accepted share``: 80 % at 90 % failures, 40 % at 70 %, about 1 % at 50 %.

    A try counts for between ``window`` minus one bucket (a second, for windows up to two
    minutes) and ``window`` seconds: the window moves a bucket at a time.

    A try is refused only while the host stays over the line even were this try accepted,
    ``tries + 1 > k * (accepts + 1)``: a host failing exactly ``1 - 1/k`` of its tries, evenly
    spread, is up to ``k - 1`` tries over the line right after a failure, and the bare formula
    would refuse about one in ``tries`` of the tries that follow one (the retries, mostly).
    """

    # Slots: a registry keeps one throttle per host, up to a million of them.
    __slots__ = (
        "_accepts",
        "_buckets",
        "_clock",
        "_folded",
        "_k",
        "_lock",
        "_min_tries",
        "_newest",
        "_others_accepts",
        "_others_tries",
        "_quiet",
        "_rng",
        "_sent_accepts",
        "_sent_tries",
        "_slack",
        "_throttled",
        "_total_accepts",
        "_total_tries",
        "_tries",
        "_width",
        "may_refuse",
    )

    def __init__(self, policy: ThrottlePolicy, clock: Clock, rng: random.Random) -> None:
        self._k = policy.k
        self._slack = policy.k - 1.0
        self._min_tries = policy.min_tries
        self._clock = clock
        self._rng = rng
        self._lock = threading.Lock()
        buckets = min(_MAX_BUCKETS, max(1, math.ceil(policy.window)))
        self._buckets = buckets
        self._width = policy.window / buckets
        self._tries = [0] * buckets
        self._accepts = [0] * buckets
        # The absolute number of the newest bucket (time // width); buckets older than
        # ``buckets`` behind it have been emptied.
        self._newest = int(clock.monotonic() // self._width)
        self._total_tries = 0
        self._total_accepts = 0
        self._throttled = 0
        # The rest of a fleet's window, as of its last exchange, and what this throttle has
        # counted since: zero and unread without a shared state backend (_state/fleet/throttle).
        self._others_tries = 0
        self._others_accepts = 0
        self._sent_tries = 0
        self._sent_accepts = 0
        # Accepted tries of calls that began in the newest bucket, counted without the lock or
        # the clock (counter.py) and folded into that bucket by the next step under the lock.
        self._quiet = Tally()
        self._folded = 0
        # Whether the window holds more failures than ``k - 1``, the least excess a refusal
        # needs: while it does not, no try can be refused, and the throttle stage skips
        # ask(). Kept by whatever changes the failures, under the lock; read without it, as
        # ask()'s own test was.
        # hot path: throttle-gate
        self.may_refuse = False

    def ask(self) -> float | None:
        """Ask to send one try: None lets it go; a refused try is counted in ``throttled``,
        and gets back the chance it was refused at."""
        # Without the lock or the clock: the window's failures (tries less accepts) bound the
        # excess (k >= 1) and a slide only lowers them, so at most ``k - 1`` of them no slide
        # could bring a refusal. A record racing this read lets at most that one try through.
        # hot path: throttle-gate
        if not self.may_refuse:
            return None
        with self._lock:
            self._fold()
            # The slide and the two checks spelled out: this runs on every try.
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
            # Drawn only when a refusal is possible, so a healthy host leaves the session's
            # random sequence (the backoff jitter) exactly as it would be without a throttle.
            if self._rng.random() >= probability:
                return None
            self._throttled += 1
            return probability

    def accepted(self, began: float) -> None:
        """Count a sent try the host answered without failing, of a call that began at
        *began* (this throttle's clock): while that is in the newest bucket, without the lock
        or a clock read. An accept changes no failure count, so may_refuse stays as it is."""
        # hot path: lock-free-counts
        if began // self._width <= self._newest:
            next(self._quiet.ticks)
        else:
            self.record(True)

    def record(self, accepted: bool) -> None:
        """Count one sent try the host answered; *accepted* unless it failed (5xx, 429, a
        transport error or a timeout)."""
        # hot path: explicit-lock
        lock = self._lock
        lock.acquire()
        try:
            now = self._clock.monotonic() // self._width
            if now > self._newest:
                self._slide(int(now))
            index = self._newest % self._buckets
            self._tries[index] += 1
            self._total_tries += 1
            self._sent_tries += 1
            if accepted:
                # A success adds a try and an accept: the failures, and so may_refuse, stay.
                self._accepts[index] += 1
                self._total_accepts += 1
                self._sent_accepts += 1
            else:
                self._weigh()
        finally:
            lock.release()

    def reset(self) -> None:
        """Empty the window: the host was just proven healthy. The refusal count stays."""
        with self._lock:
            self._fold()
            self._tries = [0] * self._buckets
            self._accepts = [0] * self._buckets
            self._total_tries = self._total_accepts = 0
            self._others_tries = self._others_accepts = 0
            self.may_refuse = False

    def _weigh(self) -> None:
        """Set may_refuse from the window's failures (the lock held)."""
        self.may_refuse = (
            self._total_tries + self._others_tries - self._total_accepts - self._others_accepts
            > self._slack
        )

    def after_fork(self) -> None:
        """In a forked child: a fresh lock, as one a parent's thread held stays held there."""
        self._lock = threading.Lock()

    def snapshot(self) -> ThrottleSnapshot:
        with self._lock:
            self._fold()
            self._slide(int(self._clock.monotonic() // self._width))
            tries = self._total_tries + self._others_tries
            accepts = self._total_accepts + self._others_accepts
            return ThrottleSnapshot(
                self._probability(tries, accepts), tries, accepts, self._throttled
            )

    def _probability(self, tries: int, accepts: int) -> float:
        if tries < self._min_tries:
            return 0.0
        excess = tries - self._k * accepts
        if excess <= self._slack:
            return 0.0
        return excess / (tries + 1)

    def _fold(self) -> None:
        """Count the quiet accepts in the newest bucket (the lock held)."""
        quiet = self._quiet.value() - self._folded
        if quiet:
            self._folded += quiet
            index = self._newest % self._buckets
            self._tries[index] += quiet
            self._accepts[index] += quiet
            self._total_tries += quiet
            self._total_accepts += quiet
            self._sent_tries += quiet
            self._sent_accepts += quiet

    def _slide(self, now: int) -> None:
        """Move the window up to bucket *now*, emptying the buckets that fell out of it."""
        newest = self._newest
        if now <= newest:
            # Still the newest bucket (or a clock that stepped back, kept in it).
            return
        # The quiet accepts came while the newest bucket was the newest: theirs.
        self._fold()
        buckets = self._buckets
        if now - newest >= buckets:
            self._tries = [0] * buckets
            self._accepts = [0] * buckets
            self._total_tries = self._total_accepts = 0
        else:
            tries, accepts = self._tries, self._accepts
            for number in range(newest + 1, now + 1):
                index = number % buckets
                self._total_tries -= tries[index]
                self._total_accepts -= accepts[index]
                tries[index] = accepts[index] = 0
        self._newest = now
        self._weigh()
