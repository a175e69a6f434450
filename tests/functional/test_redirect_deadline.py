"""A configured ``deadline.default`` spans the whole call, every redirect hop included, as an
explicit ``deadline=`` does: measured from the call's start, narrowed by each hop's host."""

from __future__ import annotations

from typing import Any

import pytest
import requests
import responses

from resilient_session import DeadlineExceeded, ResilientSession, deadline
from resilient_session.testing import FakeClock

HOPS = 6
HOP_LATENCY = 0.4
HEADER = "X-Request-Timeout-Ms"


def _redirects(mock: responses.RequestsMock, clock: FakeClock, base: str, final: str) -> None:
    """``/hop0`` .. ``/hop5`` each take 0.4 s and redirect to the next; the last one to
    *final*; *final* answers 200 at once."""

    def slow_redirect(target: str) -> Any:
        def answer(request: requests.PreparedRequest) -> tuple[int, dict[str, str], str]:
            clock.advance(HOP_LATENCY)
            return 302, {"Location": target}, ""

        return answer

    for hop in range(HOPS):
        target = f"{base}/hop{hop + 1}" if hop + 1 < HOPS else final
        mock.add_callback(responses.GET, f"{base}/hop{hop}", callback=slow_redirect(target))
    mock.add(responses.GET, final, body="end")


def _session(clock: FakeClock, hosts: dict[str, Any] | None = None) -> ResilientSession:
    config: dict[str, Any] = {"defaults": {"retry": {"max_attempts": 1}}}
    if hosts is None:
        config["defaults"]["deadline"] = {"default": 1.0}
    else:
        config["hosts"] = hosts
    return ResilientSession(config, clock=clock)


def test_the_configured_default_ends_a_chain_of_slow_redirects(clock):
    """Six hops of 0.4 s under a 1 s default: the fourth hop finds the deadline spent, 1.2 s
    into the call, and the call raises DeadlineExceeded instead of following all six."""
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        _redirects(mock, clock, "http://svc.test", "http://svc.test/end")
        started = clock.now
        with pytest.raises(DeadlineExceeded):
            _session(clock).get("http://svc.test/hop0")
        sent = [call.request.headers[HEADER] for call in mock.calls]
    assert clock.now - started == pytest.approx(3 * HOP_LATENCY)
    assert sent == ["1000", "600", "200"]


def test_a_hop_to_a_host_without_a_default_stays_within_the_first_hosts(clock):
    """svc.test (default 1 s) redirects to other.test (no default): the hop to other.test,
    0.4 s in, still carries what is left of svc.test's default, 600 ms."""
    hosts = {"svc.test": {"deadline": {"default": 1.0}}}
    with responses.RequestsMock() as mock:
        mock.add_callback(
            responses.GET,
            "http://svc.test/start",
            callback=lambda request: (
                clock.advance(HOP_LATENCY),
                (302, {"Location": "http://other.test/end"}, ""),
            )[1],
        )
        mock.add(responses.GET, "http://other.test/end", body="end")
        response = _session(clock, hosts).get("http://svc.test/start")
        sent = [call.request.headers.get(HEADER) for call in mock.calls]
    assert response.text == "end"
    assert sent == ["1000", "600"]


def test_an_explicit_deadline_still_replaces_the_default(clock):
    """``deadline=5`` replaces the 1 s default: all six hops of 0.4 s run, 2.4 s in all."""
    with responses.RequestsMock() as mock:
        _redirects(mock, clock, "http://svc.test", "http://svc.test/end")
        response = _session(clock).get("http://svc.test/hop0", deadline=5.0)
        assert len(mock.calls) == HOPS + 1
    assert response.text == "end"
    assert len(response.history) == HOPS


def test_a_block_without_a_deadline_still_switches_the_default_off(clock):
    """Inside ``with deadline(None)`` no default applies: the six hops all run."""
    with responses.RequestsMock() as mock:
        _redirects(mock, clock, "http://svc.test", "http://svc.test/end")
        with deadline(None):
            response = _session(clock).get("http://svc.test/hop0")
        assert HEADER not in mock.calls[-1].request.headers
    assert len(response.history) == HOPS


def test_each_call_measures_the_default_from_its_own_start(clock):
    """Two calls one after another, each of two 0.4 s hops under a 1 s default: both end."""
    with responses.RequestsMock() as mock:
        for path in ("/a", "/b"):
            mock.add_callback(
                responses.GET,
                f"http://svc.test{path}",
                callback=lambda request: (
                    clock.advance(HOP_LATENCY),
                    (302, {"Location": "http://svc.test/end"}, ""),
                )[1],
            )
        mock.add(responses.GET, "http://svc.test/end", body="end")
        session = _session(clock)
        texts = [session.get(f"http://svc.test{path}").text for path in ("/a", "/b")]
    assert texts == ["end", "end"]
