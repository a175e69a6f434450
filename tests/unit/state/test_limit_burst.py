"""The concurrency limit's first burst: a host that has not answered yet takes up to
``initial_burst`` tries at once, and its first answer puts the limit back on evidence."""

from __future__ import annotations

from typing import Any

import pytest

from resilient_session._state.limit import ConcurrencyLimit, LimitSnapshot, Signal
from resilient_session.config.policy import LimitPolicy
from resilient_session.testing import FakeClock

HOST = "http://svc.test:80"


def make(clock: FakeClock, **policy: Any) -> ConcurrencyLimit:
    """The defaults' numbers (32, a burst of 64) unless told otherwise; max_wait 0.25."""
    return ConcurrencyLimit(HOST, LimitPolicy(**{"max_wait": 0.25, **policy}), clock)


def hold(limit: ConcurrencyLimit, count: int) -> None:
    for _ in range(count):
        assert limit.acquire(None)


def release(limit: ConcurrencyLimit, signal: Signal, count: int = 1) -> None:
    for _ in range(count):
        limit.release(signal)


def test_a_fresh_host_at_the_limit_raises_it_to_the_burst_without_waiting(clock):
    """32 in flight, none answered: the 33rd try raises the limit to 64 at once, no wait and
    no clock read; 64 go out, and the 65th waits max_wait and is refused."""
    limit = make(clock)
    hold(limit, 32)
    assert limit.snapshot() == LimitSnapshot(32, 32, 0)
    hold(limit, 1)
    assert (limit.snapshot(), clock.sleeps) == (LimitSnapshot(64, 33, 0), [])
    hold(limit, 31)
    assert not limit.acquire(None)
    assert (limit.snapshot(), clock.sleeps) == (LimitSnapshot(64, 64, 1), [0.25])


@pytest.mark.parametrize(
    ("flight", "after"),
    [
        (64, 65),  # answered with 64 out: 64 is shown, and near the limit adds one
        (40, 41),
        (33, 34),
    ],
)
def test_the_first_success_keeps_the_flight_it_came_back_from(clock, flight, after):
    """After the burst, the first success sets the limit to the flight it ended in (this try
    included), plus the one a success near the limit adds."""
    limit = make(clock)
    hold(limit, flight)
    release(limit, Signal.SUCCESS)
    assert limit.snapshot() == LimitSnapshot(after, flight - 1, 0)


def test_the_burst_does_not_outlive_a_flight_that_fell_before_the_first_answer(clock):
    """40 out, 30 of them ignored (500s, say nothing of capacity), then a success with 10 in
    flight: the limit goes back to initial, 32, and no success that far below it adds one."""
    limit = make(clock)
    hold(limit, 40)
    release(limit, Signal.IGNORE, 30)
    assert limit.snapshot() == LimitSnapshot(64, 10, 0)
    release(limit, Signal.SUCCESS)
    assert limit.snapshot() == LimitSnapshot(32, 9, 0)


def test_the_first_drop_falls_from_initial_not_from_the_burst(clock):
    """64 out and the first answer is a drop: 32 x 0.9 = 28.8, read 28, and the burst is
    over: with 63 still in flight the next try waits and is refused."""
    limit = make(clock)
    hold(limit, 64)
    release(limit, Signal.DROP)
    assert limit.snapshot() == LimitSnapshot(28, 63, 0)
    release(limit, Signal.DROP, 36)  # 27 left in flight
    assert limit.limit == 4  # 32 x 0.9^37 is 0.65: min
    assert not limit.acquire(None)
    assert limit.snapshot() == LimitSnapshot(4, 27, 1)


def test_a_host_that_answered_never_bursts(clock):
    """One success with one try in flight ends the burst and leaves 32: a host that hangs
    after answering is sent the limit its answers earned, and the 33rd try waits."""
    limit = make(clock)
    hold(limit, 1)
    release(limit, Signal.SUCCESS)
    assert limit.snapshot() == LimitSnapshot(32, 0, 0)
    hold(limit, 32)
    assert not limit.acquire(None)
    assert (limit.snapshot(), clock.sleeps) == (LimitSnapshot(32, 32, 1), [0.25])


def test_an_ignored_try_leaves_the_host_unanswered(clock):
    """A 500 or a try that raised ends nothing: the host can still take its burst after it."""
    limit = make(clock)
    hold(limit, 1)
    release(limit, Signal.IGNORE)
    hold(limit, 64)
    assert limit.snapshot() == LimitSnapshot(64, 64, 0)


def test_a_host_that_hangs_from_its_first_try_gets_the_burst_and_no_more(clock):
    """64 tries hang; as each times out (a drop) one more call tries (max_wait 0): none is
    sent until the flight is below the limit, which happens only at min, with 3 left."""
    limit = make(clock, max_wait=0.0)
    hold(limit, 64)
    sent_after = []
    for dropped in range(1, 65):
        release(limit, Signal.DROP)
        if limit.acquire(None):
            sent_after.append(dropped)
            limit.release(Signal.IGNORE)  # its fate does not matter here
    assert sent_after == [61, 62, 63, 64]
    assert limit.snapshot() == LimitSnapshot(4, 0, 60)


@pytest.mark.parametrize(
    ("policy", "raised_to"),
    [
        ({"initial_burst": 32}, None),  # no higher than initial: no burst
        ({"initial_burst": 8}, None),
        ({"initial_burst": 33}, 33),
        ({"initial_burst": 64, "max": 48}, 48),  # never above max
    ],
)
def test_the_burst_is_bounded_by_initial_and_max(clock, policy, raised_to):
    """The 33rd try of a fresh host raises the limit to the burst, within initial..max, or
    waits when the burst is no rise."""
    limit = make(clock, **policy)
    hold(limit, 32)
    admitted = limit.acquire(None)
    snapshot = limit.snapshot()
    if raised_to is None:
        assert (admitted, snapshot) == (False, LimitSnapshot(32, 32, 1))
    else:
        assert (admitted, snapshot) == (True, LimitSnapshot(raised_to, 33, 0))
