"""The concurrency limit on loopback: a healthy slow host sees no refusal, a hanging one is
sent only the limit's worth of tries."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
import requests
from structlog.testing import capture_logs

from resilient_session import CircuitOpenError, ConcurrencyLimitError, ResilientSession
from resilient_session._state.limit import ConcurrencyLimit
from resilient_session.testing.upstream import FlakyUpstream, Hang, Reply
from tests.threads import run_together

pytestmark = pytest.mark.integration


def test_64_calls_in_flight_to_a_200_ms_host_are_never_refused(upstream):
    """64 threads at once on a fresh session: the 33rd try raises the limit (32) to the burst
    (64) instead of waiting, the first answer keeps it at the 64 it came back from, and each
    success near the limit adds one. Three rounds, 192 calls: zero refusals, every call
    answered 200."""
    upstream.script("/slow", Reply(200, body=b"ok", delay=0.2))
    url = upstream.url("/slow")
    results: Counter[object] = Counter()
    lock = threading.Lock()
    with ResilientSession() as session:

        def body(_: int) -> None:
            for _round in range(3):
                try:
                    status: object = session.get(url, timeout=5).status_code
                except ConcurrencyLimitError:
                    status = ConcurrencyLimitError
                with lock:
                    results[status] += 1

        run_together(64, body, timeout=30)
        health = session.health()[_key(upstream)]
    assert results == {200: 192}
    assert upstream.hits("/slow") == 192
    assert (health.limited, health.refused, health.in_flight) == (0, 0, 0)
    assert health.limit >= 64


def test_a_hanging_host_gets_the_limits_worth_of_tries_and_the_rest_fail_fast(make_session):
    """Limit 4 with no burst above it, 20 calls at once to a host that accepts and never
    answers: 4 tries reach it and wait out their timeout; 16 calls get ConcurrencyLimitError
    after about max_wait, events say fail_fast/concurrency_limit, and health agrees."""
    max_wait = 0.3
    session = make_session(
        retry={"max_attempts": 1},
        limit={"initial": 4, "initial_burst": 4, "min": 4, "max_wait": max_wait},
    )
    with FlakyUpstream() as up:
        up.script("/hang", Hang(10))
        url = up.url("/hang")
        ended: dict[int, tuple[object, float]] = {}
        lock = threading.Lock()

        def body(index: int) -> None:
            started = time.monotonic()
            try:
                result: object = session.get(url, timeout=(2, 2)).status_code
            except requests.ConnectionError as refused:
                # What callers already catch; every local refusal is a CircuitOpenError too.
                assert isinstance(refused, CircuitOpenError)  # noqa: PT017 - in a thread
                result = type(refused)
            except requests.Timeout:
                result = requests.Timeout
            with lock:
                ended[index] = (result, time.monotonic() - started)

        with capture_logs() as logs:
            run_together(20, body, timeout=30)
        hits = up.hits("/hang")
    outcomes = Counter(result for result, _ in ended.values())
    assert outcomes == {ConcurrencyLimitError: 16, requests.Timeout: 4}
    assert hits == 4
    refused = sorted(took for result, took in ended.values() if result is ConcurrencyLimitError)
    # Each waited max_wait for a slot that never freed; the margin is for a loaded machine.
    assert refused[0] >= max_wait - 0.01
    assert refused[-1] < max_wait + 0.5
    timed_out_after = [took for result, took in ended.values() if result is requests.Timeout]
    assert min(timed_out_after) >= 2.0
    tries = [event for event in logs if event["event"] == "http.try"]
    decisions = Counter((event["decision"], event["reason"]) for event in tries)
    assert decisions[("fail_fast", "concurrency_limit")] == 16
    assert sum(decisions.values()) == 20
    [health] = session.health().values()
    assert (health.limited, health.refused, health.tries, health.in_flight) == (16, 16, 4, 0)
    # Four timeouts: 4 stays 4, the floor; the breaker saw 4 failures and no refusal.
    assert (health.limit, health.failures, health.rejected) == (4, 4, 0)


def test_a_fresh_session_makes_no_try_of_a_burst_of_64_wait(upstream, monkeypatch):
    """64 threads at once, three calls each, to a 200 ms host on a fresh session: no try ever
    waits for a slot (the limit of 32 rises to the burst of 64 instead), none is refused, and
    the limit the answers earned holds the whole flight. The latency this saves is measured
    against plain requests by benchmarks/storm.py's healthy row, not timed here."""
    waits: list[float | None] = []
    real_wait = ConcurrencyLimit._wait_for_slot

    def counted_wait(self: ConcurrencyLimit, deadline_at: float | None) -> bool:
        waits.append(deadline_at)
        return real_wait(self, deadline_at)

    monkeypatch.setattr(ConcurrencyLimit, "_wait_for_slot", counted_wait)
    upstream.script("/slow", Reply(200, body=b"ok", delay=0.2))
    url = upstream.url("/slow")
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    with ResilientSession() as session:

        def body(_: int) -> None:
            for _round in range(3):
                status = session.get(url, timeout=5).status_code
                with lock:
                    statuses[status] += 1

        run_together(64, body, timeout=30)
        health = session.health()[_key(upstream)]
    assert (statuses, len(waits)) == ({200: 192}, 0)
    assert (health.limited, health.refused, health.in_flight) == (0, 0, 0)
    assert health.limit >= 64


def _key(upstream: FlakyUpstream) -> str:
    return f"http://{upstream.host}:{upstream.port}"
