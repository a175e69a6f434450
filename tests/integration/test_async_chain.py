"""Across hops for async callers, on real servers: A, an AsyncResilientClient, calls B, a
Starlette app under uvicorn wrapped in the ASGI middleware, whose async endpoint calls a
loopback upstream C with an AsyncResilientClient of its own."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from resilient_session import HostHealth
from resilient_session.config import BudgetPolicy
from resilient_session.httpx import AsyncResilientClient
from resilient_session.inbound import ASGIMiddleware
from resilient_session.testing.upstream import FlakyUpstream, Hang, Reply
from tests.integration.servers import uvicorn_server

pytestmark = [pytest.mark.integration, pytest.mark.httpx, pytest.mark.anyio]

# Guards off but the retry budget, as the chain benchmark's "guards off", so the counts show
# the retry rule alone; no time-based refill, so they do not depend on the machine's speed.
ISOLATED: dict[str, Any] = {
    "retry": {"max_attempts": 4, "backoff_base": 0.001, "backoff_cap": 0.005},
    "budget": {"min_per_second": 0},
    "breaker": {"failure_threshold": 1_000_000},
    "throttle": {"enabled": False},
    "limit": {"enabled": False},
}
B_CONFIG: dict[str, Any] = {"defaults": ISOLATED}
# A's bucket holds the first call's three retries and no more: the calls after it retry on
# what their own first tries earn (0.2 a call), as the benchmark's 1,000 calls do after the
# first ten tokens are spent.
A_CONFIG: dict[str, Any] = {
    "defaults": {**ISOLATED, "budget": {"min_per_second": 0, "max_tokens": 3}}
}
CALLS = 40
CALLERS = 4
DEADLINE = 1.0
DEADLINE_SLACK = 0.05
RATIO = BudgetPolicy().ratio
CALL_ID = "X-Call-Id"


@dataclass
class Seen:
    """What B's endpoint saw of each request it served and of its own call to C."""

    timeouts_ms: list[str | None] = field(default_factory=list)
    attempts: list[str | None] = field(default_factory=list)  # A's X-Request-Attempt
    outcomes: list[tuple[int, str, float]] = field(default_factory=list)  # status, text, s
    health: dict[str, HostHealth] = field(default_factory=dict)


def async_b(c_url: str, seen: Seen) -> Starlette:
    """B: one async endpoint calling C once per request with B's own AsyncResilientClient,
    opened and closed by the app's lifespan on uvicorn's loop; a failure answered as a 504.
    Each request's tries at C carry its serial number, from 0, in X-Call-Id."""
    clients: list[AsyncResilientClient] = []

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AsyncResilientClient(B_CONFIG, timeout=httpx.Timeout(5.0)) as client:
            clients.append(client)
            yield
            seen.health = client.registry.health()

    async def call(request: Request) -> PlainTextResponse:
        # Appended before the first await: the serial number is the index in every list.
        number = len(seen.attempts)
        seen.timeouts_ms.append(request.headers.get("x-request-timeout-ms"))
        seen.attempts.append(request.headers.get("x-request-attempt"))
        started = time.monotonic()
        try:
            response = await clients[0].get(c_url, headers={CALL_ID: str(number)})
            status, text = response.status_code, response.text
        except httpx.HTTPError as exc:
            status, text = 504, type(exc).__name__
        seen.outcomes.append((status, text, time.monotonic() - started))
        return PlainTextResponse(text, status_code=status)

    app = Starlette(routes=[Route("/call", call)], lifespan=lifespan)
    app.add_middleware(ASGIMiddleware, config=B_CONFIG)
    return app


@pytest.fixture
def c() -> Iterator[FlakyUpstream]:
    with FlakyUpstream() as upstream:
        yield upstream


def c_headers(c: FlakyUpstream, name: str) -> list[str]:
    return [value for hit in c.received("/c") for key, value in hit.headers if key.lower() == name]


def tries_per_request(c: FlakyUpstream, requests: int) -> list[int]:
    """How many tries reached C for each request B served, by its serial number."""
    counts = Counter(int(hit.header(CALL_ID) or -1) for hit in c.received("/c"))
    assert set(counts) <= set(range(requests))
    return [counts[number] for number in range(requests)]


async def test_a_chain_of_async_clients_retries_at_one_layer(anyio_backend, c):
    """C answering 503: the first call (budgets full) reaches C 1 + 1 + 1 + 4 = 7 times, and
    the 40 after it 1 + 0.2 times each, 48 tries: B never retries for A, which retries on
    what its first tries earn."""
    c.script("/c", Reply(503))
    seen = Seen()
    with uvicorn_server(async_b(c.url("/c"), seen), lifespan=True) as b:
        async with AsyncResilientClient(A_CONFIG, timeout=httpx.Timeout(10.0)) as a:
            first = (await a.get(b + "/call", deadline=10)).status_code
            first_tries = c.hits("/c")
            statuses: list[int] = []
            # One call at a time: with callers at once, one call's retries can bunch up to
            # A's last try, which B serves with its own four (a few in 1,000 calls: the
            # benchmark's 4 callers; the next test checks that case).
            with anyio.fail_after(60):
                for _ in range(CALLS):
                    statuses.append((await a.get(b + "/call", deadline=10)).status_code)
            a_retries = a.registry.health()[b].retries
    tries = c.hits("/c") - first_tries
    per_call = tries / CALLS
    assert (first, first_tries, statuses) == (503, 7, [503] * CALLS)
    assert seen.attempts[:4] == [f"{n}; max=4" for n in (1, 2, 3, 4)]
    assert c_headers(c, "x-request-attempt")[:7] == ["1; max=4"] * 3 + [
        f"{n}; max=4" for n in (1, 2, 3, 4)
    ]
    # A's retries: the first call's three, then one for every five first tries (0.2 each).
    assert a_retries == 3 + int(CALLS * RATIO)
    assert (tries, per_call) == (CALLS + int(CALLS * RATIO), 1.2)
    assert 1.0 < per_call <= 1 + RATIO + 0.05
    # B retried on the first call's last try alone, where A would not try again.
    assert seen.health[c.base_url].retries == 3


async def test_requests_served_at_once_keep_their_own_caller_intent(anyio_backend, c):
    """Four callers at once, 80 calls: each request B serves makes one try at C while A's
    try says A may retry, and B's own four on A's last try; one layer retries."""
    c.script("/c", Reply(503))
    seen = Seen()
    with uvicorn_server(async_b(c.url("/c"), seen), lifespan=True) as b:
        async with AsyncResilientClient(A_CONFIG, timeout=httpx.Timeout(10.0)) as a:
            pending = iter(range(2 * CALLS))

            async def caller() -> None:
                for _ in pending:
                    await a.get(b + "/call", deadline=10)

            with anyio.fail_after(60):
                async with anyio.create_task_group() as group:
                    for _ in range(CALLERS):
                        group.start_soon(caller)
            a_retries = a.registry.health()[b].retries
    served = len(seen.attempts)
    assert served == 2 * CALLS + a_retries
    expected = [4 if attempt == "4; max=4" else 1 for attempt in seen.attempts]
    assert tries_per_request(c, served) == expected
    assert seen.health[c.base_url].retries == 3 * expected.count(4)


async def test_the_user_deadline_holds_across_two_async_hops(anyio_backend, c):
    """C hanging: a call at A with a 1 s deadline ends within 1.05 s; B received at most
    1,000 ms, and its one try at C was cut by that deadline less the margin, not by B's own
    5 s timeout. A may retry in the last milliseconds: B then fails fast, C sees nothing."""
    c.script("/c", Hang(30.0))
    seen = Seen()
    with uvicorn_server(async_b(c.url("/c"), seen), lifespan=True) as b:
        async with AsyncResilientClient(A_CONFIG, timeout=httpx.Timeout(10.0)) as a:
            started = time.monotonic()
            with anyio.fail_after(10):
                try:
                    ended: int | str = (await a.get(b + "/call", deadline=DEADLINE)).status_code
                except httpx.HTTPError as exc:
                    ended = type(exc).__name__
            elapsed = time.monotonic() - started
    assert ended in (504, "DeadlineExceeded")
    assert elapsed <= DEADLINE + DEADLINE_SLACK
    received = [int(value or -1) for value in seen.timeouts_ms]
    assert 500 <= received[0] <= DEADLINE * 1000
    (status, text, took), *retried = seen.outcomes
    assert (status, text) == (504, "DeadlineExceeded")
    # B's deadline is what it received less its 10 ms margin: the cut ends the call within it.
    assert took <= received[0] / 1000
    (sent,) = c_headers(c, "x-request-timeout-ms")
    assert 500 <= int(sent) <= received[0] - 10
    assert c.hits("/c") == 1
    # A retry sent in A's last milliseconds carries what is left, under B's margin.
    assert all(0 <= value < 10 for value in received[1:])
    assert [(s, t) for s, t, _ in retried] == [(504, "DeadlineExceeded")] * len(retried)
    assert seen.health[c.base_url].deadline_spent == len(retried)
