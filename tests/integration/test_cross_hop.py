"""Across hops on real servers: a service B under waitress (Flask) and under uvicorn
(Starlette, sync endpoint in its thread pool) adopts its caller's deadline and retry intent
for the calls it makes to a loopback upstream C."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

import flask
import pytest
import requests
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from resilient_session import ResilientSession
from resilient_session.inbound import ASGIMiddleware, WSGIMiddleware
from resilient_session.testing.upstream import FlakyUpstream, Hang, Reply
from tests.integration.servers import uvicorn_server, waitress_server

pytestmark = pytest.mark.integration

B_CONFIG: dict[str, Any] = {
    "defaults": {
        "retry": {"max_attempts": 4, "backoff_base": 0.01, "backoff_cap": 0.02},
        "breaker": {"failure_threshold": 1000},
        "throttle": {"enabled": False},
    }
}


def call_c(session: ResilientSession, c_url: str, own_deadline: str | None) -> tuple[int, str]:
    """What B's handler does: one call to C, its status passed on (a failure as a 504)."""
    try:
        if own_deadline is None:
            response = session.get(c_url)
        else:
            response = session.get(c_url, deadline=float(own_deadline))
    except requests.RequestException as exc:
        return 504, type(exc).__name__
    return response.status_code, response.text


def flask_b(session: ResilientSession, c_url: str, wrapped: bool) -> Any:
    app = flask.Flask("b")

    @app.get("/call")
    def call() -> tuple[str, int]:
        status, text = call_c(session, c_url, flask.request.args.get("deadline"))
        return text, status

    if wrapped:
        app.wsgi_app = WSGIMiddleware(app.wsgi_app, B_CONFIG)  # type: ignore[method-assign]
    return app


def starlette_b(session: ResilientSession, c_url: str, wrapped: bool) -> Any:
    # A sync endpoint: Starlette runs it in its thread pool, with the request's context copied.
    def call(request: Request) -> PlainTextResponse:
        status, text = call_c(session, c_url, request.query_params.get("deadline"))
        return PlainTextResponse(text, status_code=status)

    app = Starlette(routes=[Route("/call", call)])
    if wrapped:
        app.add_middleware(ASGIMiddleware, config=B_CONFIG)
    return app


Stack = Callable[[ResilientSession, str, bool], AbstractContextManager[str]]


def waitress_flask(session: ResilientSession, c_url: str, wrapped: bool) -> Any:
    return waitress_server(flask_b(session, c_url, wrapped))


def uvicorn_starlette(session: ResilientSession, c_url: str, wrapped: bool) -> Any:
    return uvicorn_server(starlette_b(session, c_url, wrapped))


STACKS = pytest.mark.parametrize("stack", [waitress_flask, uvicorn_starlette])


@pytest.fixture
def c() -> Iterator[FlakyUpstream]:
    with FlakyUpstream() as upstream:
        yield upstream


@pytest.fixture
def b_session() -> Iterator[ResilientSession]:
    with ResilientSession(B_CONFIG) as session:
        yield session


def c_headers(c: FlakyUpstream, name: str) -> list[str]:
    return [value for hit in c.received("/c") for key, value in hit.headers if key.lower() == name]


@STACKS
def test_one_try_while_the_caller_may_retry(stack, c, b_session):
    """Attempt 1 of 3 from the caller: C answering 503 is tried once, and says so below."""
    c.script("/c", Reply(503))
    with stack(b_session, c.url("/c"), True) as b:
        response = requests.get(b + "/call", headers={"X-Request-Attempt": "1; max=3"}, timeout=10)
    assert (response.status_code, c.hits("/c")) == (503, 1)
    assert c_headers(c, "x-request-attempt") == ["1; max=4"]
    assert b_session.health()[c.base_url].retries == 0


@STACKS
def test_local_policy_on_the_last_try_and_without_header(stack, c, b_session):
    """On the caller's last try, and without the header, B retries C as configured: 4 tries."""
    c.script("/c", Reply(503))
    with stack(b_session, c.url("/c"), True) as b:
        last = requests.get(b + "/call", headers={"X-Request-Attempt": "3; max=3"}, timeout=10)
        plain = requests.get(b + "/call", timeout=10)
    assert (last.status_code, plain.status_code, c.hits("/c")) == (503, 503, 8)
    assert c_headers(c, "x-request-attempt") == [f"{n}; max=4" for n in (1, 2, 3, 4)] * 2


@STACKS
def test_malformed_headers_are_ignored(stack, c, b_session):
    """Garbage in both headers: served, under the local policy, without an adopted deadline."""
    c.script("/c", Reply(503), Reply(200, body=b"fine"))
    with stack(b_session, c.url("/c"), True) as b:
        response = requests.get(
            b + "/call",
            headers={"X-Request-Attempt": "1; max=three", "X-Request-Timeout-Ms": "-1"},
            timeout=10,
        )
    assert (response.status_code, response.text, c.hits("/c")) == (200, "fine", 2)
    assert c_headers(c, "x-request-timeout-ms") == []


@STACKS
def test_adopted_deadline_reaches_c_and_ends_the_call(stack, c, b_session):
    """A caller's 400 ms: C sees at most 390 ms left and B's call to a hanging C ends by it."""
    c.script("/c", Hang(5.0))
    with stack(b_session, c.url("/c"), True) as b:
        started = time.monotonic()
        response = requests.get(b + "/call", headers={"X-Request-Timeout-Ms": "400"}, timeout=10)
        elapsed = time.monotonic() - started
    assert (response.status_code, response.text) == (504, "DeadlineExceeded")
    (sent,) = c_headers(c, "x-request-timeout-ms")
    assert 200 <= int(sent) <= 390
    assert c.hits("/c") == 1
    assert elapsed < 0.4 + 0.5  # generous slack for two loopback hops on a busy machine


@STACKS
def test_handler_deadline_is_capped_by_the_adopted_one(stack, c, b_session):
    """The handler's own deadline=10 inside a caller's 300 ms keeps the 290 ms."""
    c.script("/c", Hang(5.0))
    with stack(b_session, c.url("/c"), True) as b:
        started = time.monotonic()
        response = requests.get(
            b + "/call?deadline=10", headers={"X-Request-Timeout-Ms": "300"}, timeout=10
        )
        elapsed = time.monotonic() - started
    assert response.status_code == 504
    (sent,) = c_headers(c, "x-request-timeout-ms")
    assert int(sent) <= 290
    assert elapsed < 0.3 + 0.5


@STACKS
def test_a_chain_of_resilient_sessions_retries_at_one_layer(stack, c, b_session):
    """A (3 tries) -> B (4 tries) -> C down: 1 + 1 + 4 = 6 tries reach C with the middleware,
    3 x 4 = 12 without it."""
    c.script("/c", Reply(503))
    a_config = {
        "defaults": {"retry": {"max_attempts": 3, "backoff_base": 0.01, "backoff_cap": 0.02}}
    }
    with ResilientSession(a_config) as a:
        with stack(b_session, c.url("/c"), True) as b:
            wrapped = a.get(b + "/call", deadline=10).status_code
        with_middleware = c.hits("/c")
        # A fresh B, with a full retry budget as the first one had.
        with ResilientSession(B_CONFIG) as fresh, stack(fresh, c.url("/c"), False) as b:
            plain = a.get(b + "/call", deadline=10).status_code
        without = c.hits("/c") - with_middleware
    assert (wrapped, plain) == (503, 503)
    assert (with_middleware, without) == (6, 12)


def waitress_one_thread(session: ResilientSession, c_url: str, wrapped: bool) -> Any:
    # One thread serves every request, so anything one request left behind meets the next.
    return waitress_server(flask_b(session, c_url, wrapped), threads=1)


@pytest.mark.parametrize("stack", [waitress_one_thread, uvicorn_starlette])
def test_nothing_carries_over_to_the_next_request(stack, c, b_session):
    """Requests one after another on one connection, a caller's single try and deadline, then
    no header: each plain request gets B's whole policy (4 tries) and sends C no deadline."""
    c.script("/c", Reply(503))
    with stack(b_session, c.url("/c"), True) as b, requests.Session() as a:
        statuses = []
        for _ in range(3):
            adopted = {"X-Request-Attempt": "1; max=3", "X-Request-Timeout-Ms": "5000"}
            statuses.append(a.get(b + "/call", headers=adopted, timeout=10).status_code)
            statuses.append(a.get(b + "/call", timeout=10).status_code)
    assert (statuses, c.hits("/c")) == ([503] * 6, 3 * (1 + 4))
    one_pair = ["1; max=4"] + [f"{n}; max=4" for n in (1, 2, 3, 4)]
    assert c_headers(c, "x-request-attempt") == one_pair * 3
    # Only the adopted requests' tries carry a deadline; 4990 ms less the time in B.
    sent = [int(value) for value in c_headers(c, "x-request-timeout-ms")]
    assert len(sent) == 3
    assert all(4000 <= value <= 4990 for value in sent)


def flask_b_after_answer(session: ResilientSession, c_url: str) -> Any:
    app = flask.Flask("b")

    @app.get("/call")
    def call() -> flask.Response:
        response = flask.make_response("queued", 202)
        response.call_on_close(lambda: call_c(session, c_url, None))
        return response

    app.wsgi_app = WSGIMiddleware(app.wsgi_app, B_CONFIG)  # type: ignore[method-assign]
    return waitress_server(app)


def starlette_b_after_answer(session: ResilientSession, c_url: str) -> Any:
    def call(request: Request) -> PlainTextResponse:
        task = BackgroundTask(call_c, session, c_url, None)
        return PlainTextResponse("queued", status_code=202, background=task)

    app = Starlette(routes=[Route("/call", call)])
    app.add_middleware(ASGIMiddleware, config=B_CONFIG)
    return uvicorn_server(app)


async def _passing_through(request: Request, call_next: RequestResponseEndpoint) -> Response:
    return await call_next(request)


def starlette_b_after_answer_behind_base_http(session: ResilientSession, c_url: str) -> Any:
    # The order docs/cross-hop.md gives: ASGIMiddleware added first, so it sits inside the
    # BaseHTTPMiddleware (FastAPI's @app.middleware("http")), whose endpoint runs in a task
    # of its own that the answer's end must reach.
    def call(request: Request) -> PlainTextResponse:
        task = BackgroundTask(call_c, session, c_url, None)
        return PlainTextResponse("queued", status_code=202, background=task)

    app = Starlette(routes=[Route("/call", call)])
    app.add_middleware(ASGIMiddleware, config=B_CONFIG)
    app.add_middleware(BaseHTTPMiddleware, dispatch=_passing_through)
    return uvicorn_server(app)


@pytest.mark.parametrize(
    "stack",
    [flask_b_after_answer, starlette_b_after_answer, starlette_b_after_answer_behind_base_http],
)
def test_work_after_the_answer_keeps_the_local_policy(stack, c, b_session):
    """A call made after the answer has gone (Flask's call_on_close, Starlette's background
    task) is not repeated by the caller, who got a 202: B's own policy applies, 4 tries, and
    the caller's deadline does not reach it."""
    c.script("/c", Reply(503))
    headers = {"X-Request-Attempt": "1; max=3", "X-Request-Timeout-Ms": "5000"}
    with stack(b_session, c.url("/c")) as b:
        response = requests.get(b + "/call", headers=headers, timeout=10)
        # The work runs after the answer: wait for it, at most 10 s.
        for _ in range(200):
            if c.hits("/c") >= 4:
                break
            time.sleep(0.05)
    assert (response.status_code, c.hits("/c")) == (202, 4)
    assert c_headers(c, "x-request-attempt") == [f"{n}; max=4" for n in (1, 2, 3, 4)]
    assert c_headers(c, "x-request-timeout-ms") == []
