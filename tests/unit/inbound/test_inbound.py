"""The inbound middleware and the rules it puts in force, on the fake clock."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from resilient_session import ConfigError, DeadlineExceeded, ResilientSession
from resilient_session._pipeline.attempt import Reason, Verdict
from resilient_session._pipeline.call import start_call
from resilient_session._pipeline.intent import caller_retries
from resilient_session._pipeline.intent import enter as enter_intent
from resilient_session._pipeline.intent import leave as leave_intent
from resilient_session._transport.requests_wire import REQUESTS_WIRE
from resilient_session.config import load
from resilient_session.deadline import current_scope, deadline, enter, leave, narrowed
from resilient_session.inbound import ASGIMiddleware, WSGIMiddleware
from resilient_session.testing import FakeClock

FAST = {"defaults": {"retry": {"backoff_base": 0.1, "backoff_cap": 1.0}}}


class Seen:
    """What a handler saw of the deadline scope and the retry intent while it ran."""

    def __init__(self) -> None:
        self.scopes: list[Any] = []
        self.single_try: list[bool] = []

    def record(self) -> None:
        self.scopes.append(current_scope())
        self.single_try.append(caller_retries())


def wsgi_app(seen: Seen, body: list[bytes] | None = None):
    def app(environ, start_response):
        seen.record()
        start_response("200 OK", [("Content-Type", "text/plain")])
        return body if body is not None else [b"ok"]

    return app


def environ(**headers: str) -> dict[str, Any]:
    env: dict[str, Any] = {"REQUEST_METHOD": "GET", "PATH_INFO": "/"}
    for name, value in headers.items():
        env["HTTP_" + name.upper()] = value
    return env


def serve_body(middleware, env) -> Any:
    """The body object the middleware hands the server."""

    def start_response(status, headers, exc_info=None):
        return lambda data: None

    return middleware(env, start_response)


def serve_wsgi(middleware, env) -> tuple[list[str], bytes]:
    statuses: list[str] = []

    def start_response(status, headers, exc_info=None):
        statuses.append(status)
        return lambda data: None

    result = middleware(env, start_response)
    try:
        body = b"".join(result)
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return statuses, body


def test_wsgi_adopts_deadline_less_margin_and_intent(clock):
    """X-Request-Timeout-Ms: 500 and attempt 1 of 4 give a 490 ms scope and one try per call."""
    seen = Seen()
    middleware = WSGIMiddleware(wsgi_app(seen), clock=clock)
    env = environ(x_request_timeout_ms="500", x_request_attempt="1; max=4")
    assert serve_wsgi(middleware, env) == (["200 OK"], b"ok")
    (scope,) = seen.scopes
    assert scope.at == pytest.approx(clock.now + 0.49)
    assert scope.use_default is True
    assert seen.single_try == [True]
    assert (current_scope(), caller_retries()) == (None, False)


def test_wsgi_last_try_and_no_header_apply_local_policy(clock):
    """On the caller's last try, or without the header, no single-try rule is in force."""
    seen = Seen()
    middleware = WSGIMiddleware(wsgi_app(seen), clock=clock)
    serve_wsgi(middleware, environ(x_request_attempt="4; max=4"))
    serve_wsgi(middleware, environ())
    assert (seen.scopes, seen.single_try) == ([None, None], [False, False])


@pytest.mark.parametrize(
    "headers",
    [
        {"x_request_timeout_ms": "-5", "x_request_attempt": "0; max=4"},
        {"x_request_timeout_ms": "NaN", "x_request_attempt": "5; max=4"},
        {"x_request_timeout_ms": "inf", "x_request_attempt": "1"},
        {"x_request_timeout_ms": "300001", "x_request_attempt": "1; max=4; max=5"},
        {"x_request_timeout_ms": "500, 500", "x_request_attempt": "1; max=4, 1; max=4"},
        {"x_request_timeout_ms": "\u0665\u0660\u0660", "x_request_attempt": "1; max=\u0664"},
        {"x_request_timeout_ms": "", "x_request_attempt": ""},
    ],
)
def test_wsgi_malformed_headers_are_ignored(clock, headers):
    """A malformed, negative or absurd header changes nothing and the request is served."""
    seen = Seen()
    middleware = WSGIMiddleware(wsgi_app(seen), clock=clock)
    assert serve_wsgi(middleware, environ(**headers)) == (["200 OK"], b"ok")
    assert (seen.scopes, seen.single_try) == ([None], [False])


def test_wsgi_margin_larger_than_timeout_leaves_a_spent_deadline(harness, clock):
    """5 ms left with a 10 ms margin: calls made while serving fail fast, nothing is sent."""
    h = harness(FAST)
    results: list[Any] = []

    def app(environ, start_response):
        results.append(h.run(200))
        start_response("200 OK", [])
        return [b""]

    serve_wsgi(WSGIMiddleware(app, clock=clock), environ(x_request_timeout_ms="5"))
    ((outcome, transport),) = results
    assert transport.calls == 0
    assert (outcome.decision.verdict, outcome.decision.reason) == (
        Verdict.FAIL_FAST,
        Reason.DEADLINE_SPENT,
    )
    assert isinstance(outcome.error, DeadlineExceeded)


def test_wsgi_switches_off_by_config(clock):
    """adopt_deadline: false and single_try_when_caller_retries: false adopt nothing."""
    seen = Seen()
    config = {"inbound": {"adopt_deadline": False, "single_try_when_caller_retries": False}}
    middleware = WSGIMiddleware(wsgi_app(seen), config, clock=clock)
    serve_wsgi(middleware, environ(x_request_timeout_ms="500", x_request_attempt="1; max=4"))
    assert (seen.scopes, seen.single_try) == ([None], [False])


def test_wsgi_reads_the_configured_header_names(clock):
    """The names under defaults.deadline are the ones read; a null name is not read."""
    seen = Seen()
    config = {"defaults": {"deadline": {"header": "Grpc-Budget-Ms", "attempt_header": None}}}
    middleware = WSGIMiddleware(wsgi_app(seen), config, clock=clock)
    serve_wsgi(
        middleware,
        environ(grpc_budget_ms="200", x_request_timeout_ms="900", x_request_attempt="1; max=4"),
    )
    assert seen.scopes[0].at == pytest.approx(clock.now + 0.19)
    assert seen.single_try == [False]


def test_wsgi_streamed_body_runs_in_the_request_context(clock):
    """A body generator iterated after the app returned still sees the adopted scope."""
    seen = Seen()

    def app(environ, start_response):
        start_response("200 OK", [])

        def body() -> Iterator[bytes]:
            seen.record()
            yield b"a"
            seen.record()
            yield b"b"

        return body()

    _, body = serve_wsgi(
        WSGIMiddleware(app, clock=clock),
        environ(x_request_timeout_ms="1000", x_request_attempt="2; max=3"),
    )
    assert body == b"ab"
    assert [scope.at for scope in seen.scopes] == [pytest.approx(clock.now + 0.99)] * 2
    assert seen.single_try == [True, True]
    assert (current_scope(), caller_retries()) == (None, False)


def test_wsgi_finished_bodies_are_handed_back_as_they_are(clock):
    """A list body and a server's file wrapper reach the server unwrapped, so it keeps its
    shortcuts (Content-Length from a one-item list, sendfile)."""

    class FileWrapper:
        def __init__(self, data: bytes) -> None:
            self.data = data

        def __iter__(self):
            return iter([self.data])

    listed = [b"ok"]
    wrapped = FileWrapper(b"file")

    def app(environ, start_response):
        start_response("200 OK", [])
        return listed if environ["PATH_INFO"] == "/list" else wrapped

    middleware = WSGIMiddleware(app, clock=clock)
    env = environ(x_request_attempt="1; max=2")
    env["wsgi.file_wrapper"] = FileWrapper
    assert serve_body(middleware, {**env, "PATH_INFO": "/list"}) is listed
    assert serve_body(middleware, {**env, "PATH_INFO": "/file"}) is wrapped


MARK: contextvars.ContextVar[str] = contextvars.ContextVar("mark", default="server")


def test_wsgi_close_reaches_the_app_body_after_the_answer(clock):
    """The server's close() reaches the application's iterable (PEP 3333), in the request's
    context, but the answer has gone by then: what runs there (Flask's call_on_close, Django's
    request_finished) is no longer done for the caller, whose deadline and intent are off."""
    seen = Seen()
    marks: list[str] = []

    class Body:
        def __iter__(self):
            seen.record()
            return iter([b"x"])

        def close(self):
            seen.record()
            marks.append(MARK.get())

    def app(environ, start_response):
        MARK.set("request")
        start_response("200 OK", [])
        return Body()

    serve_wsgi(
        WSGIMiddleware(app, clock=clock),
        environ(x_request_attempt="1; max=2", x_request_timeout_ms="500"),
    )
    assert seen.single_try == [True, False]
    assert [scope.at if scope is not None else None for scope in seen.scopes] == [
        pytest.approx(clock.now + 0.49),
        None,
    ]
    assert marks == ["request"]
    assert (current_scope(), caller_retries(), MARK.get()) == (None, False, "server")


def test_inbound_deadline_only_shortens_an_enclosing_one(clock):
    """Inside a 100 ms deadline, a caller's 5 s is capped at 100 ms; a shorter one wins."""
    seen = Seen()
    middleware = WSGIMiddleware(wsgi_app(seen), clock=clock)
    with deadline(0.1, clock=clock):
        serve_wsgi(middleware, environ(x_request_timeout_ms="5000"))
        serve_wsgi(middleware, environ(x_request_timeout_ms="60"))
    assert [scope.at for scope in seen.scopes] == [
        pytest.approx(clock.now + 0.1),
        pytest.approx(clock.now + 0.05),
    ]


def test_local_default_deadline_still_caps_beneath_the_inbound_one(harness, clock):
    """A host's deadline.default of 200 ms applies under a caller's 5 s."""
    h = harness({"defaults": {"deadline": {"default": 0.2}}})
    calls: list[Any] = []

    def app(environ, start_response):
        request = requests.Request("GET", "http://svc.test/").prepare()
        calls.append(start_call(request, h.registry, REQUESTS_WIRE))
        start_response("200 OK", [])
        return [b""]

    serve_wsgi(WSGIMiddleware(app, clock=clock), environ(x_request_timeout_ms="5000"))
    assert calls[0].deadline_at == pytest.approx(clock.now + 0.2)


def test_handler_own_deadline_is_capped_by_the_inbound_one(clock):
    """A handler's deadline= of 10 s inside a caller's 300 ms keeps the 290 ms."""
    captured: list[Any] = []

    def app(environ, start_response):
        captured.append(narrowed(10.0, clock, explicit=True).at)
        captured.append(narrowed(0.1, clock, explicit=True).at)
        start_response("200 OK", [])
        return [b""]

    serve_wsgi(WSGIMiddleware(app, clock=clock), environ(x_request_timeout_ms="300"))
    assert captured == [pytest.approx(clock.now + 0.29), pytest.approx(clock.now + 0.1)]


def test_wsgi_shared_by_many_threads_keeps_each_request_apart(clock):
    """16 threads x 200 requests through one middleware: each sees only its own values."""
    wrong: list[tuple[int, Any, bool]] = []
    barrier = threading.Barrier(16, timeout=10)

    def app(environ, start_response):
        index = int(environ["INDEX"])
        scope, single_try = current_scope(), caller_retries()
        expected_at = clock.now + (100 + index) / 1000 - 0.01
        if scope is None or scope.at != pytest.approx(expected_at) or single_try != (index % 2):
            wrong.append((index, scope, single_try))
        start_response("200 OK", [])
        return [b""]

    middleware = WSGIMiddleware(app, clock=clock)

    def worker(index: int) -> None:
        barrier.wait()
        attempt = "1; max=2" if index % 2 else "2; max=2"
        for _ in range(200):
            env = environ(x_request_timeout_ms=str(100 + index), x_request_attempt=attempt)
            env["INDEX"] = str(index)
            serve_wsgi(middleware, env)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    assert wrong == []


# --- ASGI -------------------------------------------------------------------------------


def asgi_scope(*headers: tuple[bytes, bytes], kind: str = "http") -> dict[str, Any]:
    return {"type": kind, "method": "GET", "path": "/", "headers": list(headers)}


async def _receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"", "more_body": False}


def run_asgi(middleware, scope) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message):
        sent.append(message)

    asyncio.run(middleware(scope, _receive, send))
    return sent


def asgi_app(seen: Seen):
    async def app(scope, receive, send):
        seen.record()
        # A task started by the handler copies the context, as a framework's would.
        await asyncio.get_running_loop().create_task(_record(seen))
        # Work handed to a thread keeps the values only through a copied context.
        context = contextvars.copy_context()
        await asyncio.get_running_loop().run_in_executor(None, context.run, seen.record)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


async def _record(seen: Seen) -> None:
    seen.record()


def test_asgi_adopts_in_handler_tasks_and_copied_thread_contexts(clock):
    """The handler, a task it starts and a thread run in a copied context all see the values."""
    seen = Seen()
    middleware = ASGIMiddleware(asgi_app(seen), clock=clock)
    sent = run_asgi(
        middleware,
        asgi_scope((b"x-request-timeout-ms", b"800"), (b"x-request-attempt", b"1; max=3")),
    )
    assert sent[0]["status"] == 200
    assert [scope.at for scope in seen.scopes] == [pytest.approx(clock.now + 0.79)] * 3
    assert seen.single_try == [True, True, True]
    assert (current_scope(), caller_retries()) == (None, False)


def test_asgi_concurrent_requests_keep_apart(clock):
    """64 requests in flight on one loop, each yielding between reads: each sees its own."""
    wrong: list[tuple[int, Any, bool]] = []

    async def app(scope, receive, send):
        index = int(scope["path"][1:])
        for _ in range(3):
            await asyncio.sleep(0)  # let the other requests run in between
            scope_seen, single_try = current_scope(), caller_retries()
            expected_at = clock.now + (100 + index) / 1000 - 0.01
            if (
                scope_seen is None
                or scope_seen.at != pytest.approx(expected_at)
                or single_try != bool(index % 2)
            ):
                wrong.append((index, scope_seen, single_try))
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    middleware = ASGIMiddleware(app, clock=clock)

    async def one(index: int) -> None:
        attempt = b"1; max=2" if index % 2 else b"2; max=2"
        scope = asgi_scope(
            (b"x-request-timeout-ms", str(100 + index).encode()), (b"x-request-attempt", attempt)
        )
        scope["path"] = f"/{index}"
        await middleware(scope, _receive, _send_nothing)

    async def run() -> None:
        await asyncio.gather(*(one(index) for index in range(64)))

    asyncio.run(run())
    assert wrong == []


def test_asgi_thread_without_copied_context_sees_nothing(clock):
    """A plain new thread starts with an empty context: the values must be carried over."""
    seen = Seen()

    async def app(scope, receive, send):
        thread = threading.Thread(target=seen.record)
        thread.start()
        thread.join(timeout=10)
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    run_asgi(
        ASGIMiddleware(app, clock=clock),
        asgi_scope((b"x-request-timeout-ms", b"800"), (b"x-request-attempt", b"1; max=3")),
    )
    assert (seen.scopes, seen.single_try) == ([None], [False])


@pytest.mark.parametrize(
    "headers",
    [
        ((b"x-request-timeout-ms", b"800"), (b"x-request-timeout-ms", b"800")),
        ((b"x-request-timeout-ms", b"-1"),),
        ((b"x-request-timeout-ms", b"8\xc3\xa9"),),
        ((b"x-request-timeout-ms", "\u0668".encode()),),
        ((b"x-request-attempt", b"1; max=3"), (b"x-request-attempt", b"2; max=3")),
        ((b"x-request-attempt", b"3; max=2"),),
        ((b"x-request-attempt", b"\xff; max=3"),),
        (("x-request-attempt", "1; max=3"),),  # str, not bytes: a broken server
        ((b"x-request-attempt",),),
    ],
)
def test_asgi_malformed_headers_are_ignored(clock, headers):
    """Duplicates, non-ASCII and broken header fields change nothing; the request is served."""
    seen = Seen()
    sent = run_asgi(ASGIMiddleware(asgi_app(seen), clock=clock), asgi_scope(*headers))
    assert sent[0]["status"] == 200
    assert (seen.scopes, seen.single_try) == ([None] * 3, [False] * 3)


def test_asgi_header_names_match_whatever_their_case(clock):
    """A server that does not lower-case names is still read."""
    seen = Seen()
    run_asgi(
        ASGIMiddleware(asgi_app(seen), clock=clock),
        asgi_scope((b"X-Request-Attempt", b"1; max=2")),
    )
    assert seen.single_try == [True, True, True]


def test_asgi_other_scopes_pass_through(clock):
    """A lifespan scope reaches the app untouched and adopts nothing."""
    seen = Seen()

    async def app(scope, receive, send):
        seen.record()

    run_asgi(
        ASGIMiddleware(app, clock=clock),
        asgi_scope((b"x-request-attempt", b"1; max=2"), kind="lifespan"),
    )
    assert seen.single_try == [False]


def test_asgi_app_error_still_resets(clock):
    """An app that raises leaves no scope or intent behind."""

    async def app(scope, receive, send):
        raise RuntimeError("boom")

    middleware = ASGIMiddleware(app, clock=clock)

    async def run() -> tuple[Any, bool]:
        with pytest.raises(RuntimeError):
            await middleware(
                asgi_scope((b"x-request-timeout-ms", b"800"), (b"x-request-attempt", b"1; max=3")),
                _receive,
                _send_nothing,
            )
        return current_scope(), caller_retries()

    assert asyncio.run(run()) == (None, False)


async def _send_nothing(message: Any) -> None:
    return None


def test_asgi_work_after_the_answer_is_not_the_callers(clock):
    """Starlette's background tasks run after the last body message, inside the app call:
    the caller has its answer and will not retry, so they run under neither its deadline nor
    its intent; a streamed body's parts before the last still do."""
    seen = Seen()

    async def app(scope, receive, send):
        seen.record()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"a", "more_body": True})
        seen.record()
        await send({"type": "http.response.body", "body": b"b"})
        seen.record()  # a background task

    sent = run_asgi(
        ASGIMiddleware(app, clock=clock),
        asgi_scope((b"x-request-timeout-ms", b"800"), (b"x-request-attempt", b"1; max=3")),
    )
    assert [message.get("body") for message in sent] == [None, b"a", b"b"]
    assert seen.single_try == [True, True, False]
    assert [scope.at if scope is not None else None for scope in seen.scopes] == [
        pytest.approx(clock.now + 0.79),
        pytest.approx(clock.now + 0.79),
        None,
    ]


def test_asgi_pathsend_is_a_whole_answer(clock):
    """The pathsend extension's message ends the answer as a last body message does."""
    seen = Seen()

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        seen.record()
        await send({"type": "http.response.pathsend", "path": "/srv/file"})
        seen.record()

    run_asgi(ASGIMiddleware(app, clock=clock), asgi_scope((b"x-request-attempt", b"1; max=3")))
    assert seen.single_try == [True, False]


def test_asgi_after_the_answer_an_enclosing_scope_is_back(clock):
    """Released, the scope and intent in force are the ones before the request's (here an
    enclosing 5 s and a single try), not none at all."""
    seen = Seen()

    async def app(scope, receive, send):
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        seen.record()

    async def run() -> None:
        token = enter_intent(True)
        with deadline(5.0, clock=clock):
            await ASGIMiddleware(app, clock=clock)(
                asgi_scope((b"x-request-timeout-ms", b"800"), (b"x-request-attempt", b"1; max=3")),
                _receive,
                _send_nothing,
            )
            seen.record()
        leave_intent(token)

    asyncio.run(run())
    assert [scope.at for scope in seen.scopes] == [pytest.approx(clock.now + 5.0)] * 2
    assert seen.single_try == [True, True]


# --- the rules in the chain ---------------------------------------------------------------


def test_caller_retries_makes_one_try_without_a_token(harness):
    """While the caller will retry, a 503 ends the call after one try, and no token is taken."""
    h = harness(FAST)
    token = enter_intent(True)
    try:
        outcome, transport = h.run(503, 200)
    finally:
        leave_intent(token)
    assert (transport.calls, outcome.status) == (1, 503)
    assert (outcome.decision.verdict, outcome.decision.reason) == (
        Verdict.GIVE_UP,
        Reason.CALLER_RETRIES,
    )
    budget = h.host().bucket.snapshot()
    assert (budget.first_tries, budget.retries, budget.exhausted) == (1, 0, 0)
    assert h.clock.sleeps == []


def test_without_the_intent_the_local_policy_retries(harness):
    """On the caller's last try (no intent in force) the same call retries to the 200."""
    h = harness(FAST)
    outcome, transport = h.run(503, 200)
    assert (transport.calls, outcome.status, outcome.decision.verdict) == (
        2,
        200,
        Verdict.SUCCESS,
    )
    assert h.host().bucket.snapshot().retries == 1


@pytest.mark.parametrize(
    ("steps", "config", "reason"),
    [
        ((404,), FAST, Reason.NOT_RETRYABLE),
        ((503,), {"defaults": {"retry": {"max_attempts": 1}}}, Reason.MAX_ATTEMPTS),
        ((200,), FAST, Reason.OK),
        ((requests.ConnectionError("reset"),), FAST, Reason.CALLER_RETRIES),
    ],
)
def test_caller_retries_comes_after_the_other_reasons(harness, steps, config, reason):
    """The earlier give-up reasons still win; caller_retries replaces only a planned retry."""
    h = harness(config)
    token = enter_intent(True)
    try:
        outcome, transport = h.run(*steps)
    finally:
        leave_intent(token)
    assert (transport.calls, outcome.decision.reason) == (1, reason)


def test_caller_retries_event(harness, logs):
    """The give-up is logged as give_up/caller_retries."""
    h = harness(FAST)
    token = enter_intent(True)
    try:
        h.run(503)
    finally:
        leave_intent(token)
    assert [(e["decision"], e["reason"]) for e in logs if e["event"] == "http.try"] == [
        ("give_up", "caller_retries")
    ]


def test_attempt_header_on_every_try(harness):
    """Each try says which it is and the most the call makes; the caller's request is untouched."""
    h = harness(FAST)
    attempt = h.first_attempt()
    _, transport = h.run(503, 503, 200)
    assert [a.request.headers["X-Request-Attempt"] for a in transport.sent] == [
        "1; max=4",
        "2; max=4",
        "3; max=4",
    ]
    assert "X-Request-Attempt" not in attempt.request.headers
    assert "X-Request-Timeout-Ms" not in transport.sent[0].request.headers


def test_attempt_header_beside_the_deadline_header(harness):
    """With a deadline both headers go out on the same try."""
    _, transport = harness(FAST).run(200, deadline=2.0)
    headers = transport.sent[0].request.headers
    assert (headers["X-Request-Attempt"], headers["X-Request-Timeout-Ms"]) == ("1; max=4", "2000")


def test_attempt_header_of_a_call_not_retried_once_sent(harness):
    """A POST without Idempotency-Key says its try is its last: 1; max=1."""
    _, transport = harness(FAST).run(503, method="POST", body=b"x")
    assert transport.sent[0].request.headers["X-Request-Attempt"] == "1; max=1"


def test_attempt_header_says_the_caller_retries_under_the_intent(harness):
    """With one try configured, a service whose caller retries still sends n < max below."""
    h = harness({"defaults": {"retry": {"max_attempts": 1}}})
    token = enter_intent(True)
    try:
        _, transport = h.run(503)
    finally:
        leave_intent(token)
    assert transport.sent[0].request.headers["X-Request-Attempt"] == "1; max=2"


def test_attempt_header_null_sends_none(harness):
    """attempt_header: null sends no X-Request-Attempt, with or without a deadline."""
    h = harness({"defaults": {"deadline": {"attempt_header": None}}})
    _, plain = h.run(200)
    _, timed = h.run(200, deadline=1.0)
    assert "X-Request-Attempt" not in plain.sent[0].request.headers
    assert "X-Request-Attempt" not in timed.sent[0].request.headers
    assert timed.sent[0].request.headers["X-Request-Timeout-Ms"] == "1000"


def test_session_deadline_under_inbound_scope_is_capped():
    """session.get(deadline=10) inside an enclosing 50 ms scope fails fast once it is spent."""
    clock = FakeClock()
    with ResilientSession(clock=clock) as session:
        scope = narrowed(0.05, clock, explicit=False)
        token = enter(scope)
        try:
            clock.advance(0.06)
            with pytest.raises(DeadlineExceeded):
                session.get("http://127.0.0.1:9/never-sent", deadline=10.0)
        finally:
            leave(token)


@pytest.mark.parametrize(
    ("config", "path"),
    [
        ({"inbound": {"margin_ms": -1}}, r"inbound\.margin_ms"),
        ({"inbound": {"max_ms": 0}}, r"inbound\.max_ms"),
        ({"inbound": {"adopt_deadline": "yes"}}, r"inbound\.adopt_deadline"),
        ({"inbound": {"single_try": True}}, r"inbound\.single_try"),
        ({"inbound": []}, r"inbound"),
        ({"defaults": {"deadline": {"attempt_header": "Cookie"}}}, r"deadline\.attempt_header"),
        ({"defaults": {"deadline": {"attempt_header": "bad name"}}}, r"deadline\.attempt_header"),
        (
            {"defaults": {"deadline": {"attempt_header": "x-request-timeout-ms"}}},
            r"defaults\.deadline\.attempt_header",
        ),
    ],
)
def test_bad_inbound_config_names_the_key(config, path):
    """Every bad inbound or attempt_header value is a ConfigError naming its key."""
    with pytest.raises(ConfigError, match=path):
        load(config)
    with pytest.raises(ConfigError, match=path):
        WSGIMiddleware(wsgi_app(Seen()), config)
