"""The fleet guards' batches and adoption on a fake clock, and choosing a state backend."""

from __future__ import annotations

import random
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resilient_session import ConfigError, ResilientSession
from resilient_session._state.backend import MemoryBackend, open_backend
from resilient_session._state.breaker import BreakerState, CircuitBreaker, TryResult
from resilient_session._state.budget import TokenBucket
from resilient_session._state.fleet.breaker import Change, FleetBreaker, StateCode
from resilient_session._state.fleet.budget import FleetBucket
from resilient_session._state.fleet.throttle import FleetThrottle
from resilient_session._state.throttle import AdaptiveThrottle, ThrottleSnapshot
from resilient_session.cli.report import state_text
from resilient_session.config import load
from resilient_session.config.policy import BreakerPolicy, BudgetPolicy, HostPolicy, ThrottlePolicy
from resilient_session.testing import FakeClock
from tests.threads import run_together


class Wakes:
    """Counts the sync thread's wake-ups."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def _breaker(clock, threshold: int = 5) -> tuple[FleetBreaker, Wakes]:
    wakes = Wakes()
    policy = BreakerPolicy(failure_threshold=threshold, recovery_timeout=2.0)
    return FleetBreaker("http://svc.test:80", policy, clock, random.Random(0), wakes), wakes


def _fail(breaker: CircuitBreaker, count: int = 1) -> None:
    for _ in range(count):
        permit, _ = breaker.allow()
        assert permit is not None
        breaker.record(permit, TryResult.FAILURE)


def _succeed(breaker: CircuitBreaker) -> None:
    permit, _ = breaker.allow()
    assert permit is not None
    breaker.record(permit, TryResult.SUCCESS)


def test_each_failure_wakes_the_sync_thread_and_joins_the_batch(clock):
    """Three failures after a success: a run of 3 that ended the fleet's run, three wakes;
    the next exchange starts an empty batch."""
    breaker, wakes = _breaker(clock)
    _fail(breaker, 2)
    _succeed(breaker)
    _fail(breaker, 3)
    report = breaker.exchange()
    assert (report.failure_run, report.success_seen, report.change) == (3, True, Change.NONE)
    assert (report.state, report.generation, wakes.count) == (StateCode.CLOSED, 0, 5)
    again = breaker.exchange()
    assert (again.failure_run, again.success_seen) == (0, False)


def test_successes_on_a_healthy_host_never_wake_the_sync_thread(clock):
    """A thousand successes wake nothing: a healthy host's counts wait for the tick."""
    breaker, wakes = _breaker(clock)
    for _ in range(1000):
        _succeed(breaker)
    assert wakes.count == 0
    assert breaker.exchange().success_seen is True


def test_a_local_opening_is_reported_with_its_duration(clock):
    """Reaching the threshold here opens locally and reports the change, open for the
    recovery timeout."""
    breaker, _ = _breaker(clock, threshold=3)
    _fail(breaker, 3)
    report = breaker.exchange()
    assert (report.state, report.change, report.open_for_ms) == (
        StateCode.OPEN,
        Change.OPENED,
        2000,
    )


def test_adopting_the_fleets_opening_fails_fast_for_what_is_left_of_it(clock):
    """The fleet's breaker open for 1.5 s more: this one opens, refuses until then, and
    lets a probe through after; the same generation again changes nothing."""
    breaker, _ = _breaker(clock)
    transition = breaker.adopt(StateCode.OPEN, 1.5, generation=4)
    assert transition is not None
    assert (transition.from_state, transition.to_state) == (BreakerState.CLOSED, BreakerState.OPEN)
    assert breaker.adopt(StateCode.OPEN, 9.0, generation=4) is None
    assert breaker.allow()[0] is None
    clock.advance(1.5)
    permit, to_half_open = breaker.allow()
    assert permit is not None
    assert permit.probe
    assert to_half_open is not None
    assert to_half_open.to_state is BreakerState.HALF_OPEN
    assert breaker.exchange().generation == 4


def test_a_result_from_before_the_adopted_opening_is_stale(clock):
    """A try admitted while closed that fails after the fleet opened is neither counted in
    the batch nor able to move the state."""
    breaker, wakes = _breaker(clock)
    permit, _ = breaker.allow()
    assert permit is not None
    breaker.adopt(StateCode.OPEN, 5.0, generation=1)
    state, transition = breaker.record(permit, TryResult.FAILURE)
    assert (state, transition, wakes.count) == (BreakerState.OPEN, None, 0)
    assert breaker.exchange().failure_run == 0


def test_adopting_a_closing_closes_and_a_later_probe_is_not_needed(clock):
    """Another worker's probe closed the fleet's breaker: this open one closes at once."""
    breaker, _ = _breaker(clock, threshold=1)
    _fail(breaker)
    breaker.exchange()
    transition = breaker.adopt(StateCode.CLOSED, 0.0, generation=7)
    assert transition is not None
    assert transition.to_state is BreakerState.CLOSED
    assert breaker.closed_admission is not None
    assert breaker.snapshot().openings == 0


def test_a_half_open_breaker_keeps_probing_when_the_fleets_opening_ran_out(clock):
    """A new generation that is open with nothing left leaves a probing breaker probing."""
    breaker, _ = _breaker(clock, threshold=1)
    _fail(breaker)
    clock.advance(2.0)
    permit, _ = breaker.allow()
    assert permit is not None
    assert permit.probe
    assert breaker.adopt(StateCode.OPEN, 0.0, generation=3) is None
    assert breaker.state is BreakerState.HALF_OPEN


def test_isolate_drops_a_batch_the_fleet_will_never_see(clock):
    """Redis out of reach: the failures batched so far are dropped, the local state kept."""
    breaker, _ = _breaker(clock, threshold=10)
    _fail(breaker, 4)
    breaker.isolate()
    assert breaker.exchange().failure_run == 0
    assert breaker.snapshot().failures == 4


def test_the_bucket_holds_its_share_of_the_fleets_tokens(clock):
    """Deposits and withdrawals go out as counted; the tokens become a quarter of the
    fleet's 6, plus what was done here since the exchange."""
    bucket = FleetBucket(BudgetPolicy(ratio=0.5, min_per_second=0.0, max_tokens=10), clock)
    for _ in range(4):
        bucket.deposit()
    assert bucket.try_withdraw()
    assert bucket.try_withdraw()
    bucket.refund()
    assert bucket.exchange() == (4, 1)
    bucket.deposit()
    assert bucket.try_withdraw()
    bucket.adopt(6.0, workers=4)
    assert bucket.snapshot().tokens == pytest.approx(1.5 + 0.5 - 1.0)
    assert bucket.exchange() == (1, 1)


def test_a_bucket_share_never_leaves_its_bounds(clock):
    """A fleet holding more than max_tokens, or a negative count, is clamped."""
    bucket = FleetBucket(BudgetPolicy(ratio=0.0, min_per_second=0.0, max_tokens=5), clock)
    bucket.adopt(1e9, workers=1)
    assert bucket.snapshot().tokens == 5
    bucket.adopt(-3.0, workers=0)
    assert bucket.snapshot().tokens == 0
    assert not bucket.try_withdraw()


def test_the_throttle_refuses_on_the_fleets_window(clock):
    """Alone this worker's 10 tries say nothing (min_tries 20); with the fleet's 40 tries and
    4 accepts the refusal chance is (50 - 2 x 5) / 51, and isolate() drops the others."""
    throttle = FleetThrottle(ThrottlePolicy(min_tries=20), clock, random.Random(0))
    for accepted in [True] + [False] * 9:
        throttle.record(accepted)
    assert throttle.snapshot().probability == 0.0
    tries, accepts, own_tries, own_accepts = throttle.exchange()
    assert (tries, accepts, own_tries, own_accepts) == (10, 1, 10, 1)
    throttle.adopt(50, 5, own_tries, own_accepts)
    assert throttle.snapshot().probability == pytest.approx((50 - 2 * 5) / 51)
    refused = sum(throttle.ask() is not None for _ in range(1000))
    assert 700 < refused < 870
    throttle.isolate()
    assert throttle.snapshot().probability == 0.0
    assert throttle.ask() is None
    assert throttle.exchange()[:2] == (0, 0)


def test_the_fleets_failures_alone_let_the_throttle_refuse(clock):
    """A worker that saw no failure of its own refuses once the fleet's window says so, and
    stops once the fleet is out of reach."""
    throttle = FleetThrottle(ThrottlePolicy(min_tries=1), clock, random.Random(0))
    assert throttle.may_refuse is False
    throttle.adopt(100, 0, 0, 0)
    assert throttle.may_refuse is True
    assert sum(throttle.ask() is not None for _ in range(100)) > 90
    throttle.isolate()
    assert (throttle.may_refuse, throttle.ask()) == (False, None)


def test_a_throttle_reset_forgets_the_fleets_window_too(clock):
    """The breaker closing after a probe empties both windows."""
    throttle = FleetThrottle(ThrottlePolicy(min_tries=1), clock, random.Random(0))
    throttle.adopt(100, 0, 0, 0)
    assert throttle.snapshot().probability > 0.9
    throttle.reset()
    assert throttle.snapshot() == ThrottleSnapshot(0.0, 0, 0, 0)


def test_the_memory_backend_builds_the_plain_guards(clock, rng):
    """memory, the default, hands out exactly the classes of a session without a backend."""
    backend = open_backend(load({}).state, clock, rng)
    assert isinstance(backend, MemoryBackend)
    breaker, bucket, throttle = backend.build("http://a:80", HostPolicy())
    assert (type(breaker), type(bucket), type(throttle)) == (
        CircuitBreaker,
        TokenBucket,
        AdaptiveThrottle,
    )
    assert (
        backend.build("http://a:80", HostPolicy(throttle=ThrottlePolicy(enabled=False)))[2] is None
    )


def test_the_redis_backend_without_redis_py_names_state_backend(monkeypatch, clock):
    """Without redis-py installed, a session selecting the redis backend fails at
    construction with a ConfigError naming state.backend and the extra to install."""
    monkeypatch.setitem(sys.modules, "redis", None)
    # Every module of the fleet package imported before is imported again, without redis-py.
    for name in [
        name for name in sys.modules if name.startswith("resilient_session._state.fleet.")
    ]:
        monkeypatch.delitem(sys.modules, name)
    with pytest.raises(ConfigError) as raised:
        ResilientSession({"state": {"backend": "redis"}}, clock=clock)
    message = str(raised.value)
    assert message.startswith("state.backend: 'redis' needs redis-py")
    assert "pip install 'resilient-session[redis]'" in message


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"backend": "etcd"}, "state.backend: invalid enum value 'etcd'"),
        ({"url": "http://r:6379"}, "state.url: expected str matching regex"),
        ({"timeout_ms": 0}, "state.timeout_ms: expected int >= 1, got 0"),
        ({"sync_interval_ms": 5}, "state.sync_interval_ms: expected int >= 10, got 5"),
        ({"key_prefix": 3}, "state.key_prefix: expected str, got int 3"),
        ({"sharded": True}, "state.sharded: unknown key"),
    ],
)
def test_bad_state_keys_are_named(state, message):
    """Each bad state: key is a ConfigError naming its path."""
    with pytest.raises(ConfigError) as raised:
        load({"state": state})
    assert str(raised.value).startswith(message)


def test_a_bad_state_url_never_shows_its_password():
    """A rejected state.url is shown without the password in it."""
    with pytest.raises(ConfigError) as raised:
        load({"state": {"url": "http://:s3cret@r:6379/0"}})
    assert "s3cret" not in str(raised.value)
    assert "state.url" in str(raised.value)


def test_fleet_guards_under_many_threads(clock):
    """16 threads x 1,000 tries on one breaker, bucket and throttle while another thread
    exchanges and adopts the fleet's state: every count is sent exactly once, none lost or
    doubled, and the breaker only ever moves along legal transitions."""
    breaker, _ = _breaker(clock, threshold=1_000_000)
    bucket = FleetBucket(BudgetPolicy(ratio=0.1, max_tokens=100_000), clock)
    throttle = FleetThrottle(ThrottlePolicy(min_tries=1_000_000), clock, random.Random(0))
    sent = {"deposits": 0, "withdrawals": 0, "failures": 0, "tries": 0, "accepts": 0}
    transitions = []

    def body(index: int) -> None:
        if index == 0:
            for number in range(2_000):
                deposits, withdrawals = bucket.exchange()
                sent["deposits"] += deposits
                sent["withdrawals"] += withdrawals
                sent["failures"] += breaker.exchange().failure_run
                tries, accepts, own_tries, own_accepts = throttle.exchange()
                sent["tries"] += tries
                sent["accepts"] += accepts
                bucket.adopt(100_000.0, workers=1)
                throttle.adopt(own_tries + 5, own_accepts + 5, own_tries, own_accepts)
                moved = breaker.adopt(StateCode.CLOSED, 0.0, generation=number + 1)
                if moved is not None:
                    transitions.append(moved)
            return
        for number in range(1_000):
            bucket.deposit()
            assert bucket.try_withdraw()
            _fail(breaker)
            throttle.record(number % 2 == 0)

    run_together(17, body)
    deposits, withdrawals = bucket.exchange()
    tries, accepts, _, _ = throttle.exchange()
    assert sent["deposits"] + deposits == 16_000
    assert sent["withdrawals"] + withdrawals == 16_000
    assert sent["failures"] + breaker.exchange().failure_run == 16_000
    assert (sent["tries"] + tries, sent["accepts"] + accepts) == (16_000, 8_000)
    assert transitions == []
    assert breaker.state is BreakerState.CLOSED


def test_the_fleets_run_plus_this_workers_new_failures_open_at_once(clock):
    """With the fleet's run at 3 of 5 as last read, this worker's second failure since opens
    its breaker without a round trip, and the opening is reported to the fleet."""
    breaker, _ = _breaker(clock, threshold=5)
    breaker.adopt(StateCode.CLOSED, 0.0, generation=2, failures=3)
    _fail(breaker)
    states = [breaker.state]
    _fail(breaker)
    states.append(breaker.state)
    assert states == [BreakerState.CLOSED, BreakerState.OPEN]
    report = breaker.exchange()
    assert (report.change, report.generation) == (Change.OPENED, 2)


def test_the_fleets_run_is_forgotten_when_redis_is_out_of_reach(clock):
    """After isolate(), only this worker's own run counts: 4 more failures leave it closed."""
    breaker, _ = _breaker(clock, threshold=5)
    breaker.adopt(StateCode.CLOSED, 0.0, generation=2, failures=4)
    breaker.isolate()
    _fail(breaker, 4)
    assert breaker.state is BreakerState.CLOSED


def test_an_opening_the_fleet_has_not_seen_is_not_undone_by_an_older_state(clock):
    """This breaker opened after its batch went out; the reply (closed, a new generation)
    predates that: the breaker stays open and its opening goes out against the new one."""
    breaker, _ = _breaker(clock, threshold=2)
    _fail(breaker)
    breaker.exchange()
    _fail(breaker)
    assert breaker.adopt(StateCode.CLOSED, 0.0, generation=9) is None
    assert breaker.state is BreakerState.OPEN
    report = breaker.exchange()
    assert (report.change, report.generation) == (Change.OPENED, 9)


def test_a_newer_opening_outweighs_a_probe_that_closed_here(clock):
    """A probe closed this breaker, but the fleet reopened meanwhile: it opens again and its
    closing is not sent."""
    breaker, _ = _breaker(clock, threshold=1)
    _fail(breaker)
    breaker.exchange()
    clock.advance(2.0)
    _succeed(breaker)  # the probe: half_open -> closed
    transition = breaker.adopt(StateCode.OPEN, 4.0, generation=5)
    assert transition is not None
    assert (transition.from_state, transition.to_state) == (BreakerState.CLOSED, BreakerState.OPEN)
    assert breaker.exchange().change is Change.NONE


def test_a_failed_syncs_batch_goes_out_with_the_next(clock):
    """unsend() puts back a failed sync's counts: the next exchange carries them with the
    newer ones; a success since drops the older failures, as it ends the run."""
    breaker, _ = _breaker(clock, threshold=100)
    _fail(breaker, 3)
    first = breaker.exchange()
    _fail(breaker, 2)
    breaker.unsend(first)
    assert breaker.exchange().failure_run == 5
    _fail(breaker, 4)
    lost = breaker.exchange()
    _succeed(breaker)
    _fail(breaker)
    breaker.unsend(lost)
    again = breaker.exchange()
    assert (again.failure_run, again.success_seen) == (1, True)

    bucket = FleetBucket(BudgetPolicy(ratio=0.5, min_per_second=0.0), clock)
    bucket.deposit()
    assert bucket.try_withdraw()
    deposits, withdrawals = bucket.exchange()
    bucket.deposit()
    bucket.unsend(deposits, withdrawals)
    assert bucket.exchange() == (2, 1)

    throttle = FleetThrottle(ThrottlePolicy(), clock, random.Random(0))
    throttle.record(True)
    throttle.record(False)
    tries, accepts, _, _ = throttle.exchange()
    throttle.record(False)
    throttle.unsend(tries, accepts)
    assert throttle.exchange()[:2] == (3, 1)


def test_a_url_redis_py_cannot_use_names_state_url_without_its_password(clock):
    """A state.url that passes the schema but not redis-py's parser is a ConfigError naming
    state.url, with no password in it."""
    with pytest.raises(ConfigError) as raised:
        ResilientSession(
            {"state": {"backend": "redis", "url": "redis://:s3cret@h:port/0"}}, clock=clock
        )
    message = str(raised.value)
    assert message.startswith("state.url: ")
    assert "s3cret" not in message


@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("deposit"), st.just(0.0), st.just(0)),
            st.tuples(st.just("withdraw"), st.just(0.0), st.just(0)),
            st.tuples(st.just("exchange"), st.just(0.0), st.just(0)),
            st.tuples(
                st.just("adopt"),
                st.floats(allow_nan=True, allow_infinity=True),
                st.integers(min_value=-3, max_value=1_000),
            ),
        ),
        max_size=60,
    )
)
def test_a_fleet_bucket_always_holds_between_zero_and_max_tokens(steps):
    """Whatever the fleet answers (negative, huge, NaN tokens; no or many workers), a bucket
    never holds fewer than 0 or more than max_tokens."""
    clock = FakeClock()
    bucket = FleetBucket(BudgetPolicy(ratio=0.3, min_per_second=0.0, max_tokens=7), clock)
    for kind, tokens, workers in steps:
        if kind == "deposit":
            bucket.deposit()
        elif kind == "withdraw":
            bucket.try_withdraw()
        elif kind == "exchange":
            bucket.exchange()
        else:
            bucket.adopt(tokens, workers)
        assert 0.0 <= bucket.snapshot().tokens <= 7.0


class _Interleaved:
    """A lock that runs *before* once, on its next acquisition, as another thread could get
    in just ahead of it."""

    def __init__(self, lock, before) -> None:
        self._lock = lock
        self._before = before

    def __enter__(self):
        before, self._before = self._before, None
        if before is not None:
            before()
        return self._lock.__enter__()

    def __exit__(self, *exc):
        return self._lock.__exit__(*exc)


def test_an_opening_not_yet_noted_in_the_batch_is_not_undone_by_an_older_state(clock):
    """The sync thread takes in a reply (closed, a new generation) in the instant between
    this breaker opening and noting the opening for its batch: the reply predates the
    opening, so the breaker stays open and the opening goes out against the new generation."""
    breaker, _ = _breaker(clock, threshold=2)
    _fail(breaker)
    breaker.exchange()
    adopted = []
    breaker._batch_lock = _Interleaved(  # type: ignore[assignment]  # a lock in all but type
        breaker._batch_lock,
        lambda: adopted.append(breaker.adopt(StateCode.CLOSED, 0.0, generation=9)),
    )
    _fail(breaker)
    assert adopted == [None]
    assert breaker.state is BreakerState.OPEN
    report = breaker.exchange()
    assert (report.change, report.generation) == (Change.OPENED, 9)


@pytest.mark.parametrize(
    "url",
    [
        "redis://:Zm9vYmFy/cXV4@h:6379/0",  # a base64 password, its "/" left unescaped
        "redis://:Zm9vYmFy?cXV4@h:6379/0",
        "redis://user:Zm9vYmFy#cXV4@h:6379/0",
    ],
)
def test_a_password_with_an_unescaped_delimiter_is_never_shown(url, clock):
    """A password holding "/", "?" or "#" ends the URL's authority early for a URL parser,
    which then reads part of the password as the port: neither the ConfigError nor the line
    ``resilient-session check`` prints shows any of it."""
    with pytest.raises(ConfigError) as raised:
        ResilientSession({"state": {"backend": "redis", "url": url}}, clock=clock)
    shown = str(raised.value) + state_text(load({"state": {"backend": "redis", "url": url}}).state)
    assert str(raised.value).startswith("state.url: ")
    assert "Zm9vYmFy" not in shown
    assert "cXV4" not in shown
