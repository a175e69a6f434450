"""The retry budget: its guaranteed bound, refill, cap, and exact counts under threads."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from resilient_session._state.budget import TokenBucket
from resilient_session.config.policy import BudgetPolicy
from resilient_session.testing import FakeClock
from tests.threads import run_together


def test_starts_full_and_drains():
    """A new bucket holds max_tokens; with no deposits or refill, that many retries pass."""
    bucket = TokenBucket(BudgetPolicy(ratio=0, min_per_second=0, max_tokens=3), FakeClock())
    assert [bucket.try_withdraw() for _ in range(4)] == [True, True, True, False]
    assert bucket.snapshot().exhausted == 1


def test_first_tries_deposit_ratio():
    """Ten first tries at ratio 0.1 earn exactly one retry."""
    bucket = TokenBucket(BudgetPolicy(ratio=0.1, min_per_second=0, max_tokens=1), FakeClock())
    assert bucket.try_withdraw()
    for _ in range(9):
        bucket.deposit()
    assert not bucket.try_withdraw()
    bucket.deposit()
    assert bucket.try_withdraw()


def test_refill_over_time_and_cap():
    """min_per_second refills over time but never past max_tokens."""
    clock = FakeClock()
    bucket = TokenBucket(BudgetPolicy(ratio=0, min_per_second=2, max_tokens=4), clock)
    for _ in range(4):
        assert bucket.try_withdraw()
    clock.advance(0.5)
    assert bucket.snapshot().tokens == 1.0
    clock.advance(100)
    assert bucket.snapshot().tokens == 4.0


def test_idle_full_bucket_bursts_no_more_than_max_tokens():
    """Deposits into a full bucket over a long idle stretch add nothing to the next burst."""
    clock = FakeClock()
    bucket = TokenBucket(BudgetPolicy(ratio=0.5, min_per_second=1, max_tokens=3), clock)
    for _ in range(100):
        clock.advance(10)
        bucket.deposit()
    assert [bucket.try_withdraw() for _ in range(4)] == [True, True, True, False]
    clock.advance(1.0)
    assert bucket.try_withdraw()
    assert not bucket.try_withdraw()
    assert bucket.snapshot().first_tries == 100


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("first"), st.just(0.0)),
        st.tuples(st.just("retry"), st.just(0.0)),
        st.tuples(st.just("wait"), st.floats(min_value=0, max_value=5)),
    ),
    max_size=300,
)


@settings(max_examples=300, deadline=None)
@given(
    ops=OPERATIONS,
    ratio=st.floats(min_value=0, max_value=1),
    rate=st.floats(min_value=0, max_value=3),
    cap=st.floats(min_value=1, max_value=20),
)
def test_retries_never_exceed_the_bound(ops, ratio, rate, cap):
    """Over any sequence: retries <= ratio * first_tries + max_tokens + min_per_second * elapsed."""
    clock = FakeClock()
    bucket = TokenBucket(BudgetPolicy(ratio=ratio, min_per_second=rate, max_tokens=cap), clock)
    first_tries = retries = 0
    elapsed = 0.0
    for op, seconds in ops:
        if op == "first":
            bucket.deposit()
            first_tries += 1
        elif op == "retry":
            retries += bucket.try_withdraw()
        else:
            clock.advance(seconds)
            elapsed += seconds
        tokens = bucket.snapshot().tokens
        assert 0 <= tokens <= cap
        assert retries <= ratio * first_tries + cap + rate * elapsed + 1e-9


def test_hammer_exact_counts():
    """16 threads x 1,000 withdrawals on a frozen clock take exactly max_tokens tokens."""
    bucket = TokenBucket(BudgetPolicy(ratio=0, min_per_second=0, max_tokens=500), FakeClock())
    won = [0] * 16

    def work(index: int) -> None:
        for _ in range(1000):
            won[index] += bucket.try_withdraw()

    run_together(16, work)
    snap = bucket.snapshot()
    assert (sum(won), snap.retries, snap.exhausted, snap.tokens) == (500, 500, 15_500, 0.0)


def test_hammer_deposits_and_withdrawals():
    """Concurrent deposits and withdrawals keep the bound and the counts consistent."""
    bucket = TokenBucket(BudgetPolicy(ratio=0.5, min_per_second=0, max_tokens=10), FakeClock())

    def work(index: int) -> None:
        for _ in range(1000):
            if index % 2:
                bucket.deposit()
            else:
                bucket.try_withdraw()

    run_together(16, work)
    snap = bucket.snapshot()
    assert snap.first_tries == 8000
    assert snap.retries + snap.exhausted == 8000
    assert snap.retries <= 0.5 * 8000 + 10
    assert 0 <= snap.tokens <= 10
