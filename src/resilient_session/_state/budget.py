"""The per-host retry budget: a token bucket that first tries fill and retries drain."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from resilient_session.clock import Clock
from resilient_session.config.policy import BudgetPolicy

from .counter import Tally

# Ten deposits of 0.1 sum to 0.9999999999999999; they must still buy one retry.
_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class BudgetSnapshot:
    """A consistent read of a bucket."""

    tokens: float
    first_tries: int
    retries: int
    exhausted: int


class TokenBucket:
    """Each first try deposits ``ratio`` tokens, each retry withdraws one whole token.

    ``min_per_second`` refills a small reserve over time and ``max_tokens`` caps bursts, so
    over any stretch of time: retries <= ratio * first_tries + max_tokens
    + min_per_second * elapsed. In a full outage the upstream sees about (1 + ratio) tries
    per logical call, however many attempts a caller allows.
    """

    def __init__(self, policy: BudgetPolicy, clock: Clock) -> None:
        self._policy = policy
        self._max_tokens = policy.max_tokens
        self._ratio = policy.ratio
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = float(policy.max_tokens)
        self._refilled_at = clock.monotonic()
        # Counted without the lock (counter.py): a deposit into a full bucket takes none.
        self._first_tries = Tally()
        self._retries = 0
        self._exhausted = 0

    def deposit(self) -> None:
        """Credit one first try."""
        next(self._first_tries.ticks)
        # A full bucket, the usual case, has nothing to gain, and is told without the lock: a
        # withdrawal racing this read lands after the deposit, which a full bucket could not
        # have kept either. Leaving the refill time behind is harmless because every
        # withdrawal refills first.
        # hot path: lock-free-counts
        if self._tokens < self._max_tokens:
            with self._lock:
                self._refill()
                self._tokens = min(self._max_tokens, self._tokens + self._ratio)

    def try_withdraw(self) -> bool:
        """Take one token for a retry; False, and nothing taken, when less than one is left."""
        with self._lock:
            self._refill()
            if self._tokens < 1.0 - _EPSILON:
                self._exhausted += 1
                return False
            self._tokens = max(0.0, self._tokens - 1.0)
            self._retries += 1
            return True

    def refund(self) -> None:
        """Give back the token of a retry that was withdrawn for but did not happen."""
        with self._lock:
            self._tokens = min(self._max_tokens, self._tokens + 1.0)
            self._retries -= 1

    def _refill(self) -> None:
        now = self._clock.monotonic()
        rate = self._policy.min_per_second
        if rate and now > self._refilled_at:
            self._tokens = min(
                self._policy.max_tokens, self._tokens + (now - self._refilled_at) * rate
            )
        self._refilled_at = max(now, self._refilled_at)

    def after_fork(self) -> None:
        """In a forked child: a fresh lock, as one a parent's thread held stays held there."""
        self._lock = threading.Lock()

    def snapshot(self) -> BudgetSnapshot:
        with self._lock:
            self._refill()
            return BudgetSnapshot(
                self._tokens, self._first_tries.value(), self._retries, self._exhausted
            )
