"""AsyncResilientClient and ResilientTransport.handle_async_request: the same stages awaited,
under asyncio and trio (anyio), waits on the fake clock, and a cancelled call gives back what
it took."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from resilient_session import HostRegistry
from resilient_session.config import load
from resilient_session.httpx import (
    AsyncResilientClient,
    CircuitOpenError,
    DeadlineExceeded,
    ResilientClient,
    ResponseTooLarge,
)
from resilient_session.testing import FakeClock

pytestmark = [pytest.mark.httpx, pytest.mark.anyio]

URL = "http://svc.test/items"


def scripted(*statuses: int, seen: list[httpx.Request]) -> httpx.MockTransport:
    async def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        status = statuses[min(len(seen), len(statuses)) - 1]
        return httpx.Response(status, content=f"try {len(seen)}".encode())

    return httpx.MockTransport(handler)


def client(clock: FakeClock, inner: httpx.AsyncBaseTransport, **sections: Any):
    return AsyncResilientClient({"defaults": sections}, transport=inner, clock=clock)


async def test_a_503_is_retried_with_awaited_waits_on_the_fake_clock(clock: FakeClock):
    seen: list[httpx.Request] = []
    async with client(clock, scripted(503, 503, 200, seen=seen), retry={"max_attempts": 4}) as c:
        started = clock.monotonic()
        response = await c.get(URL)
    assert (response.status_code, response.text, len(seen)) == (200, "try 3", 3)
    assert [r.headers["X-Request-Attempt"] for r in seen] == ["1; max=4", "2; max=4", "3; max=4"]
    assert clock.monotonic() > started


async def test_a_post_is_sent_once(clock: FakeClock):
    seen: list[httpx.Request] = []
    async with client(clock, scripted(503, seen=seen), retry={"max_attempts": 3}) as c:
        assert (await c.post(URL, content=b"x")).status_code == 503
    assert len(seen) == 1


async def test_a_breaker_opened_by_a_sync_client_refuses_the_async_one(clock: FakeClock):
    seen: list[httpx.Request] = []
    config = load({"defaults": {"retry": {"max_attempts": 1}, "breaker": {"failure_threshold": 2}}})
    registry = HostRegistry(config, clock=clock)

    def down(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(503)

    sync_inner = httpx.MockTransport(down)
    with ResilientClient(registry=registry, transport=sync_inner) as sync_client:
        assert [sync_client.get(URL).status_code for _ in range(2)] == [503, 503]
    async with AsyncResilientClient(registry=registry, transport=scripted(200, seen=seen)) as c:
        with pytest.raises(CircuitOpenError, match="is open"):
            await c.get(URL)
    assert len(seen) == 2


async def test_the_deadline_cancels_a_hanging_try(clock: FakeClock):
    async def hang(request: httpx.Request) -> httpx.Response:
        await anyio.sleep(30)
        return httpx.Response(200)

    async with client(clock, httpx.MockTransport(hang), retry={"max_attempts": 1}) as c:
        with anyio.fail_after(5), pytest.raises(DeadlineExceeded, match="during try 1"):
            await c.get(URL, deadline=0.05)


async def test_a_cancelled_call_gives_back_its_slot_and_probe(clock: FakeClock):
    started = anyio.Event()

    async def hang(request: httpx.Request) -> httpx.Response:
        started.set()
        await anyio.sleep(30)
        return httpx.Response(200)

    sections = {"limit": {"enabled": True, "min": 1, "initial": 1, "max_wait": 0}}
    async with client(clock, httpx.MockTransport(hang), **sections) as c:
        state = c.registry.for_url(URL)
        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(c.get, URL)
                await started.wait()
                assert state.limit is not None
                assert state.limit.snapshot().in_flight == 1
                group.cancel_scope.cancel()
        assert state.limit.snapshot().in_flight == 0


class _AsyncDrip(httpx.AsyncByteStream):
    """A body read as httpcore reads one: each chunk waits on the loop once (its socket read)
    and takes a second on the fake clock; ``ended`` says whether its generator has finished."""

    def __init__(self, clock: FakeClock, chunks: int) -> None:
        self.clock, self.chunks, self.ended = clock, chunks, False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            for _ in range(self.chunks):
                await anyio.lowlevel.checkpoint()
                self.clock.advance(1.0)
                yield b"x" * 8
        finally:
            self.ended = True


@pytest.mark.parametrize(
    ("sections", "deadline", "error"),
    [
        ({"retry": {"max_attempts": 1}}, 2.5, DeadlineExceeded),
        ({"retry": {"max_attempts": 1, "max_response_bytes": 20}}, None, ResponseTooLarge),
    ],
)
async def test_a_body_cut_by_its_checks_ends_its_reader_before_the_call_returns(
    clock: FakeClock, sections, deadline, error
):
    """A chunk past the deadline or over the cap ends the generator reading the body, in the
    call's own task, as a read cut by a cancellation does: none is left for the loop to
    finalize (trio warns for each)."""
    streams: list[_AsyncDrip] = []

    def handler(request: httpx.Request) -> httpx.Response:
        streams.append(_AsyncDrip(clock, 10))
        return httpx.Response(200, stream=streams[-1])

    async with client(clock, httpx.MockTransport(handler), **sections) as c:
        started = clock.monotonic()
        with anyio.fail_after(5), pytest.raises(error):
            await c.get(URL, deadline=deadline)
        (stream,) = streams
        # Checked before any await: a generator left suspended would not have ended yet.
        assert stream.ended
    assert clock.monotonic() - started == 3.0  # the third chunk, at 3 s and 24 bytes
