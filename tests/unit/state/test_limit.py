"""The concurrency limit: AIMD on the fake clock, waits against the deadline, and many threads."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import replace
from typing import Any

import pytest

from resilient_session._pipeline.attempt import Attempt, Outcome
from resilient_session._pipeline.stages.limit import limit_concurrency
from resilient_session._state.limit import ConcurrencyLimit, LimitSnapshot, Signal, waiter_for
from resilient_session.clock import SYSTEM_CLOCK
from resilient_session.config.policy import LimitPolicy
from resilient_session.testing import FakeClock, build_response
from tests.threads import run_together

HOST = "http://svc.test:80"


def make(clock: FakeClock, **policy: Any) -> ConcurrencyLimit:
    """A limit whose burst is off unless asked for (``initial_burst`` = ``initial``): the tests
    of AIMD and of waiting start from a host that gets no more than ``initial`` at first."""
    policy.setdefault("initial_burst", policy.get("initial", LimitPolicy().initial))
    return ConcurrencyLimit(HOST, LimitPolicy(**policy), clock)


def hold(limit: ConcurrencyLimit, count: int) -> None:
    for _ in range(count):
        assert limit.acquire(None)


def cycle(limit: ConcurrencyLimit, signal: Signal) -> None:
    """One more try in flight beside those held, ended with *signal*."""
    assert limit.acquire(None)
    limit.release(signal)


def test_after_fork_frees_every_slot_and_the_lock_and_keeps_the_limit(clock):
    """In a forked child, the slots the parent's tries held and a lock held at the fork are
    free: with every slot taken and the lock held, after_fork admits the limit's worth of
    tries again, no more, and the limit AIMD had reached stays."""
    limit = make(clock, initial=4, min=2, max=8, max_wait=0.0)
    hold(limit, 4)
    limit.release(Signal.SUCCESS)  # 4 in flight as it ends: near the limit, which grows to 5
    hold(limit, 2)
    assert limit.snapshot() == LimitSnapshot(5, 5, 0)
    assert limit._lock.acquire(blocking=False)  # as a parent's thread inside it would
    limit.after_fork()
    assert limit.snapshot() == LimitSnapshot(5, 0, 0)
    hold(limit, 5)
    assert not limit.acquire(None)
    assert limit.snapshot() == LimitSnapshot(5, 5, 1)


def test_grows_by_one_per_success_while_half_the_limit_is_in_flight(clock):
    """With 5 of 10 in flight (the finishing try included) a success adds one; with 4, none."""
    limit = make(clock, initial=10)
    hold(limit, 3)
    cycle(limit, Signal.SUCCESS)  # 4 in flight as it ends: 4 < 10 / 2
    assert limit.limit == 10
    hold(limit, 1)
    cycle(limit, Signal.SUCCESS)  # 5 in flight: near
    assert limit.limit == 11
    cycle(limit, Signal.SUCCESS)  # 5 of 11: 10 < 11, not near any more
    assert limit.limit == 11
    hold(limit, 1)
    cycle(limit, Signal.SUCCESS)  # 6 of 11
    assert (limit.limit, limit.snapshot().in_flight) == (12, 5)


def test_no_growth_far_below_the_limit(clock):
    """A thousand successes one at a time leave the limit where it was."""
    limit = make(clock, initial=10)
    for _ in range(1000):
        cycle(limit, Signal.SUCCESS)
    assert limit.snapshot() == LimitSnapshot(10, 0, 0)


def test_drop_multiplies_by_backoff_ratio_down_to_min(clock):
    """20 → 18 → 16.2 (read 16) → ... and never below min; the fraction is kept inside."""
    limit = make(clock, initial=20, min=4, backoff_ratio=0.9)
    reads = []
    for _ in range(16):
        cycle(limit, Signal.DROP)
        reads.append(limit.limit)
    assert reads[:5] == [18, 16, 14, 13, 11]  # 18, 16.2, 14.58, 13.12, 11.81
    assert reads[-3:] == [4, 4, 4]
    hold(limit, 3)
    cycle(limit, Signal.SUCCESS)  # 4 in flight of 4: near, so 5
    assert limit.limit == 5


def test_fraction_kept_between_drops_and_growth(clock):
    """16.2 + 1 is 17.2, read 17: growth adds to the float, not to the rounded value."""
    limit = make(clock, initial=20)
    cycle(limit, Signal.DROP)
    cycle(limit, Signal.DROP)
    hold(limit, 8)
    cycle(limit, Signal.SUCCESS)
    assert limit.limit == 17


def test_never_above_max(clock):
    limit = make(clock, initial=10, max=12)
    hold(limit, 9)
    for _ in range(10):
        cycle(limit, Signal.SUCCESS)
    assert limit.limit == 12


def test_ignore_gives_the_slot_back_and_keeps_the_limit(clock):
    limit = make(clock, initial=2, min=1)
    hold(limit, 1)
    cycle(limit, Signal.IGNORE)
    assert limit.snapshot() == LimitSnapshot(2, 1, 0)


def test_waits_max_wait_on_the_clock_then_refuses(clock):
    """A full limit: the try waits max_wait of the clock's time, then is refused and counted."""
    limit = make(clock, initial=4, min=4, max_wait=0.25)
    hold(limit, 4)
    start = clock.now
    assert not limit.acquire(None)
    assert (clock.sleeps, clock.now - start) == ([0.25], 0.25)
    assert limit.snapshot() == LimitSnapshot(4, 4, 1)


def test_wait_ends_at_the_deadline_when_it_is_nearer(clock):
    limit = make(clock, initial=4, min=4, max_wait=0.25)
    hold(limit, 4)
    assert not limit.acquire(clock.now + 0.1)
    assert clock.sleeps == [pytest.approx(0.1)]


def test_deadline_already_spent_is_refused_without_waiting(clock):
    limit = make(clock, initial=4, min=4, max_wait=0.25)
    hold(limit, 4)
    assert not limit.acquire(clock.now)
    assert not limit.acquire(clock.now - 1.0)
    assert (clock.sleeps, limit.snapshot().limited) == ([], 2)


def test_max_wait_zero_never_waits(clock):
    limit = make(clock, initial=4, min=4, max_wait=0.0)
    hold(limit, 4)
    assert not limit.acquire(None)
    assert clock.sleeps == []


def test_free_slots_never_read_the_clock_or_wait():
    class NoTime(FakeClock):
        def monotonic(self) -> float:
            raise AssertionError("the clock was read with a slot free")

    limit = make(NoTime(), initial=4)
    hold(limit, 4)
    assert limit.snapshot().in_flight == 4


def test_a_slot_freed_during_the_wait_admits_the_waiting_try(clock):
    """The waiter stands in for the time passing: another try ends 0.05 s into the wait."""
    limit = make(clock, initial=4, min=4, max_wait=0.25)
    hold(limit, 4)

    def another_try_ends(condition: threading.Condition, seconds: float) -> None:
        condition.release()
        try:
            clock.advance(0.05)
            limit.release(Signal.IGNORE)
        finally:
            condition.acquire()

    limit._waiter = another_try_ends
    assert limit.acquire(None)
    assert (clock.now - 1000.0, limit.snapshot()) == (
        pytest.approx(0.05),
        LimitSnapshot(4, 4, 0),
    )


def test_the_system_clock_waits_on_the_condition_and_others_sleep_on_their_clock(clock):
    condition = threading.Condition()
    with condition:
        waiter_for(SYSTEM_CLOCK)(condition, 0.001)  # a real wait, not a sleep
        waiter_for(clock)(condition, 0.5)
    assert clock.sleeps == [0.5]


# -- the stage, on a host's state ----------------------------------------------------------


def limited_attempt(harness: Any, **policy: Any) -> tuple[Attempt, ConcurrencyLimit]:
    attempt = harness({"defaults": {"limit": policy}}).first_attempt()
    limit = attempt.call.state.limit
    assert limit is not None
    return attempt, limit


def test_stage_gives_the_slot_back_when_the_try_raises(harness, clock):
    """Even a BaseException: the slot is never leaked, and the limit is left as it was."""
    attempt, limit = limited_attempt(harness, initial=2, min=1)
    stage = limit_concurrency

    def interrupted(_: Attempt) -> Outcome:
        assert limit.snapshot().in_flight == 1
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        stage(attempt, interrupted)
    assert limit.snapshot() == LimitSnapshot(2, 0, 0)


def test_disabled_limit_is_left_out(harness):
    """enabled: false: the host has no limit object, every try passes, health shows zeros."""
    h = harness({"defaults": {"limit": {"enabled": False}}})
    attempt = h.first_attempt()
    assert attempt.call.state.limit is None
    stage = limit_concurrency
    depth = []

    def nested(inner: Attempt) -> Outcome:
        # Each level is one more try in flight on this thread: 50 at once, none refused.
        depth.append(1)
        if len(depth) < 50:
            return stage(inner, nested)
        return Outcome(response=build_response(inner.request, 200))

    assert stage(attempt, nested).status == 200
    health = h.registry.health()["http://svc.test:80"]
    assert (len(depth), health.limit, health.in_flight, health.limited) == (50, 0, 0, 0)


# -- many threads ---------------------------------------------------------------------------


@pytest.mark.parametrize(("low", "high"), [(8, 8), (4, 16)])
def test_hammer_never_exceeds_the_limit_and_ends_empty(harness, low, high):
    """64 threads, 200 tries each, through the stage, a quarter of them raising, a third of
    the rest answered 503: the flight, read under the limit's lock at every admission, never
    passes the limit (8, fixed) or its max (16, adapting), tries wait on the condition, and
    the flight ends at 0."""
    h = harness({"defaults": {"limit": {"initial": 8, "min": low, "max": high, "max_wait": 0.05}}})
    first = h.first_attempt()
    clock = h.clock

    waits = [0]

    def wait_a_little(condition: threading.Condition, seconds: float) -> None:
        # Real waiting on the condition, so notify is exercised; the fake clock moves with it.
        waits[0] += 1  # under the limit's lock
        step = min(seconds, 0.002)
        condition.wait(step)
        clock.advance(step)

    state = first.call.state
    assert state.limit is not None
    limit = ConcurrencyLimit(state.key, state.policy.limit, clock, wait_a_little)
    attempt = first.replace(call=first.call.replace(state=replace(state, limit=limit)))
    stage = limit_concurrency
    peak = [0]
    in_flight = threading.Event()  # never set: its wait is a pause that is not a sleep
    admitted = [0]
    counts = threading.Lock()

    def body(index: int) -> None:
        for n in range(200):

            def send(inner: Attempt, n: int = n) -> Outcome:
                snapshot = limit.snapshot()
                with counts:
                    peak[0] = max(peak[0], snapshot.in_flight)
                    admitted[0] += 1
                assert snapshot.in_flight <= high
                assert low <= snapshot.limit <= high
                if low == high:
                    assert snapshot.in_flight <= snapshot.limit
                # Hold the slot a moment, GIL released, so the others pile up and wait.
                in_flight.wait(0.0002)
                if (index + n) % 4 == 0:
                    raise KeyboardInterrupt  # a BaseException, as a signal would raise
                return Outcome(response=build_response(inner.request, 200 if n % 3 else 503))

            with contextlib.suppress(KeyboardInterrupt):
                stage(attempt, send)

    run_together(64, body)
    snapshot = limit.snapshot()
    assert snapshot.in_flight == 0
    assert peak[0] == 8 if low == high else low <= peak[0] <= high
    assert waits[0] > 0
    assert admitted[0] + snapshot.limited == 64 * 200
