"""Deadlines against real sockets: hangs and slow bodies are cut, the header shrinks."""

from __future__ import annotations

import time

import pytest
import requests

import resilient_session
from resilient_session import DeadlineExceeded
from resilient_session.testing.upstream import Drip, Hang, Reply

pytestmark = pytest.mark.integration

HEADER = "X-Request-Timeout-Ms"


def test_hanging_upstream_raises_deadline_exceeded_at_the_deadline(upstream, make_session):
    """A hanging upstream ends the call about 1 s in with DeadlineExceeded, a requests.Timeout."""
    upstream.script("/hang", Hang(10))
    caught: BaseException | None = None

    started = time.monotonic()
    try:
        make_session().get(upstream.url("/hang"), deadline=1.0)
    except requests.Timeout as exc:  # what code written for plain requests already catches
        caught = exc
    elapsed = time.monotonic() - started

    assert type(caught) is DeadlineExceeded
    assert 0.9 <= elapsed < 1.6
    assert upstream.hits("/hang") == 1


def test_deadline_context_manager_bounds_the_call(upstream, make_session):
    """``with deadline(0.3)`` bounds a call that passes no deadline of its own."""
    upstream.script("/hang", Hang(10))
    session = make_session()

    started = time.monotonic()
    with resilient_session.deadline(0.3), pytest.raises(DeadlineExceeded):
        session.get(upstream.url("/hang"))
    elapsed = time.monotonic() - started

    assert 0.25 <= elapsed < 0.9


def test_deadline_header_is_sent_on_every_try_and_shrinks(upstream, make_session):
    """Each of three tries carries X-Request-Timeout-Ms, at most 5000 and strictly shrinking."""
    # A little latency per answer so every try starts at least a few milliseconds later.
    upstream.script(
        "/budgeted", Reply(503, delay=0.01), Reply(503, delay=0.01), Reply(200, delay=0.01)
    )

    response = make_session().get(upstream.url("/budgeted"), deadline=5.0)

    assert response.status_code == 200
    sent = [hit.header(HEADER) for hit in upstream.received("/budgeted")]
    assert len(sent) == 3
    assert all(value is not None and value.isdigit() for value in sent)
    remaining_ms = [int(value) for value in sent if value is not None]
    assert 4800 < remaining_ms[0] <= 5000
    assert remaining_ms[0] > remaining_ms[1] > remaining_ms[2] > 0


def test_no_deadline_header_without_a_deadline(upstream, make_session):
    """A call without a deadline sends no X-Request-Timeout-Ms on any of its tries."""
    upstream.script("/free", Reply(503), Reply(200))

    response = make_session().get(upstream.url("/free"))

    assert response.status_code == 200
    assert [hit.header(HEADER) for hit in upstream.received("/free")] == [None, None]


def test_slow_drip_body_is_cut_at_the_deadline(upstream, make_session):
    """A 200 whose body drips one byte every 50 ms is cut by a 0.5 s deadline."""
    upstream.script("/drip", Drip(total_bytes=200, interval=0.05))

    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        make_session().get(upstream.url("/drip"), deadline=0.5)
    elapsed = time.monotonic() - started

    assert 0.45 <= elapsed < 0.9
    assert upstream.hits("/drip") == 1


def test_retry_after_past_the_deadline_returns_the_503_at_once(upstream, make_session):
    """A Retry-After of 5 s on a call with 1 s left ends the call with the 503, without waiting."""
    upstream.script("/later", Reply(503, headers={"Retry-After": "5"}), Reply(200))

    started = time.monotonic()
    response = make_session().get(upstream.url("/later"), deadline=1.0)
    elapsed = time.monotonic() - started

    assert response.status_code == 503
    assert upstream.hits("/later") == 1
    assert elapsed < 0.5


def test_try_cut_by_the_deadline_raises_even_after_an_earlier_response(upstream, make_session):
    """A 503 then a hanging try end in DeadlineExceeded at the deadline, not in the 503."""
    upstream.script("/half", Reply(503), Hang(10))

    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        make_session().get(upstream.url("/half"), deadline=0.5)
    elapsed = time.monotonic() - started

    assert 0.45 <= elapsed < 0.9
    assert upstream.hits("/half") == 2


def test_streamed_retry_does_not_drain_past_the_deadline(upstream, make_session):
    """With stream=True, draining a retried 503 whose body drips is cut at the deadline."""
    upstream.script("/drip", Drip(total_bytes=30, interval=0.05, status=503), Reply(200))
    session = make_session()

    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        session.get(upstream.url("/drip"), deadline=0.5, stream=True)
    elapsed = time.monotonic() - started

    assert upstream.hits("/drip") == 1
    assert elapsed < 0.9


def test_the_configured_default_spans_every_redirect_hop(upstream, make_session):
    """Six redirects of 0.4 s each under a 1 s ``deadline.default``: DeadlineExceeded about
    1 s into the call, on the third hop, instead of a 200 after 2.4 s."""
    hops = 6
    for hop in range(hops):
        location = f"/hop{hop + 1}" if hop + 1 < hops else "/end"
        upstream.script(f"/hop{hop}", Reply(302, headers={"Location": location}, delay=0.4))
    session = make_session(deadline={"default": 1.0})

    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        session.get(upstream.url("/hop0"))
    elapsed = time.monotonic() - started

    assert 0.95 <= elapsed < 1.5
    assert [upstream.hits(f"/hop{hop}") for hop in range(hops)] == [1, 1, 1, 0, 0, 0]
    assert upstream.hits("/end") == 0
