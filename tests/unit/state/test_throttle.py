"""The adaptive throttle: its refusal chance, window, reset, and its stage in the pipeline."""

from __future__ import annotations

import random
import threading

import pytest
import requests

from resilient_session._pipeline.attempt import Reason, Verdict
from resilient_session._pipeline.drive import drive
from resilient_session._pipeline.stages import standard_chain
from resilient_session._state.breaker import BreakerState
from resilient_session._state.throttle import AdaptiveThrottle
from resilient_session.config.policy import ThrottlePolicy
from resilient_session.errors import CircuitOpenError, DeadlineExceeded, ThrottledError
from resilient_session.testing import FakeClock, ScriptedTransport
from tests.conftest import Harness
from tests.threads import run_together

HOST = "http://svc.test:80"
# One try a call, and a breaker that never opens: the throttle alone decides.
ONE_TRY = {"retry": {"max_attempts": 1}, "breaker": {"failure_threshold": 1_000_000}}


class Fixed(random.Random):
    """A random source that always draws *value*: 0.0 refuses whenever refusal is possible."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value
        self.draws = 0

    def random(self) -> float:
        self.draws += 1
        return self.value


def throttle_with(
    clock: FakeClock, tries: int, accepts: int, rng: random.Random | None = None, **policy
) -> AdaptiveThrottle:
    throttle = AdaptiveThrottle(ThrottlePolicy(**policy), clock, rng or Fixed(0.0))
    for index in range(tries):
        throttle.record(index < accepts)
    return throttle


@pytest.mark.parametrize(
    ("tries", "accepts", "probability"),
    [
        (100, 100, 0.0),
        (100, 50, 0.0),  # k = 2: half accepted is the line itself
        (100, 10, (100 - 20) / 101),
        (100, 0, 100 / 101),
        (20, 0, 20 / 21),
        (19, 0, 0.0),  # fewer than min_tries
        (21, 10, 0.0),  # one over the line right after a failure: no refusal yet
        (22, 10, 2 / 23),
    ],
)
def test_probability_at_given_counts(clock, tries, accepts, probability):
    """The refusal chance is max(0, (tries - 2 * accepts) / (tries + 1)) from min_tries on."""
    snapshot = throttle_with(clock, tries, accepts).snapshot()
    assert (snapshot.probability, snapshot.tries, snapshot.accepts) == (probability, tries, accepts)


def test_no_refusal_below_min_tries(clock):
    """19 failures refuse nothing even on a draw of 0; the 20th failure starts refusals."""
    throttle = throttle_with(clock, 19, 0)
    assert [throttle.ask() for _ in range(50)] == [None] * 50
    throttle.record(False)
    assert throttle.ask() == 20 / 21


def test_the_draw_decides_against_the_probability(clock):
    """At 80/101 a draw of 0.79 refuses and one of 0.80 admits; a refusal counts only as
    throttled, not as a try."""
    throttle = throttle_with(clock, 100, 10, rng=Fixed(0.79))
    assert throttle.ask() == 80 / 101
    throttle._rng = Fixed(0.80)
    assert throttle.ask() is None
    snapshot = throttle.snapshot()
    assert (snapshot.tries, snapshot.accepts, snapshot.throttled) == (100, 10, 1)


def test_a_healthy_host_draws_no_random_number(clock):
    """With nothing to refuse, asking never touches the random source (the jitter's)."""
    rng = Fixed(0.0)
    throttle = throttle_with(clock, 100, 60, rng=rng)
    assert [throttle.ask() for _ in range(10)] == [None] * 10
    assert rng.draws == 0


def test_tries_older_than_the_window_drop_out(clock):
    """Tries leave the 30 s window as the clock moves: by 30 s after their bucket began."""
    throttle = throttle_with(clock, 20, 0)
    clock.advance(10.0)
    for _ in range(30):
        throttle.record(False)
    clock.advance(19.999)
    assert throttle.snapshot().tries == 50
    clock.advance(0.001)  # 30 s after the first twenty
    assert throttle.snapshot().tries == 30
    clock.advance(10.0)
    assert (throttle.snapshot().tries, throttle.ask()) == (0, None)


def test_may_refuse_follows_the_failures_in_the_window(clock):
    """may_refuse, read by the stage without the lock, is true exactly while the window's
    failures exceed k - 1: failures raise it, successes leave it, the slide, a reset and the
    fleet's counts move it."""
    throttle = throttle_with(clock, 0, 0)
    throttle.record(False)
    assert throttle.may_refuse is False  # one failure: k - 1 = 1 is not exceeded
    throttle.record(False)
    assert throttle.may_refuse is True
    for _ in range(5):
        throttle.record(True)
    assert throttle.may_refuse is True  # successes add as many tries as accepts
    clock.advance(31.0)
    throttle.snapshot()  # the slide empties the window
    assert throttle.may_refuse is False
    throttle.record(False)
    throttle.record(False)
    throttle.reset()
    assert throttle.may_refuse is False


def test_a_long_silence_empties_every_bucket(clock):
    """After more than a window without tries the window is empty, and counts start again."""
    throttle = throttle_with(clock, 100, 0)
    clock.advance(3_600.0)
    throttle.record(True)
    snapshot = throttle.snapshot()
    assert (snapshot.tries, snapshot.accepts, snapshot.probability) == (1, 1, 0.0)


def test_a_day_long_window_keeps_a_fixed_number_of_buckets(clock):
    """A 1-day window is 120 buckets of 12 minutes: tries stay a day and a bucket at most."""
    throttle = throttle_with(clock, 20, 0, window=86_400.0)
    assert len(throttle._tries) == 120
    clock.advance(86_400.0 - 720.0)
    assert throttle.snapshot().tries == 20
    clock.advance(720.0)
    assert throttle.snapshot().tries == 0


def test_reset_empties_the_window_and_keeps_the_refusal_count(clock):
    """reset() starts the window afresh; the throttled count runs on."""
    throttle = throttle_with(clock, 30, 0)
    assert throttle.ask() is not None
    throttle.reset()
    snapshot = throttle.snapshot()
    assert (snapshot.tries, snapshot.accepts, snapshot.probability, snapshot.throttled) == (
        0,
        0,
        0.0,
        1,
    )


def test_hammer_counts_add_up(clock):
    """64 threads asking and recording at once on a frozen clock: every ask is either a
    refusal or one recorded try, and every accepted record is an accept."""
    throttle = throttle_with(clock, 20, 0, rng=random.Random(7))
    totals = {"asks": 0, "refused": 0, "recorded": 0, "accepted": 0}
    lock = threading.Lock()

    def body(index: int) -> None:
        mine = dict.fromkeys(totals, 0)
        for step in range(500):
            mine["asks"] += 1
            if throttle.ask() is not None:
                mine["refused"] += 1
                continue
            accepted = (index + step) % 3 == 0
            throttle.record(accepted)
            mine["recorded"] += 1
            mine["accepted"] += accepted
        with lock:
            for key, value in mine.items():
                totals[key] += value

    run_together(64, body)
    snapshot = throttle.snapshot()
    assert totals["asks"] == 64 * 500 == totals["refused"] + totals["recorded"]
    assert (snapshot.tries, snapshot.accepts, snapshot.throttled) == (
        20 + totals["recorded"],
        totals["accepted"],
        totals["refused"],
    )
    assert totals["refused"] > 0


# -- in the pipeline ------------------------------------------------------------------------


def run_calls(h: Harness, transport: ScriptedTransport, calls: int, gap: float) -> list[Reason]:
    """Drive *calls* calls through one chain around *transport*, *gap* seconds apart."""
    chain = standard_chain(transport)
    reasons = []
    for _ in range(calls):
        reasons.append(drive(chain, h.first_attempt()).decision.reason)
        h.clock.advance(gap)
    return reasons


def test_a_host_failing_nine_tries_in_ten_gets_four_in_five_refused(clock):
    """Against a host that fails 90 % of the tries it gets, about 80 % of tries are refused
    (exactly this many with this seed), and health counts them as the events do."""
    h = Harness(clock, random.Random(0), {"defaults": ONE_TRY})
    transport = ScriptedTransport(clock, *([503] * 9 + [200]) * 300)
    reasons = run_calls(h, transport, 2_000, gap=0.05)  # 100 s: a 30 s window of 600 calls
    refused = reasons.count(Reason.THROTTLED)
    assert refused == 1_567  # 78 %, the first 20 tries included
    assert transport.calls == 2_000 - refused
    health = h.registry.health()[HOST]
    assert (health.throttled, health.refused, health.tries) == (refused, refused, transport.calls)
    assert 0.75 < health.throttle_probability < 0.85


@pytest.mark.parametrize("attempts", [1, 2])
def test_a_host_failing_half_the_tries_gets_none_refused(clock, attempts):
    """k = 2 refuses nothing at 50 % failures, whether the failures come first in a call
    (and are retried) or alternate with successes call by call."""
    config = {**ONE_TRY, "retry": {"max_attempts": attempts}, "budget": {"ratio": 1.0}}
    h = Harness(clock, random.Random(0), {"defaults": config})
    transport = ScriptedTransport(clock, *[503, 200] * 1_000)
    reasons = run_calls(h, transport, 2_000 // attempts, gap=0.01)
    assert (reasons.count(Reason.THROTTLED), transport.calls) == (0, 2_000)
    assert h.registry.health()[HOST].throttle_probability == 0.0


def test_disabled_throttle_refuses_nothing(clock):
    """With enabled: false the host has no throttle, and an all-503 host gets every try."""
    config = {"defaults": {**ONE_TRY, "throttle": {"enabled": False}}}
    h = Harness(clock, Fixed(0.0), config)
    transport = ScriptedTransport(clock, 503)
    reasons = run_calls(h, transport, 100, gap=0.01)
    health = h.registry.health()[HOST]
    assert (h.host().throttle, transport.calls, reasons.count(Reason.THROTTLED)) == (None, 100, 0)
    assert (health.throttled, health.throttle_probability) == (0, 0.0)


def test_a_refused_first_try_raises_throttled_error(clock, logs):
    """A refused first try is never sent; the caller gets ThrottledError, a CircuitOpenError
    and a requests.ConnectionError, naming the host, and the event says fail_fast/throttled."""
    h = Harness(clock, Fixed(0.0), {"defaults": ONE_TRY})
    throttle = h.host().throttle
    assert throttle is not None
    for _ in range(30):
        throttle.record(False)
    outcome, transport = h.run(200)
    assert (transport.calls, outcome.decision) == (0, (Verdict.FAIL_FAST, Reason.THROTTLED, 0.0))
    with pytest.raises(ThrottledError) as raised:
        outcome.unwrap()
    assert isinstance(raised.value, CircuitOpenError)
    assert isinstance(raised.value, requests.ConnectionError)
    assert str(raised.value) == (
        "adaptive throttle for http://svc.test:80 refused the try (refusal chance 96.8%: "
        "the host failed most recent tries); it was not sent"
    )
    [event] = [e for e in logs if e["event"] == "http.try"]
    assert (event["decision"], event["reason"], event["status"]) == ("fail_fast", "throttled", None)


def test_a_refused_retry_ends_the_call_with_the_last_real_result(clock, logs):
    """A retry refused by the throttle ends the call with the 503 that went before it."""
    h = Harness(clock, Fixed(0.0), {"defaults": {"retry": {"backoff_base": 0.1}}})
    throttle = h.host().throttle
    assert throttle is not None
    for _ in range(19):  # the first try's 503 makes 20
        throttle.record(False)
    outcome, transport = h.run(503, 200)
    assert (transport.calls, outcome.decision.reason, outcome.unwrap().status_code) == (
        1,
        Reason.THROTTLED,
        503,
    )
    tries = [(e["decision"], e["reason"], e["status"]) for e in logs if e["event"] == "http.try"]
    assert tries == [("retry", "overload", 503), ("fail_fast", "throttled", None)]
    health = h.registry.health()[HOST]
    assert (health.tries, health.refused, health.throttled, health.failures) == (1, 1, 1, 1)


@pytest.mark.parametrize(
    ("step", "counted"),
    [
        (200, (1, 1)),
        (404, (1, 1)),  # the host answered: an accept
        (429, (1, 0)),
        (500, (1, 0)),
        (503, (1, 0)),
        (requests.ConnectionError("reset"), (1, 0)),
        (requests.ReadTimeout("slow"), (1, 0)),
        # Says nothing about the host: the caller's deadline, a TLS error of ours.
        (DeadlineExceeded("deadline ran out"), (0, 0)),
        (requests.exceptions.SSLError("bad certificate"), (0, 0)),
    ],
)
def test_what_a_sent_try_counts_as(harness, step, counted):
    """Tries and accepts after one sent try, by how it ended."""
    h = harness({"defaults": ONE_TRY})
    h.run(step)
    snapshot = h.host().throttle.snapshot()
    assert (snapshot.tries, snapshot.accepts) == counted


def test_a_try_refused_for_a_spent_deadline_is_not_counted(harness, clock):
    """A try the deadline stage refuses never reached the host: neither a try nor an accept."""
    h = harness()
    attempt = h.first_attempt(deadline=0.5)
    clock.advance(0.6)
    outcome = drive(standard_chain(ScriptedTransport(clock, 200)), attempt)
    assert outcome.decision.reason is Reason.DEADLINE_SPENT
    snapshot = h.host().throttle.snapshot()
    assert (snapshot.tries, snapshot.accepts, snapshot.throttled) == (0, 0, 0)


def test_the_breaker_closing_resets_the_throttle_and_its_probe_is_never_refused(clock):
    """A half-open probe goes out even at a high refusal chance; its success closes the
    breaker, and the window starts afresh."""
    config = {"retry": {"max_attempts": 1}, "breaker": {"failure_threshold": 2}}
    h = Harness(clock, Fixed(0.0), {"defaults": config})
    h.run(500)
    h.run(500)
    assert h.host().breaker.state is BreakerState.OPEN
    throttle = h.host().throttle
    assert throttle is not None
    for _ in range(30):
        throttle.record(False)
    assert throttle.snapshot().probability == 32 / 33
    clock.advance(5.0)  # recovery_timeout: the next try is a probe
    outcome, transport = h.run(200)
    assert (transport.calls, outcome.status) == (1, 200)
    assert h.host().breaker.state is BreakerState.CLOSED
    snapshot = throttle.snapshot()
    assert (snapshot.tries, snapshot.accepts, snapshot.probability) == (0, 0, 0.0)
