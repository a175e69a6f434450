"""The loop's default executor and the caller's deadline (docs/cross-hop.md, "Threads"):
``run_in_executor`` copies no context, so a call made there outlives the deadline of the
coroutine that awaits it; run in a copy of the context, as the page shows, it ends with it."""

from __future__ import annotations

import asyncio
import contextvars
import re
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Any

import pytest
import requests

from resilient_session import DeadlineExceeded, ResilientSession, deadline
from resilient_session.inbound import ASGIMiddleware
from resilient_session.testing.upstream import FlakyUpstream, Hang
from tests.integration.servers import uvicorn_server

pytestmark = pytest.mark.integration

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cross-hop.md"
HEADER = "X-Request-Timeout-Ms"
DEADLINE = 0.3
# The host's read timeout: what ends a call that lost the deadline, so that the test ends.
READ_TIMEOUT = 1.2
CONFIG: dict[str, Any] = {
    "defaults": {"retry": {"max_attempts": 1}, "timeout": {"read": READ_TIMEOUT}}
}

Fetch = Callable[[ResilientSession, str], Awaitable[requests.Response]]


@pytest.fixture
def hanging() -> Iterator[tuple[ResilientSession, FlakyUpstream]]:
    with FlakyUpstream() as upstream, ResilientSession(CONFIG) as session:
        upstream.script("/hang", Hang(10))
        yield session, upstream


def _page_fetch(session: ResilientSession) -> Fetch:
    """The page's ``fetch``, run as written, on the test's session."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    [code] = [block for block in blocks if "run_in_executor" in block]
    namespace: dict[str, Any] = {}
    exec(code, namespace)  # noqa: S102 - the page's own example
    namespace["session"].close()
    namespace["session"] = session
    fetch = namespace["fetch"]
    return lambda _session, url: fetch(url)


async def _plain(session: ResilientSession, url: str) -> requests.Response:
    return await asyncio.get_running_loop().run_in_executor(None, session.get, url)


async def _to_thread(session: ResilientSession, url: str) -> requests.Response:
    return await asyncio.to_thread(session.get, url)


def _under_deadline(
    fetch: Fetch, session: ResilientSession, url: str
) -> tuple[type[BaseException] | None, float]:
    """Await *fetch* inside ``with deadline(DEADLINE)``: what it raised and how long it took."""

    async def caller() -> type[BaseException] | None:
        with deadline(DEADLINE):
            try:
                await fetch(session, url)
            except requests.RequestException as exc:
                return type(exc)
        return None

    started = time.monotonic()
    raised = asyncio.run(caller())
    return raised, time.monotonic() - started


def test_run_in_executor_loses_the_deadline(hanging):
    """Plain ``run_in_executor(None, session.get, url)`` under a 0.3 s deadline: the try
    carries no deadline header, and the call ends only at the host's 1.2 s read timeout."""
    session, upstream = hanging
    raised, elapsed = _under_deadline(_plain, session, upstream.url("/hang"))
    assert raised is requests.ReadTimeout
    assert READ_TIMEOUT - 0.05 <= elapsed < READ_TIMEOUT + 1.0
    [hit] = upstream.received("/hang")
    assert HEADER not in dict(hit.headers)


@pytest.mark.parametrize(
    "fetch", [pytest.param(None, id="page-copy-context"), pytest.param(_to_thread, id="to-thread")]
)
def test_a_copied_context_keeps_the_deadline(hanging, fetch):
    """The page's ``fetch`` (``run_in_executor`` with ``copy_context().run``), and
    ``asyncio.to_thread``: the try carries the deadline and the call ends with it."""
    session, upstream = hanging
    fetch = fetch or _page_fetch(session)
    raised, elapsed = _under_deadline(fetch, session, upstream.url("/hang"))
    assert raised is DeadlineExceeded
    assert DEADLINE - 0.05 <= elapsed < DEADLINE + 0.4
    [hit] = upstream.received("/hang")
    assert 0 < int(dict(hit.headers)[HEADER]) <= DEADLINE * 1000


def _asgi_b(session: ResilientSession, c_url: str, copy: bool) -> Any:
    """Service B: an async handler that makes its call to C in the loop's executor."""

    async def app(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        loop = asyncio.get_running_loop()
        call: Callable[..., Any] = contextvars.copy_context().run if copy else _direct
        try:
            response = await loop.run_in_executor(None, call, session.get, c_url)
            status, body = response.status_code, b"fine"
        except requests.RequestException as exc:
            status, body = 504, type(exc).__name__.encode()
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": body})

    return ASGIMiddleware(app)


def _direct(function: Callable[..., Any], *args: Any) -> Any:
    return function(*args)


@pytest.mark.parametrize(
    ("copy", "error", "bound"),
    [(False, b"ReadTimeout", READ_TIMEOUT), (True, b"DeadlineExceeded", DEADLINE)],
    ids=["plain", "copied"],
)
def test_the_adopted_deadline_reaches_the_executor_only_in_a_copy(hanging, copy, error, bound):
    """Under the ASGI middleware, a caller's 300 ms: B's call to C in the loop's executor
    waits out B's 1.2 s read timeout, and in a copy of the context ends at the 300 ms."""
    session, upstream = hanging
    with uvicorn_server(_asgi_b(session, upstream.url("/hang"), copy)) as b:
        started = time.monotonic()
        answer = requests.get(b, headers={HEADER: str(int(DEADLINE * 1000))}, timeout=10)
        elapsed = time.monotonic() - started
    assert (answer.status_code, answer.content) == (504, error)
    assert bound - 0.05 <= elapsed < bound + 0.5
    [hit] = upstream.received("/hang")
    assert (HEADER in dict(hit.headers)) is copy
