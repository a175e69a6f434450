"""The fleet breaker's run in time, and the checks on what a sync reads back, on a fake clock."""

from __future__ import annotations

import random

import pytest

from resilient_session._state.breaker import BreakerState, TryResult
from resilient_session._state.fleet.breaker import FleetBreaker, StateCode
from resilient_session._state.fleet.budget import FleetBucket
from resilient_session._state.fleet.lua import (
    CORRECTED_BREAKER,
    CORRECTED_BUDGET,
    CORRECTED_THROTTLE,
    CORRECTED_WORKERS,
)
from resilient_session._state.fleet.sync_batch import SyncedHost, take_batch, take_in
from resilient_session._state.fleet.throttle import FleetThrottle
from resilient_session.config.policy import BreakerPolicy, BudgetPolicy, HostPolicy, ThrottlePolicy

KEY = "http://svc.test:80"


def _breaker(clock, threshold: int = 5) -> FleetBreaker:
    policy = BreakerPolicy(failure_threshold=threshold, recovery_timeout=2.0)
    return FleetBreaker(KEY, policy, clock, random.Random(0), lambda: None)


def _try(breaker: FleetBreaker, result: TryResult) -> None:
    permit, _ = breaker.allow()
    assert permit is not None
    breaker.record(permit, result)


def _host(clock, throttle: bool = True) -> SyncedHost:
    policy = HostPolicy(
        breaker=BreakerPolicy(failure_threshold=5, recovery_timeout=2.0, recovery_timeout_max=8.0),
        budget=BudgetPolicy(max_tokens=10),
        throttle=ThrottlePolicy(enabled=throttle),
    )
    breaker = FleetBreaker(KEY, policy.breaker, clock, random.Random(0), lambda: None)
    bucket = FleetBucket(policy.budget, clock)
    fleet_throttle = FleetThrottle(policy.throttle, clock, random.Random(0)) if throttle else None
    return SyncedHost.of(KEY, "p:", policy, breaker, bucket, fleet_throttle)


def test_a_batch_reports_when_its_trailing_failures_and_its_last_successes_began(clock):
    """Successes from t=1, failures from t=3: at t=4 the batch's last successes began 3000 ms
    ago and its run of 2 failures 1000 ms ago; the script receives both ages."""
    breaker = _breaker(clock)
    clock.advance(1.0)
    _try(breaker, TryResult.SUCCESS)
    clock.advance(1.0)
    _try(breaker, TryResult.SUCCESS)
    clock.advance(1.0)
    _try(breaker, TryResult.FAILURE)
    clock.advance(0.5)
    _try(breaker, TryResult.FAILURE)
    clock.advance(0.5)
    report = breaker.exchange()
    assert (report.failure_run, report.run_age_ms, report.success_age_ms) == (2, 1000, 3000)
    empty = breaker.exchange()
    assert (empty.failure_run, empty.run_age_ms, empty.success_age_ms) == (0, 0, -1)


def test_the_script_gets_the_ages_as_arguments_7_8_and_24(clock):
    """ARGV 7 is the trailing run, 8 the success age, 24 the run's age (docs in lua.py)."""
    host = _host(clock)
    _try(host.breaker, TryResult.SUCCESS)
    clock.advance(0.25)
    _try(host.breaker, TryResult.FAILURE)
    clock.advance(0.5)
    args = take_batch(host, "w", 1_000, random.Random(0)).args
    assert (args[6], args[7], args[23]) == (1, 750, 500)


def test_a_failed_syncs_run_keeps_its_first_failures_time(clock):
    """A run that went out in a failed sync and goes on after it is one run, begun when its
    first failure came; a success since drops it and its time."""
    breaker = _breaker(clock, threshold=100)
    _try(breaker, TryResult.FAILURE)
    clock.advance(1.0)
    lost = breaker.exchange()
    _try(breaker, TryResult.FAILURE)
    breaker.unsend(lost)
    clock.advance(1.0)
    again = breaker.exchange()
    assert (again.failure_run, again.run_age_ms, again.success_age_ms) == (2, 2000, -1)
    lost = again
    _try(breaker, TryResult.SUCCESS)
    clock.advance(0.5)
    breaker.unsend(lost)
    last = breaker.exchange()
    assert (last.failure_run, last.success_age_ms) == (0, 500)


def test_a_success_since_the_last_read_ends_the_fleets_run_here(clock):
    """The fleet's run read as 4 of 5: after a success here, one failure does not open (the
    success came after those 4); without the success, it would."""
    ended = _breaker(clock)
    ended.adopt(StateCode.CLOSED, 0.0, generation=2, failures=4)
    _try(ended, TryResult.SUCCESS)
    _try(ended, TryResult.FAILURE)
    going_on = _breaker(clock)
    going_on.adopt(StateCode.CLOSED, 0.0, generation=2, failures=4)
    _try(going_on, TryResult.FAILURE)
    assert (ended.state, going_on.state) == (BreakerState.CLOSED, BreakerState.OPEN)


def _reply(**changes: object) -> list[object]:
    values: dict[str, object] = {
        "state": 0,
        "open_ms": 0,
        "generation": 3,
        "tokens": "6",
        "tries": 10,
        "accepts": 8,
        "workers": 2,
        "failures": 1,
        "corrected": 0,
    }
    values.update(changes)
    return list(values.values())


def test_a_good_reply_is_taken_in_and_corrects_nothing(clock):
    """The fleet's 6 tokens over 2 workers is a share of 3; nothing corrected."""
    host = _host(clock)
    batch = take_batch(host, "w", 1_000, random.Random(0))
    assert take_in(host, batch, _reply()) == 0
    assert host.bucket.snapshot().tokens == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("changes", "corrected"),
    [
        ({"open_ms": 10**13, "state": 1}, CORRECTED_BREAKER),
        ({"open_ms": -5, "state": 1}, CORRECTED_BREAKER),
        ({"failures": 10**9}, CORRECTED_BREAKER),
        ({"tokens": "nan"}, CORRECTED_BUDGET),
        ({"tokens": "1e300"}, CORRECTED_BUDGET),
        ({"tokens": "-1"}, CORRECTED_BUDGET),
        ({"workers": 0}, CORRECTED_WORKERS),
        ({"accepts": 50}, CORRECTED_THROTTLE),
        ({"tries": -4}, CORRECTED_THROTTLE),
        ({"corrected": CORRECTED_WORKERS}, CORRECTED_WORKERS),
    ],
    ids=lambda value: str(value),
)
def test_a_value_out_of_range_is_corrected_and_said(clock, changes, corrected):
    """Each value out of its range is clamped or replaced by local state, and reported."""
    host = _host(clock)
    batch = take_batch(host, "w", 1_000, random.Random(0))
    assert take_in(host, batch, _reply(**changes)) == corrected
    snapshot = host.breaker.snapshot()
    assert 0.0 <= snapshot.open_for <= 8.0
    assert 0.0 <= host.bucket.snapshot().tokens <= 10.0


def test_tokens_that_are_no_number_leave_the_local_bucket_as_it_was(clock):
    """NaN tokens: the bucket keeps the 10 it had, as if the reply had said nothing of it."""
    host = _host(clock)
    batch = take_batch(host, "w", 1_000, random.Random(0))
    take_in(host, batch, _reply(tokens="nan"))
    assert host.bucket.snapshot().tokens == 10.0


def test_an_opening_far_ahead_lasts_at_most_recovery_timeout_max(clock):
    """The fleet says open for 285 years: this worker opens for 8 s, recovery_timeout_max."""
    host = _host(clock)
    batch = take_batch(host, "w", 1_000, random.Random(0))
    take_in(host, batch, _reply(state=1, open_ms=285 * 365 * 86_400_000, generation=4))
    assert host.breaker.snapshot().open_for == 8.0


def test_a_reply_malformed_as_a_whole_is_ignored(clock):
    """A reply too short, half open, or at a generation outside [0, 2^52] (the store writes
    none of them) changes nothing."""
    host = _host(clock)
    batch = take_batch(host, "w", 1_000, random.Random(0))
    assert take_in(host, batch, [0, 0]) != 0
    assert take_in(host, batch, _reply(state=2)) != 0
    assert take_in(host, batch, _reply(state=1, open_ms=5_000, generation=2**52 + 1)) != 0
    assert take_in(host, batch, _reply(state=1, open_ms=5_000, generation=-1)) != 0
    assert host.breaker.state is BreakerState.CLOSED
    assert host.bucket.snapshot().tokens == 10.0
