"""Which failures are retried, and how long between tries, against a real loopback upstream."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Iterator

import pytest
import requests
from structlog.testing import capture_logs

from resilient_session import CircuitOpenError
from resilient_session.testing.upstream import CloseWithoutReply, Reply, ResetMidBody, refused_url

pytestmark = pytest.mark.integration


def test_503_503_200_ends_in_200_after_three_tries(upstream, make_session):
    """Two 503s then a 200 give the caller the 200, after exactly three hits on the upstream."""
    upstream.script("/items", Reply(503), Reply(503), Reply(200, body=b"items"))

    response = make_session().get(upstream.url("/items"))

    assert (response.status_code, response.content) == (200, b"items")
    assert upstream.hits("/items") == 3


def test_retry_after_delay_seconds_is_honoured(upstream, make_session):
    """A 503 with ``Retry-After: 1`` makes the second try wait at least one second."""
    upstream.script("/slow-down", Reply(503, headers={"Retry-After": "1"}), Reply(200))

    started = time.monotonic()
    response = make_session().get(upstream.url("/slow-down"))
    elapsed = time.monotonic() - started

    assert response.status_code == 200
    assert upstream.hits("/slow-down") == 2
    assert 1.0 <= elapsed < 1.8
    first, second = upstream.received("/slow-down")
    assert second.at - first.at >= 1.0


def test_retry_after_http_date_is_honoured(upstream, make_session):
    """A 429 whose Retry-After is an HTTP-date about 2 s ahead waits until that date."""
    # HTTP-dates have whole seconds, so the date lies between 1 and 2 s from now.
    retry_at = time.time() + 2.0
    http_date = email.utils.formatdate(retry_at, usegmt=True)
    upstream.script("/dated", Reply(429, headers={"Retry-After": http_date}), Reply(200))

    started_wall = time.time()
    started = time.monotonic()
    response = make_session().get(upstream.url("/dated"))
    elapsed = time.monotonic() - started

    asked = email.utils.parsedate_to_datetime(http_date).timestamp() - started_wall
    assert response.status_code == 200
    assert upstream.hits("/dated") == 2
    assert 1.0 - 0.05 < asked <= 2.0
    assert asked - 0.05 <= elapsed < asked + 0.8


def test_retry_after_over_the_cap_returns_the_503_at_once(upstream, make_session):
    """A Retry-After of 120 s (cap 30 s) ends the call with that 503 after one hit, no wait."""
    upstream.script("/later", Reply(503, headers={"Retry-After": "120"}, body=b"busy"))

    started = time.monotonic()
    response = make_session().get(upstream.url("/later"))
    elapsed = time.monotonic() - started

    assert (response.status_code, response.content) == (503, b"busy")
    assert response.headers["Retry-After"] == "120"
    assert upstream.hits("/later") == 1
    assert elapsed < 0.5


@pytest.mark.parametrize("status", [404, 400, 401])
def test_client_errors_are_not_retried(upstream, make_session, status):
    """A 404, 400 or 401 is returned as is after a single hit."""
    upstream.script("/client-error", Reply(status), Reply(200))

    response = make_session().get(upstream.url("/client-error"))

    assert response.status_code == status
    assert upstream.hits("/client-error") == 1


def test_post_503_is_not_retried(upstream, make_session):
    """A POST without Idempotency-Key answered 503 returns that 503 after one hit."""
    upstream.script("/orders", Reply(503), Reply(200))

    response = make_session().post(upstream.url("/orders"), json={"sku": 1})

    assert response.status_code == 503
    assert upstream.hits("/orders") == 1


def test_post_with_idempotency_key_is_retried(upstream, make_session):
    """A POST carrying Idempotency-Key is retried on 503 and sends the same key both times."""
    upstream.script("/orders", Reply(503), Reply(201, body=b"created"))

    response = make_session().post(
        upstream.url("/orders"), json={"sku": 1}, headers={"Idempotency-Key": "order-42"}
    )

    assert (response.status_code, response.content) == (201, b"created")
    hits = upstream.received("/orders")
    assert [(hit.method, hit.header("Idempotency-Key")) for hit in hits] == [
        ("POST", "order-42"),
        ("POST", "order-42"),
    ]
    assert hits[0].body == hits[1].body == b'{"sku": 1}'


def test_refused_connection_is_retried_even_for_post(make_session):
    """A refused connect never sent the POST, so it is retried up to max_attempts, then raised."""
    session = make_session(retry={"max_attempts": 3})

    with capture_logs() as logs, pytest.raises(requests.ConnectionError) as raised:
        session.post(refused_url("/orders"), data=b"payload")

    assert not isinstance(raised.value, CircuitOpenError)
    tries = [event for event in logs if event["event"] == "http.try"]
    assert [(e["method"], e["attempt"], e["error"], e["status"]) for e in tries] == [
        ("POST", 1, "ConnectionError", None),
        ("POST", 2, "ConnectionError", None),
        ("POST", 3, "ConnectionError", None),
    ]
    assert [(e["decision"], e["reason"]) for e in tries] == [
        ("retry", "transient"),
        ("retry", "transient"),
        ("give_up", "max_attempts"),
    ]


def test_reset_mid_body_is_retried_for_get(upstream, make_session):
    """A GET whose body is cut by a TCP reset is retried and returns the next full body."""
    full = b"0123456789" * 100
    upstream.script("/report", ResetMidBody(sent=b"01234"), Reply(200, body=full))

    with capture_logs() as logs:
        response = make_session().get(upstream.url("/report"))

    assert (response.status_code, response.content) == (200, full)
    assert upstream.hits("/report") == 2
    tries = [event for event in logs if event["event"] == "http.try"]
    assert [(e["attempt"], e["status"], e["error"], e["decision"]) for e in tries] == [
        (1, None, "ChunkedEncodingError", "retry"),
        (2, 200, None, "success"),
    ]


def test_connection_closed_without_reply_is_retried_for_get(upstream, make_session):
    """A GET whose connection closes before any byte of the answer is retried and gets the 200."""
    upstream.script("/dropped", CloseWithoutReply(), Reply(200, body=b"back"))

    response = make_session().get(upstream.url("/dropped"))

    assert (response.status_code, response.content) == (200, b"back")
    assert upstream.hits("/dropped") == 2


def test_connection_closed_without_reply_is_not_retried_for_post(upstream, make_session):
    """A POST that may have been processed before the connection closed is not sent again."""
    upstream.script("/dropped", CloseWithoutReply(), Reply(200))

    with pytest.raises(requests.ConnectionError):
        make_session().post(upstream.url("/dropped"), data=b"charge")

    assert upstream.hits("/dropped") == 1


def test_generator_body_is_never_replayed(upstream, make_session):
    """A POST whose body is a generator gets its 503 back after one hit, key or not."""
    upstream.script("/upload", Reply(503), Reply(200))

    def body() -> Iterator[bytes]:
        yield b"part-1;"
        yield b"part-2"

    with capture_logs() as logs:
        response = make_session().post(
            upstream.url("/upload"), data=body(), headers={"Idempotency-Key": "up-1"}
        )

    assert response.status_code == 503
    assert [hit.body for hit in upstream.received("/upload")] == [b"part-1;part-2"]
    assert [(e["decision"], e["reason"]) for e in logs if e["event"] == "http.try"] == [
        ("give_up", "body_not_replayable")
    ]
