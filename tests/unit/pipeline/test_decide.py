"""The whole chain on a fake clock: tiers, waits, Retry-After, give-up reasons and their order."""

from __future__ import annotations

import io
import random
from email.utils import formatdate

import pytest
import requests
from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError
from urllib3.exceptions import ProxyError as Urllib3ProxyError

from resilient_session import CircuitOpenError, DeadlineExceeded
from resilient_session._pipeline.attempt import Reason, Verdict
from resilient_session._pipeline.drive import drive
from resilient_session._pipeline.stages import standard_chain
from resilient_session._state.breaker import BreakerState, TryResult
from resilient_session.testing import FakeClock, ScriptedTransport

FAST = {"defaults": {"retry": {"backoff_base": 0.1, "backoff_cap": 1.0}}}


def refused() -> requests.ConnectionError:
    """A ConnectionError shaped as requests raises it for a refused connect."""
    cause = NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]
    return requests.ConnectionError(MaxRetryError(None, "/", cause))  # type: ignore[arg-type]


def reset() -> requests.ConnectionError:
    """A ConnectionError shaped as requests raises it for a reset after sending."""
    return requests.ConnectionError(ProtocolError("Connection aborted.", ConnectionResetError()))


def test_503_503_200_retries_to_success(harness, clock):
    """Two 503s then a 200: three tries, two waits, the 200 returned."""
    outcome, transport = harness(FAST).run(503, 503, 200)
    assert (outcome.status, transport.calls, len(clock.sleeps)) == (200, 3, 2)
    assert outcome.decision.verdict is Verdict.SUCCESS


@pytest.mark.parametrize(
    ("status", "tier_reason"),
    [
        (500, Reason.TRANSIENT),
        (502, Reason.TRANSIENT),
        (504, Reason.TRANSIENT),
        (408, Reason.TRANSIENT),
        (425, Reason.TRANSIENT),
        (429, Reason.OVERLOAD),
        (503, Reason.OVERLOAD),
    ],
)
def test_retryable_statuses(harness, status, tier_reason):
    """Each retryable status is retried under its tier, then the 200 ends the call."""
    h = harness(FAST)
    attempt = h.first_attempt()
    transport = ScriptedTransport(h.clock, status, 200)
    first = standard_chain(transport)(attempt)
    assert (first.decision.verdict, first.decision.reason) == (Verdict.RETRY, tier_reason)
    outcome = drive(standard_chain(transport), attempt)
    assert outcome.status == 200


@pytest.mark.parametrize("status", [400, 401, 403, 404, 405, 409, 410, 422, 501, 505])
def test_never_statuses_sent_once(harness, status):
    """A status outside every tier ends the call after one try, as not_retryable."""
    outcome, transport = harness(FAST).run(status, 200)
    assert (outcome.status, transport.calls) == (status, 1)
    assert outcome.decision.reason is Reason.NOT_RETRYABLE


@pytest.mark.parametrize("status", [200, 201, 204, 301, 302, 304])
def test_success_statuses(harness, status):
    """2xx and 3xx end the call at once with success/ok."""
    outcome, transport = harness().run(status)
    assert (outcome.decision.verdict, outcome.decision.reason, transport.calls) == (
        Verdict.SUCCESS,
        Reason.OK,
        1,
    )


@pytest.mark.parametrize(
    "error",
    [
        requests.ConnectTimeout(),
        requests.ReadTimeout(),
        reset(),
        refused(),
        requests.exceptions.ChunkedEncodingError(),
    ],
)
def test_transport_failures_retried_for_get(harness, error):
    """Connection errors, timeouts and broken bodies are transient for an idempotent method."""
    outcome, transport = harness(FAST).run(error, 200)
    assert (outcome.status, transport.calls) == (200, 2)


@pytest.mark.parametrize(
    "error",
    [
        requests.exceptions.SSLError("bad cert"),
        requests.exceptions.InvalidURL(),
        requests.exceptions.InvalidSchema(),
        requests.exceptions.MissingSchema(),
        requests.exceptions.ProxyError(
            "Tunnel connection failed: 407 Proxy Authentication Required"
        ),
        ValueError("not a transport failure"),
    ],
)
def test_configuration_errors_never_retried(harness, error):
    """TLS, URL and proxy-auth errors end the call at once and re-raise the same object."""
    outcome, transport = harness(FAST).run(error, 200)
    assert (transport.calls, outcome.decision.reason) == (1, Reason.NOT_RETRYABLE)
    with pytest.raises(type(error)) as raised:
        outcome.unwrap()
    assert raised.value is error


@pytest.mark.parametrize("method", ["POST", "PATCH"])
def test_non_idempotent_not_retried_on_503(harness, method):
    """POST and PATCH answered 503 are sent once: the upstream may have acted on them."""
    outcome, transport = harness(FAST).run(503, 200, method=method)
    assert (outcome.status, transport.calls, outcome.decision.reason) == (
        503,
        1,
        Reason.NOT_IDEMPOTENT,
    )


def test_post_read_failure_not_retried(harness):
    """A POST whose connection broke after sending is not replayed."""
    outcome, transport = harness(FAST).run(reset(), 200, method="POST")
    assert (transport.calls, outcome.decision.reason) == (1, Reason.NOT_IDEMPOTENT)


@pytest.mark.parametrize("error", [refused(), requests.ConnectTimeout()])
def test_post_connect_failure_retried(harness, error):
    """A POST that never left (refused, connect timeout) is safe to send again."""
    outcome, transport = harness(FAST).run(error, 201, method="POST")
    assert (outcome.status, transport.calls) == (201, 2)


def test_idempotency_key_makes_post_retryable(harness):
    """A POST carrying Idempotency-Key is retried like a GET."""
    outcome, transport = harness(FAST).run(
        503, 201, method="POST", headers={"idempotency-key": "k-1"}
    )
    assert (outcome.status, transport.calls) == (201, 2)


@pytest.mark.parametrize("body", [io.BytesIO(b"payload"), (chunk for chunk in [b"a", b"b"])])
def test_unreplayable_body_sent_once(harness, body):
    """A file or generator body cannot be sent twice, so a failed PUT with one is not retried."""
    outcome, transport = harness(FAST).run(503, 200, method="PUT", body=body)
    assert (transport.calls, outcome.decision.reason) == (1, Reason.BODY_NOT_REPLAYABLE)


def test_max_attempts_bounds_tries(harness):
    """max_attempts counts every try, the first included."""
    config = {"defaults": {"retry": {"max_attempts": 3, "backoff_base": 0.1}}}
    outcome, transport = harness(config).run(502)
    assert (outcome.status, transport.calls, outcome.decision.reason) == (
        502,
        3,
        Reason.MAX_ATTEMPTS,
    )


def test_backoff_waits_within_full_jitter_bounds(harness, clock):
    """Waits before retries 1..3 stay within [0, min(cap, base * 2**(k-1))]."""
    config = {"defaults": {"retry": {"max_attempts": 4, "backoff_base": 0.5, "backoff_cap": 1.5}}}
    harness(config).run(500)
    assert len(clock.sleeps) == 3
    for k, wait in enumerate(clock.sleeps, start=1):
        assert 0 <= wait <= min(1.5, 0.5 * 2 ** (k - 1))


def test_overload_without_retry_after_uses_doubled_base(harness, clock, rng):
    """A 503 without Retry-After waits uniform(0, min(cap, base * 2**k)) before retry k."""
    config = {"defaults": {"retry": {"backoff_base": 1.0, "backoff_cap": 100.0}}}
    expected_rng = random.Random(0)
    harness(config).run(503, 503, 200)
    assert clock.sleeps == [expected_rng.uniform(0, 2.0), expected_rng.uniform(0, 4.0)]


@pytest.mark.parametrize(("header", "wait"), [("2", 2.0), ("0", 0.0), ("1.5", 1.5), (" 7 ", 7.0)])
def test_retry_after_seconds_honoured(harness, clock, header, wait):
    """A 429 with Retry-After in delay-seconds waits exactly that long."""
    outcome, _ = harness().run((429, {"Retry-After": header}), 200)
    assert (outcome.status, clock.sleeps) == (200, [wait] if wait else [])


def test_retry_after_http_date_honoured(harness, clock):
    """A 503 with Retry-After as an HTTP-date waits until that date."""
    date = formatdate(clock.wall() + 12, usegmt=True)
    outcome, _ = harness().run((503, {"Retry-After": date}), 200)
    assert outcome.status == 200
    assert clock.sleeps == [pytest.approx(12.0, abs=1.0)]


def test_retry_after_past_date_means_no_wait(harness, clock):
    """A Retry-After date in the past retries at once."""
    date = formatdate(clock.wall() - 3600, usegmt=True)
    outcome, transport = harness().run((503, {"Retry-After": date}), 200)
    assert (outcome.status, transport.calls, clock.sleeps) == (200, 2, [])


@pytest.mark.parametrize("header", ["soon", "-5", "nan", "", "Mon, 99 Foo 2024"])
def test_bad_retry_after_falls_back_to_backoff(harness, clock, header):
    """Garbage, negative or NaN Retry-After values fall back to the overload backoff."""
    config = {"defaults": {"retry": {"backoff_base": 1.0, "backoff_cap": 1.5}}}
    outcome, _ = harness(config).run((503, {"Retry-After": header}), 200)
    assert outcome.status == 200
    assert len(clock.sleeps) == 1
    assert 0 <= clock.sleeps[0] <= 1.5


def test_retry_after_ignored_on_transient_status(harness, clock):
    """Retry-After on a 500 is ignored; the transient backoff applies."""
    config = {"defaults": {"retry": {"backoff_base": 0.5, "backoff_cap": 0.5}}}
    harness(config).run((500, {"Retry-After": "20"}), 200)
    assert len(clock.sleeps) == 1
    assert clock.sleeps[0] <= 0.5


def test_retry_after_over_cap_ends_with_that_response(harness, clock):
    """A Retry-After above retry_after_cap returns the 503 at once instead of waiting less."""
    outcome, transport = harness().run((503, {"Retry-After": "31"}), 200)
    assert (outcome.status, transport.calls, clock.sleeps) == (503, 1, [])
    assert outcome.decision.reason is Reason.RETRY_AFTER_TOO_LONG


def test_retry_after_at_cap_is_honoured(harness, clock):
    """A Retry-After equal to the cap is still waited for."""
    outcome, _ = harness().run((503, {"Retry-After": "30"}), 200)
    assert (outcome.status, clock.sleeps) == (200, [30.0])


def test_wait_past_deadline_ends_call_with_last_response(harness, clock):
    """When the next wait would end after the deadline, the call ends now with the 503."""
    outcome, transport = harness().run((503, {"Retry-After": "5"}), 200, deadline=3.0)
    assert (outcome.status, transport.calls, clock.sleeps) == (503, 1, [])
    assert outcome.decision.reason is Reason.DEADLINE
    assert outcome.unwrap().status_code == 503


def test_try_cut_by_deadline_raises_even_after_a_response(harness, clock):
    """A last try cut short by the deadline raises DeadlineExceeded, though try 1 had a 503;
    the ReadTimeout it replaced is kept as its original, not chained."""
    outcome, transport = harness().run(
        (503, {"Retry-After": "1"}), requests.ReadTimeout("slow"), deadline=4.0
    )
    assert transport.calls == 2
    assert outcome.decision.reason is Reason.DEADLINE
    with pytest.raises(DeadlineExceeded) as raised:
        outcome.unwrap()
    assert isinstance(raised.value, requests.Timeout)
    assert isinstance(raised.value.original, requests.ReadTimeout)
    assert (raised.value.__cause__, raised.value.__context__) == (None, None)


def test_read_timeout_not_clamped_by_deadline_is_plain_timeout(harness):
    """A read timeout shorter than what remains is the caller's own: ReadTimeout, retried."""
    outcome, transport = harness(FAST).run(
        requests.ReadTimeout(), 200, timeout=(1.0, 1.0), deadline=60.0
    )
    assert (outcome.status, transport.calls) == (200, 2)


def test_deadline_clamps_timeouts_and_sets_header(harness, clock):
    """Each try's timeouts are clamped to what remains and the header carries the floor in ms."""
    _outcome, transport = harness().run(
        (503, {"Retry-After": "2"}), 200, latency=0.25, deadline=10.0, timeout=(3.0, 30.0)
    )
    first, second = transport.sent
    assert first.timeout == (3.0, 10.0)
    assert second.timeout == (3.0, pytest.approx(10.0 - 2.25))
    assert first.request.headers["X-Request-Timeout-Ms"] == "10000"
    assert second.request.headers["X-Request-Timeout-Ms"] == "7750"
    assert "X-Request-Timeout-Ms" not in first.call.request.headers


def test_no_deadline_no_header_and_default_timeout(harness):
    """Without a deadline no header is sent and the configured default timeout applies."""
    _, transport = harness().run(200)
    (attempt,) = transport.sent
    assert "X-Request-Timeout-Ms" not in attempt.request.headers
    assert attempt.timeout == (5.0, 30.0)


def test_caller_timeout_passed_through_untouched(harness):
    """A caller's own timeout object reaches the transport unchanged when there is no deadline."""
    _, transport = harness().run(200, timeout=7)
    assert transport.sent[0].timeout == 7


def test_deadline_spent_before_first_try_fails_fast(harness, clock):
    """A call whose deadline is already spent never reaches the transport."""
    h = harness()
    attempt = h.first_attempt(deadline=1.0)
    clock.advance(2.0)
    transport = ScriptedTransport(clock, 200)
    outcome = drive(standard_chain(transport), attempt)
    assert (transport.calls, outcome.decision.verdict, outcome.decision.reason) == (
        0,
        Verdict.FAIL_FAST,
        Reason.DEADLINE_SPENT,
    )
    with pytest.raises(DeadlineExceeded):
        outcome.unwrap()


def test_breaker_opening_ends_the_call(harness):
    """A try that opens the breaker plans no retry: the call ends with breaker_open."""
    config = {"defaults": {"breaker": {"failure_threshold": 2}, "retry": {"backoff_base": 0.1}}}
    outcome, transport = harness(config).run(500)
    assert (outcome.status, transport.calls, outcome.decision.reason) == (
        500,
        2,
        Reason.BREAKER_OPEN,
    )


def test_open_breaker_refuses_first_try(harness):
    """With the breaker open, the next call raises CircuitOpenError without a try."""
    config = {"defaults": {"breaker": {"failure_threshold": 1}}}
    h = harness(config)
    h.run(500)
    outcome, transport = h.run(200)
    assert (transport.calls, outcome.decision.verdict, outcome.decision.reason) == (
        0,
        Verdict.FAIL_FAST,
        Reason.BREAKER_OPEN,
    )
    with pytest.raises(CircuitOpenError):
        outcome.unwrap()


def test_refused_later_try_returns_last_real_result(harness, clock, monkeypatch):
    """If the breaker opens during the wait, the refused try is logged and the 503 returned."""
    h = harness({"defaults": {"breaker": {"failure_threshold": 3}}})
    breaker = h.host().breaker

    def trip_during_wait(seconds: float) -> None:
        FakeClock.sleep(clock, seconds)
        for _ in range(2):  # with the 503 itself, the third consecutive failure
            permit, _ = breaker.allow()
            assert permit is not None
            breaker.record(permit, TryResult.FAILURE)

    monkeypatch.setattr(clock, "sleep", trip_during_wait)
    outcome, transport = h.run((503, {"Retry-After": "1"}), 200)
    assert transport.calls == 1
    assert (outcome.decision.verdict, outcome.decision.reason) == (
        Verdict.FAIL_FAST,
        Reason.BREAKER_OPEN,
    )
    assert outcome.unwrap().status_code == 503


def test_budget_exhausted_ends_with_last_result(harness):
    """With one token left, a call retries once and then gives up with budget_exhausted."""
    config = {
        "defaults": {
            "budget": {"max_tokens": 1, "ratio": 0, "min_per_second": 0},
            "retry": {"backoff_base": 0.1},
        }
    }
    outcome, transport = harness(config).run(503)
    assert (outcome.status, transport.calls, outcome.decision.reason) == (
        503,
        2,
        Reason.BUDGET_EXHAUSTED,
    )


def test_give_up_reason_order_not_retryable_first(harness):
    """A 404 on a POST with a file body at the last attempt reports not_retryable."""
    config = {"defaults": {"retry": {"max_attempts": 1}}}
    outcome, _ = harness(config).run(404, method="POST", body=io.BytesIO(b"x"))
    assert outcome.decision.reason is Reason.NOT_RETRYABLE


def test_give_up_reason_order_not_idempotent_before_body(harness):
    """A 503 on a POST with a file body reports not_idempotent before body_not_replayable."""
    outcome, _ = harness().run(503, method="POST", body=io.BytesIO(b"x"))
    assert outcome.decision.reason is Reason.NOT_IDEMPOTENT


def test_give_up_reason_order_max_attempts_before_retry_after(harness):
    """At the last attempt, a too-long Retry-After reports max_attempts."""
    config = {"defaults": {"retry": {"max_attempts": 1}}}
    outcome, _ = harness(config).run((503, {"Retry-After": "999"}))
    assert outcome.decision.reason is Reason.MAX_ATTEMPTS


def test_give_up_reason_order_deadline_before_budget(harness):
    """With no budget and no time left for the wait, the deadline is named, not the budget."""
    config = {"defaults": {"budget": {"max_tokens": 1, "ratio": 0, "min_per_second": 0}}}
    h = harness(config)
    assert h.host().bucket.try_withdraw()
    outcome, _ = h.run((503, {"Retry-After": "5"}), deadline=2.0)
    assert outcome.decision.reason is Reason.DEADLINE


def test_token_withdrawn_only_for_a_retry_that_happens(harness):
    """A give-up for any other reason leaves the budget untouched."""
    config = {"defaults": {"budget": {"max_tokens": 2, "ratio": 0, "min_per_second": 0}}}
    h = harness(config)
    h.run(404)
    h.run((503, {"Retry-After": "99"}))
    assert h.host().bucket.snapshot().tokens == 2.0


def test_retries_that_cannot_connect_return_the_last_reached_result(harness):
    """A broken body, then retries refused at connect: the caller sees the broken body, as
    plain requests would, not the refusal of a retry that never reached the upstream."""
    broken = requests.exceptions.ChunkedEncodingError("body cut")
    outcome, transport = harness(FAST).run(broken, refused())
    assert transport.calls == 4
    with pytest.raises(requests.exceptions.ChunkedEncodingError) as raised:
        outcome.unwrap()
    assert raised.value is broken


def test_503_then_refused_returns_the_503(harness):
    """A 503, then an upstream that stops accepting connections: the 503 is returned."""
    outcome, transport = harness(FAST).run(503, refused())
    assert transport.calls == 4
    assert outcome.unwrap().status_code == 503


def test_refused_from_the_first_try_raises_connection_error(harness):
    """When no try ever reached the upstream, the last refusal is raised."""
    outcome, transport = harness(FAST).run(refused())
    assert transport.calls == 4
    with pytest.raises(requests.ConnectionError):
        outcome.unwrap()


def proxy_error(reason: Exception) -> requests.exceptions.ProxyError:
    """A ProxyError shaped as requests raises it when the proxy fails: urllib3's ProxyError,
    carrying what went wrong, inside MaxRetryError."""
    cause = Urllib3ProxyError("Unable to connect to proxy", reason)
    return requests.exceptions.ProxyError(MaxRetryError(None, "/", cause))  # type: ignore[arg-type]


def test_post_through_a_refusing_proxy_is_retried(harness):
    """A proxy that refused the connection never saw the POST: a connect failure, retried."""
    refusal = NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]
    outcome, transport = harness(FAST).run(proxy_error(refusal), 201, method="POST")
    assert (outcome.status, transport.calls) == (201, 2)


def test_proxy_that_wants_credentials_is_never_retried(harness):
    """A proxy that answered 407 stays a never-retried error, for a GET as for a POST."""
    wants = OSError("Tunnel connection failed: 407 Proxy Authentication Required")
    for method in ("GET", "POST"):
        outcome, transport = harness(FAST).run(proxy_error(wants), 200, method=method)
        assert (transport.calls, outcome.decision.reason) == (1, Reason.NOT_RETRYABLE)


def test_tries_cut_by_the_callers_deadline_leave_the_breaker_closed(harness, clock):
    """Twenty tries cut short because the caller's deadline clamped the host's own timeouts
    (ten read timeouts, ten bodies cut at the deadline) are neutral: the breaker stays closed,
    and a call without a deadline then goes through on its first try."""
    h = harness({"defaults": {"breaker": {"failure_threshold": 5}}})
    body_cut = DeadlineExceeded("deadline ran out while reading the body of 200")
    for step in [requests.ReadTimeout("slow")] * 10 + [body_cut] * 10:
        outcome, transport = h.run(step, latency=0.1, deadline=0.1)
        assert (transport.calls, outcome.decision.reason) == (1, Reason.DEADLINE)
        assert isinstance(outcome.error, DeadlineExceeded)
    assert h.host().breaker.state is BreakerState.CLOSED
    outcome, transport = h.run(200)
    assert (outcome.status, transport.calls) == (200, 1)


def test_tries_that_run_into_the_hosts_own_timeout_open_the_breaker(harness, clock):
    """Five read timeouts that are the host's own (1 s, well inside a 60 s deadline) are
    failures: the fifth opens the breaker and the next call is refused."""
    config = {"defaults": {"breaker": {"failure_threshold": 5}, "retry": {"max_attempts": 1}}}
    h = harness(config)
    for _ in range(5):
        assert h.host().breaker.state is BreakerState.CLOSED
        outcome, _ = h.run(requests.ReadTimeout("slow"), timeout=(1.0, 1.0), deadline=60.0)
        assert type(outcome.error) is requests.ReadTimeout
    assert h.host().breaker.state is BreakerState.OPEN
    outcome, transport = h.run(200)
    assert (transport.calls, outcome.decision.reason) == (0, Reason.BREAKER_OPEN)
