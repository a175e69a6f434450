"""inbound.trusted_networks on real servers: service B under waitress (Flask) and uvicorn
(Starlette) adopts a caller's retry intent and deadline only from a peer inside the listed
networks; from any other peer its calls to C run under B's own policy."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

import flask
import pytest
import requests
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from werkzeug.middleware.proxy_fix import ProxyFix

from resilient_session import ResilientSession
from resilient_session.inbound import ASGIMiddleware, WSGIMiddleware
from resilient_session.testing.upstream import FlakyUpstream, Reply
from tests.integration.servers import uvicorn_server, waitress_server

pytestmark = pytest.mark.integration

RETRY: dict[str, Any] = {
    "defaults": {
        "retry": {"max_attempts": 4, "backoff_base": 0.01, "backoff_cap": 0.02},
        "breaker": {"failure_threshold": 1000},
        "throttle": {"enabled": False},
    }
}


def _config(networks: list[str]) -> dict[str, Any]:
    return {**RETRY, "inbound": {"trusted_networks": networks}}


def _call_c(session: ResilientSession, c_url: str) -> tuple[int, str]:
    """B's handler: one call to C, its status passed on (a failure as a 504)."""
    try:
        response = session.get(c_url)
    except requests.RequestException as exc:
        return 504, type(exc).__name__
    return response.status_code, response.text


def waitress_flask(
    session: ResilientSession, c_url: str, config: dict[str, Any]
) -> AbstractContextManager[str]:
    app = flask.Flask("b")

    @app.get("/call")
    def call() -> tuple[str, int]:
        status, text = _call_c(session, c_url)
        return text, status

    app.wsgi_app = WSGIMiddleware(app.wsgi_app, config)  # type: ignore[method-assign]
    return waitress_server(app)


def uvicorn_starlette(
    session: ResilientSession, c_url: str, config: dict[str, Any]
) -> AbstractContextManager[str]:
    def call(request: Request) -> PlainTextResponse:
        status, text = _call_c(session, c_url)
        return PlainTextResponse(text, status_code=status)

    app = Starlette(routes=[Route("/call", call)])
    app.add_middleware(ASGIMiddleware, config=config)
    return uvicorn_server(app)


STACKS = pytest.mark.parametrize("stack", [waitress_flask, uvicorn_starlette])


@pytest.fixture
def c() -> Iterator[FlakyUpstream]:
    with FlakyUpstream() as upstream:
        yield upstream


@pytest.fixture
def b_session() -> Iterator[ResilientSession]:
    with ResilientSession(RETRY) as session:
        yield session


@STACKS
def test_an_untrusted_caller_cannot_switch_off_the_services_retries(stack, c, b_session):
    """From 127.0.0.1 with only 10.0.0.0/8 trusted, "attempt 1 of 2" is ignored: B retries
    C's 503, 503 to the 200, three tries."""
    c.script("/c", Reply(503), Reply(503), Reply(200, body=b"fine"))
    with stack(b_session, c.url("/c"), _config(["10.0.0.0/8"])) as b:
        response = requests.get(b + "/call", headers={"X-Request-Attempt": "1; max=2"}, timeout=10)
    assert (response.status_code, response.text, c.hits("/c")) == (200, "fine", 3)
    assert b_session.health()[c.base_url].retries == 2


@STACKS
def test_a_trusted_caller_gets_one_try(stack, c, b_session):
    """From 127.0.0.1 with 127.0.0.0/8 trusted, "attempt 1 of 2" makes B try C once: 503."""
    c.script("/c", Reply(503), Reply(503), Reply(200, body=b"fine"))
    with stack(b_session, c.url("/c"), _config(["10.0.0.0/8", "127.0.0.0/8"])) as b:
        response = requests.get(b + "/call", headers={"X-Request-Attempt": "1; max=2"}, timeout=10)
    assert (response.status_code, c.hits("/c")) == (503, 1)
    assert b_session.health()[c.base_url].retries == 0


@STACKS
def test_an_untrusted_zero_deadline_is_ignored(stack, c, b_session):
    """X-Request-Timeout-Ms: 0 from an untrusted peer is no immediate error: C is called and
    answers; from a trusted one, B fails at once without calling C."""
    c.script("/c", Reply(200, body=b"fine"))
    headers = {"X-Request-Timeout-Ms": "0"}
    with stack(b_session, c.url("/c"), _config(["::1/128"])) as b:
        untrusted = requests.get(b + "/call", headers=headers, timeout=10)
    with stack(b_session, c.url("/c"), _config(["127.0.0.1"])) as b:
        trusted = requests.get(b + "/call", headers=headers, timeout=10)
    assert (untrusted.status_code, untrusted.text) == (200, "fine")
    assert (trusted.status_code, trusted.text) == (504, "DeadlineExceeded")
    assert c.hits("/c") == 1


def flask_b_behind_a_proxy(session: ResilientSession, c_url: str) -> flask.Flask:
    """B behind a proxy: its handler answers with C's status and the client address Flask
    gives it."""
    app = flask.Flask("b")

    @app.get("/call")
    def call() -> tuple[str, int]:
        status, _ = _call_c(session, c_url)
        return flask.request.remote_addr or "", status

    return app


FORWARDED = {"X-Request-Attempt": "1; max=2"}


@pytest.mark.parametrize(
    ("networks", "client", "outside", "tries"),
    [
        (["10.0.0.0/8"], "10.1.2.3", True, 1),
        (["10.0.0.0/8"], "10.1.2.3", False, 3),
        (["127.0.0.0/8"], "203.0.113.9", True, 3),
        (["127.0.0.0/8"], "203.0.113.9", False, 1),
    ],
    ids=[
        "client-trusted-proxyfix-outside",
        "client-trusted-proxyfix-inside",
        "proxy-trusted-proxyfix-outside",
        "proxy-trusted-proxyfix-inside",
    ],
)
def test_proxy_fix_outside_the_middleware_judges_the_forwarded_client(
    c, b_session, networks, client, outside, tries
):
    """With Werkzeug's ProxyFix wrapping WSGIMiddleware, trusted_networks is checked against
    the client named in X-Forwarded-For; with ProxyFix inside it, against the proxy's own
    address (127.0.0.1 here), though the handler sees the client's either way. So a trusted
    client's "attempt 1 of 2" is ignored, and a trusted proxy makes every client trusted."""
    c.script("/c", Reply(503), Reply(503), Reply(200, body=b"fine"))
    app = flask_b_behind_a_proxy(b_session, c.url("/c"))
    config = _config(networks)
    if outside:
        app.wsgi_app = ProxyFix(WSGIMiddleware(app.wsgi_app, config), x_for=1)  # type: ignore[method-assign]
    else:
        app.wsgi_app = WSGIMiddleware(ProxyFix(app.wsgi_app, x_for=1), config)  # type: ignore[method-assign]
    # Waitress removes X-Forwarded-For unless told to keep it (or to read it itself, below).
    with waitress_server(app, clear_untrusted_proxy_headers=False) as b:
        headers = {**FORWARDED, "X-Forwarded-For": client}
        response = requests.get(b + "/call", headers=headers, timeout=10)
    assert (response.text, c.hits("/c")) == (client, tries)
    assert response.status_code == (503 if tries == 1 else 200)


def test_waitress_trusting_the_proxy_itself_judges_the_forwarded_client(c, b_session):
    """Waitress told the proxy's address (trusted_proxy) sets REMOTE_ADDR from
    X-Forwarded-For before any middleware runs: with only the proxy's network trusted, the
    forwarded client's "attempt 1 of 2" is ignored and B retries to C's 200."""
    c.script("/c", Reply(503), Reply(503), Reply(200, body=b"fine"))
    app = flask_b_behind_a_proxy(b_session, c.url("/c"))
    app.wsgi_app = WSGIMiddleware(app.wsgi_app, _config(["127.0.0.0/8"]))  # type: ignore[method-assign]
    trusting = waitress_server(
        app, trusted_proxy="127.0.0.1", trusted_proxy_headers="x-forwarded-for"
    )
    with trusting as b:
        headers = {**FORWARDED, "X-Forwarded-For": "203.0.113.9"}
        response = requests.get(b + "/call", headers=headers, timeout=10)
    assert (response.status_code, response.text, c.hits("/c")) == (200, "203.0.113.9", 3)
