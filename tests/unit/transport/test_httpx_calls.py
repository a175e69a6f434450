"""The call level on both httpx paths: fallback= and stale answers through ResilientClient and
AsyncResilientClient, hedging on tasks, and send hooks' headers on async tries."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from resilient_session import fallback_of, settings
from resilient_session._observe.hooks import TryRecord, TrySending
from resilient_session._state.fallback import FailedCall
from resilient_session.httpx import AsyncResilientClient, ResilientClient, ResilientTransport
from resilient_session.testing import FakeClock

pytestmark = [pytest.mark.httpx, pytest.mark.anyio]

URL = "http://svc.test/items"


def scripted(*statuses: int, seen: list[httpx.Request]) -> httpx.MockTransport:
    """Answers each try with the next status (the last repeats); sync and async alike."""

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        status = statuses[min(len(seen), len(statuses)) - 1]
        return httpx.Response(status, content=f"try {len(seen)}".encode())

    return httpx.MockTransport(handler)


def standing_in(failed: FailedCall) -> httpx.Response:
    return httpx.Response(200, content=f"fallback for {failed.reason}".encode())


async def test_an_async_call_that_fails_is_answered_by_the_fallback(clock: FakeClock):
    seen: list[httpx.Request] = []
    config = {"defaults": {"retry": {"max_attempts": 2}}}
    async with AsyncResilientClient(
        config, transport=scripted(503, seen=seen), clock=clock, fallback=standing_in
    ) as c:
        response = await c.get(URL)
        health = c.registry.health()
    info = fallback_of(response)
    assert (response.text, len(seen)) == ("fallback for max_attempts", 2)
    assert info is not None
    assert (info.source.value, info.reason) == ("callable", "max_attempts")
    assert next(iter(health.values())).fallbacks == 1


async def test_an_async_fallback_is_awaited_with_the_failed_call(clock: FakeClock):
    """A coroutine function as fallback= is awaited, on the client's loop, with the call's
    last answer; what it awaits (here a checkpoint) runs before the answer is served."""
    seen: list[httpx.Request] = []
    told: list[tuple[str, int]] = []

    async def from_cache(failed: FailedCall) -> httpx.Response:
        await anyio.lowlevel.checkpoint()
        told.append((failed.reason, failed.response.status_code))
        return httpx.Response(200, content=b"cached")

    config = {"defaults": {"retry": {"max_attempts": 2}}}
    async with AsyncResilientClient(
        config, transport=scripted(502, seen=seen), clock=clock, fallback=from_cache
    ) as c:
        response = await c.get(URL)
    info = fallback_of(response)
    assert (response.text, len(seen), told) == ("cached", 2, [("max_attempts", 502)])
    assert info is not None
    assert info.source.value == "callable"


async def test_an_async_fallback_that_raises_keeps_the_calls_error(clock: FakeClock):
    """An error the awaited fallback raises reaches the caller with the call's own as
    ``original``."""

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async def broken(failed: FailedCall) -> httpx.Response:
        raise LookupError("no cached answer")

    config = {"defaults": {"retry": {"max_attempts": 1}}}
    async with AsyncResilientClient(
        config, transport=httpx.MockTransport(refused), clock=clock, fallback=broken
    ) as c:
        with pytest.raises(LookupError) as raised:
            await c.get(URL)
    assert isinstance(raised.value.original, httpx.ConnectError)  # type: ignore[attr-defined]


def test_an_async_fallback_given_to_a_sync_client_is_refused_by_name(clock: FakeClock):
    """A sync call cannot await: a coroutine function there raises a TypeError that says so
    (and its coroutine is closed, never left unawaited)."""

    async def from_cache(failed: FailedCall) -> httpx.Response:
        return httpx.Response(200)

    seen: list[httpx.Request] = []
    with (
        ResilientClient(
            {"defaults": {"retry": {"max_attempts": 1}}},
            transport=scripted(503, seen=seen),
            clock=clock,
            fallback=from_cache,  # type: ignore[arg-type]  # what the test is about
        ) as c,
        pytest.raises(TypeError, match="from_cache is a coroutine function"),
    ):
        c.get(URL)
    assert len(seen) == 1


def test_a_sync_call_that_fails_is_answered_by_the_fallback(clock: FakeClock):
    seen: list[httpx.Request] = []
    config = {"defaults": {"retry": {"max_attempts": 3}}}
    with ResilientClient(
        config, transport=scripted(503, seen=seen), clock=clock, fallback=standing_in
    ) as c:
        response = c.get(URL)
    assert (response.text, len(seen)) == ("fallback for max_attempts", 3)


def test_a_body_over_the_cap_is_told_response_too_large(clock: FakeClock):
    """A 200 over retry.max_response_bytes through ResilientClient: the fallback is told
    response_too_large and the 200, as on the requests path."""
    told: list[FailedCall] = []

    def standing_in_for(failed: FailedCall) -> httpx.Response:
        told.append(failed)
        return standing_in(failed)

    config = {"defaults": {"retry": {"max_attempts": 1, "max_response_bytes": 10}}}
    big = httpx.MockTransport(lambda request: httpx.Response(200, content=b"x" * 100))
    with ResilientClient(config, transport=big, clock=clock, fallback=standing_in_for) as c:
        response = c.get(URL)
    assert response.text == "fallback for response_too_large"
    assert [(f.reason, f.response.status_code, type(f.error).__name__) for f in told] == [
        ("response_too_large", 200, "ResponseTooLarge")
    ]


STALE = {"defaults": {"retry": {"max_attempts": 1}, "fallback": {"stale": {"enabled": True}}}}


async def test_an_async_call_that_fails_is_answered_stale(clock: FakeClock):
    seen: list[httpx.Request] = []
    inner = scripted(200, 503, seen=seen)
    async with AsyncResilientClient(STALE, transport=inner, clock=clock) as c:
        fresh = await c.get(URL)
        clock.advance(7)
        stale = await c.get(URL)
    info = fallback_of(stale)
    assert (fresh.text, stale.text, stale.status_code, stale.headers["Age"]) == (
        "try 1",
        "try 1",
        200,
        "7",
    )
    assert info is not None
    assert (info.source.value, info.age) == ("stale", 7)


def test_a_transport_refuses_a_fallback_that_is_not_callable():
    with pytest.raises(TypeError, match="fallback must be callable, got int"):
        ResilientTransport(fallback=3)


class Race(httpx.AsyncBaseTransport):
    """The first try hangs until it is cut; every hedge answers at once."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.first_cut = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        number = request.headers["X-Request-Attempt"]
        self.seen.append(number)
        if number.startswith("1;"):
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                self.first_cut = True
                raise
        return httpx.Response(200, content=f"try {number[0]}".encode())


HEDGED = {"defaults": {"retry": {"max_attempts": 3}, "hedging": {"enabled": True, "delay": 0.05}}}


class Records:
    """A try hook keeping every record."""

    def __init__(self) -> None:
        self.records: list[TryRecord] = []

    def on_try(self, record: TryRecord, /) -> None:
        self.records.append(record)


async def test_a_hedge_answers_first_and_the_first_try_is_cancelled(clock: FakeClock):
    inner = Race()
    hook = Records()
    async with AsyncResilientClient(HEDGED, transport=inner, clock=clock, try_hooks=[hook]) as c:
        with anyio.fail_after(5):
            response = await c.get(URL)
        state = c.registry.for_url(URL)
    assert state.hedge is not None
    hedge = state.hedge.snapshot()
    assert (response.text, sorted(inner.seen), inner.first_cut) == (
        "try 2",
        ["1; max=3", "2; max=3"],
        True,
    )
    assert (hedge.hedges, hedge.wins, hedge.cancelled) == (1, 1, 1)
    assert state.breaker.snapshot().tries == 1  # the cut try is no try, as a sync loser
    # Each try told once, the one that lost as the sync race tells it.
    told = sorted((r.attempt, r.status, r.decision, r.reason, r.hedge) for r in hook.records)
    assert told == [(1, None, "cancelled", "hedge_lost", False), (2, 200, "success", "ok", True)]
    assert state.limit is None or state.limit.snapshot().in_flight == 0


async def test_a_calls_settings_set_its_hedge_delay(clock: FakeClock):
    """Under settings(hedging={"delay": 0.2}) the async race waits 0.2 s before its hedge,
    not the host's 0.05; the next call waits the host's again."""
    async with AsyncResilientClient(HEDGED, transport=Race(), clock=clock) as c:
        with settings(hedging={"delay": 0.2}), anyio.fail_after(5):
            assert (await c.get(URL)).text == "try 2"
        tuned = list(clock.sleeps)
        with anyio.fail_after(5):
            assert (await c.get(URL)).text == "try 2"
    assert (tuned, clock.sleeps[len(tuned) :]) == ([0.2], [0.05])


async def test_a_post_is_not_hedged(clock: FakeClock):
    seen: list[httpx.Request] = []
    async with AsyncResilientClient(HEDGED, transport=scripted(200, seen=seen), clock=clock) as c:
        response = await c.post(URL, content=b"x")
        hedge = c.registry.for_url(URL).hedge
    assert hedge is not None
    assert (response.text, len(seen), hedge.snapshot().hedges) == ("try 1", 1, 0)


class Tracing:
    """A send hook: a trace header on every try that leaves."""

    def __init__(self) -> None:
        self.tries: list[int] = []

    def on_send(self, sending: TrySending, /) -> Iterable[tuple[str, str]]:
        return [("traceparent", f"00-{sending.attempt:032x}-{sending.attempt:016x}-01")]

    def on_try(self, record: TryRecord, /) -> None:
        self.tries.append(record.attempt)


async def test_send_hooks_add_their_headers_to_async_tries(clock: FakeClock):
    seen: list[httpx.Request] = []
    hook = Tracing()
    config: Any = {"defaults": {"retry": {"max_attempts": 2}}}
    async with AsyncResilientClient(
        config, transport=scripted(503, 200, seen=seen), clock=clock, try_hooks=[hook]
    ) as c:
        request = c.build_request("GET", URL)
        response = await c.send(request)
    assert response.status_code == 200
    assert [r.headers["traceparent"][-19:-3] for r in seen] == [f"{1:016x}", f"{2:016x}"]
    assert "traceparent" not in request.headers
    assert hook.tries == [1, 2]
