"""The counts the happy path keeps without a lock (``_state/counter.py``): exact under many
threads, with reads and the guards' locked paths racing them."""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator

import pytest

from resilient_session._state.breaker import BreakerState, CircuitBreaker, TryResult
from resilient_session._state.budget import TokenBucket
from resilient_session._state.counter import Tally
from resilient_session._state.throttle import AdaptiveThrottle
from resilient_session.config.policy import BreakerPolicy, BudgetPolicy, ThrottlePolicy
from resilient_session.testing import FakeClock
from tests.threads import run_together

THREADS = 16
EACH = 2_000


@pytest.fixture(autouse=True)
def _switch_often() -> Iterator[None]:
    """Threads handed the GIL every microsecond: interleavings a default 5 ms would hide."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def test_a_tally_read_while_threads_add_reads_each_value_once_and_ends_exact():
    """Reads (each under the owner's one lock, as the guards read) never go back and never
    count their own ticks; after 16 x 2,000 adds the count is 32,000."""
    tally = Tally()
    seen: list[int] = []

    def work(index: int) -> None:
        for number in range(EACH):
            next(tally.ticks)
            if index == 0 and number % 100 == 0:
                seen.append(tally.value())

    run_together(THREADS, work)
    assert seen == sorted(seen)
    assert tally.value() == THREADS * EACH
    assert tally.value() == THREADS * EACH


def test_a_breakers_successes_and_failures_all_count_and_a_run_still_opens_it(clock):
    """Successes (lock-free while no run is on) and failures (locked) from 16 threads: every
    try counted; a run of failures that reaches the threshold from one thread still opens it."""
    breaker = CircuitBreaker("h", BreakerPolicy(failure_threshold=10**6), clock, random.Random(0))

    def work(index: int) -> None:
        for number in range(EACH):
            permit, _ = breaker.allow()
            assert permit is not None
            failed = index % 4 == 0 and number % 10 == 0
            breaker.record(permit, TryResult.FAILURE if failed else TryResult.SUCCESS)

    run_together(THREADS, work)
    snapshot = breaker.snapshot()
    assert snapshot.tries == THREADS * EACH
    assert snapshot.failures == 4 * EACH // 10
    assert snapshot.state is BreakerState.CLOSED

    tight = CircuitBreaker("h", BreakerPolicy(failure_threshold=3), clock, random.Random(0))
    for result in (TryResult.SUCCESS, TryResult.FAILURE, TryResult.FAILURE, TryResult.SUCCESS):
        permit, _ = tight.allow()
        assert permit is not None
        tight.record(permit, result)
    for _ in range(3):
        permit, _ = tight.allow()
        assert permit is not None
        tight.record(permit, TryResult.FAILURE)
    assert tight.snapshot().state is BreakerState.OPEN
    assert tight.snapshot().tries == 7


def test_a_full_buckets_deposits_all_count_and_spent_tokens_still_come_back(clock):
    """Deposits into a full bucket (lock-free) and withdrawals (locked) from 16 threads: every
    first try counted, each withdrawal taken or refused, and the bucket full again after the
    deposits that follow the last one (no refill over time: the clock stands still)."""
    bucket = TokenBucket(BudgetPolicy(ratio=0.5, min_per_second=0.0, max_tokens=10.0), clock)

    def work(index: int) -> None:
        for number in range(EACH):
            bucket.deposit()
            if index == 0 and number < 20:
                bucket.try_withdraw()

    run_together(THREADS, work)
    snapshot = bucket.snapshot()
    assert snapshot.first_tries == THREADS * EACH
    assert snapshot.retries + snapshot.exhausted == 20
    assert snapshot.retries >= 10
    assert snapshot.tokens == 10.0


def test_a_throttles_quiet_accepts_all_count_and_failures_still_refuse(clock: FakeClock):
    """Accepts (lock-free within the newest bucket) from 16 threads while one records
    failures and reads the window: every try and accept in it. Then a failing host is
    refused as before: the quiet accepts sit in the window as accepts, nothing more."""
    throttle = AdaptiveThrottle(ThrottlePolicy(window=30.0, min_tries=1), clock, random.Random(0))
    began = clock.monotonic()

    def work(index: int) -> None:
        for number in range(EACH):
            if index == 0 and number % 2:
                throttle.record(False)
                throttle.snapshot()
            else:
                throttle.accepted(began)

    run_together(THREADS, work)
    snapshot = throttle.snapshot()
    assert snapshot.tries == THREADS * EACH
    assert snapshot.accepts == THREADS * EACH - EACH // 2
    assert snapshot.probability == 0.0

    clock.advance(31.0)
    assert throttle.snapshot().tries == 0
    for _ in range(10):
        throttle.accepted(clock.monotonic())
    for _ in range(90):
        throttle.record(False)
    # 100 tries, 10 accepts, k = 2: (100 - 20) / 101 refused.
    assert throttle.snapshot().probability == pytest.approx(80 / 101)


def test_quiet_accepts_of_a_call_begun_buckets_ago_land_in_the_newest_bucket(
    clock: FakeClock,
):
    """A call that began before the window last moved counts its accept in the newest bucket,
    as one counted under the lock would be; a call begun in a newer bucket than the window's
    moves it."""
    throttle = AdaptiveThrottle(ThrottlePolicy(window=2.0, min_tries=1), clock, random.Random(0))
    began = clock.monotonic()
    clock.advance(1.0)
    throttle.record(False)  # moves the window to the second bucket
    throttle.accepted(began)
    assert (throttle.snapshot().tries, throttle.snapshot().accepts) == (2, 1)
    clock.advance(1.0)
    throttle.accepted(clock.monotonic())  # a new bucket: the first falls out of the window
    assert (throttle.snapshot().tries, throttle.snapshot().accepts) == (3, 2)
    clock.advance(1.0)
    assert (throttle.snapshot().tries, throttle.snapshot().accepts) == (1, 1)
