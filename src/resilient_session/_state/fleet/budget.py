"""The retry budget a fleet shares: this worker's share of one bucket, spent locally."""

from __future__ import annotations

import math

from resilient_session._state.budget import TokenBucket
from resilient_session.clock import Clock
from resilient_session.config.policy import BudgetPolicy


class FleetBucket(TokenBucket):
    """A retry budget that is this worker's share of the fleet's one bucket.

    Deposits and withdrawals are counted as the memory bucket counts them; the sync thread
    sends what was counted since the last exchange and sets the tokens to this worker's share
    of the fleet's, plus what happened here in the meantime.
    """

    def __init__(self, policy: BudgetPolicy, clock: Clock) -> None:
        super().__init__(policy, clock)
        self._sent_first_tries = 0
        self._sent_retries = 0

    def exchange(self) -> tuple[int, int]:
        """``(deposits, withdrawals)`` since the last exchange; a refund counts as -1."""
        with self._lock:
            first_tries = self._first_tries.value()
            deposits = first_tries - self._sent_first_tries
            withdrawals = self._retries - self._sent_retries
            self._sent_first_tries = first_tries
            self._sent_retries = self._retries
            return deposits, withdrawals

    def unsend(self, deposits: int, withdrawals: int) -> None:
        """Put back counts whose sync failed, to go out with the next one."""
        with self._lock:
            self._sent_first_tries -= deposits
            self._sent_retries -= withdrawals

    def adopt(self, fleet_tokens: float, workers: int) -> None:
        """Hold this worker's share of the fleet's *fleet_tokens*, split among *workers*."""
        with self._lock:
            since = (self._first_tries.value() - self._sent_first_tries) * self._ratio - (
                self._retries - self._sent_retries
            )
            share = fleet_tokens / max(1, workers)
            if math.isnan(share):
                return
            self._tokens = min(self._max_tokens, max(0.0, share + since))
            self._refilled_at = max(self._clock.monotonic(), self._refilled_at)
