"""Calls cut mid-call through a ResilientTransport on stock httpx: the pool poisoning of
test_httpx_pool.py must not follow (tests/integration/pool_poison.py has the scenario), and
what each cut call took from its host (a limit slot, a breaker probe, a budget token) is back."""

from __future__ import annotations

import gc
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import anyio
import httpx
import pytest

from resilient_session import HostRegistry
from resilient_session.httpx import AsyncResilientClient, ResilientTransport, ResponseTooLarge
from resilient_session.testing.upstream import FlakyUpstream, Reply

from .flood import Body, Flood
from .pool_poison import AFTER, CANCELLED, cut_then_call, stock_limits

pytestmark = [pytest.mark.integration, pytest.mark.httpx, pytest.mark.anyio]

TIMEOUT = httpx.Timeout(5.0, pool=1.0)
GUARDED = {
    "defaults": {
        "limit": {"enabled": True, "min": 40, "initial": 40, "max": 40, "max_wait": 1.0},
        "breaker": {"failure_threshold": 5},
    }
}


@pytest.fixture(autouse=True)
def _no_socket_left_behind() -> Iterator[None]:
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        gc.collect()


@asynccontextmanager
async def resilient_client() -> AsyncIterator[httpx.AsyncClient]:
    async with AsyncResilientClient(GUARDED, limits=stock_limits(), timeout=TIMEOUT) as client:
        yield client


@asynccontextmanager
async def client_on_a_bare_transport() -> AsyncIterator[httpx.AsyncClient]:
    # An inner transport handed in is the caller's to close.
    async with httpx.AsyncHTTPTransport(retries=0, limits=stock_limits()) as inner:
        resilient = ResilientTransport(GUARDED, async_transport=inner)
        async with httpx.AsyncClient(transport=resilient, timeout=TIMEOUT) as client:
            yield client


def registry_of(client: httpx.AsyncClient) -> HostRegistry:
    transport = client._transport
    assert isinstance(transport, ResilientTransport)
    return transport.registry


@pytest.mark.parametrize("make", [resilient_client, client_on_a_bare_transport])
async def test_400_calls_cut_mid_call_leave_the_pool_and_the_host_healthy(anyio_backend, make):
    """The same 400 calls cut at 20 ms, 20 at once, on stock httpx's pool of 10 (which they
    poison without the transport): the 50 calls after are all answered, each reaching the
    upstream, and the host's limit, breaker and budget are as before the cut calls."""
    with FlakyUpstream() as upstream:
        async with make() as client:
            await client.get(upstream.url("/"))
            registry = registry_of(client)
            state = registry.for_url(upstream.url("/"))
            before = registry.health()[state.key]
            seen = await cut_then_call(client, upstream)
            after = registry.health()[state.key]
    assert seen.cancelled >= CANCELLED - 20
    assert (seen.ok, dict(seen.errors), seen.reached) == (AFTER, {}, AFTER + 1)
    assert state.limit is not None
    assert state.limit.snapshot().in_flight == 0
    assert (after.breaker, after.failures, after.rejected) == (before.breaker, 0, 0)
    assert after.budget_exhausted == before.budget_exhausted == 0
    assert after.retries == before.retries == 0


async def test_hedges_cut_by_their_winners_leave_the_pool_healthy(anyio_backend):
    """200 hedged calls, 20 at once on a pool of 10, against an upstream whose every other
    answer takes 200 ms: a slow try loses to a hedge sent after 20 ms and is cancelled (or
    the hedge is, when it drew the slow answer); then the 400 cut calls and the 50 after, all
    answered, and no try is left holding a slot."""
    config = {
        "defaults": {
            "retry": {"max_attempts": 2},
            "hedging": {"enabled": True, "delay": 0.02},
            "limit": {"enabled": True, "min": 40, "initial": 40, "max": 40, "max_wait": 1.0},
        }
    }
    with FlakyUpstream() as upstream:
        upstream.script("/tail", Reply(200, delay=0.2), Reply(200), cycle=True)
        async with AsyncResilientClient(config, limits=stock_limits(), timeout=TIMEOUT) as client:
            answered = 0

            async def hedged() -> None:
                nonlocal answered
                response = await client.get(upstream.url("/tail"))
                answered += response.status_code == 200

            with anyio.fail_after(60):
                for _ in range(10):
                    async with anyio.create_task_group() as tasks:
                        for _ in range(20):
                            tasks.start_soon(hedged)
                seen = await cut_then_call(client, upstream)
            state = client.registry.for_url(upstream.url("/"))
    assert state.hedge is not None
    hedging = state.hedge.snapshot()
    assert answered == 200
    # Each hedge raced one try: one of the two won, the other was cancelled. How many
    # hedges the budget paid for, and how many won, varies with the order replies go out.
    assert hedging.hedges >= 20
    assert hedging.wins >= 1  # on httpx2's pool, 3 of 58 seen
    assert hedging.cancelled == hedging.hedges
    assert (seen.ok, dict(seen.errors)) == (AFTER, {})
    assert seen.reached >= AFTER  # a call queued past the delay is hedged too
    assert state.limit is not None
    assert state.limit.snapshot().in_flight == 0


async def test_bodies_cut_by_the_cap_leave_no_reader_for_the_loop(anyio_backend):
    """20 calls whose chunked body never ends, cut past a 4 KiB cap by the client's own check
    (not by a cancellation): httpx's and httpcore's readers of each end in the call's task,
    so a collection finds none for the loop to finalize (trio warns for each), and the call
    after is answered on the same pool."""
    config = {"defaults": {"retry": {"max_attempts": 1, "max_response_bytes": 4096}}}
    with Flood() as flood:
        flood.script("/endless", Body(framing="chunked"))
        async with AsyncResilientClient(config, limits=stock_limits(), timeout=TIMEOUT) as client:
            with anyio.fail_after(30):
                for _ in range(20):
                    with pytest.raises(ResponseTooLarge):
                        await client.get(flood.url("/endless"))
                # An abandoned generator is finalized here, while the loop runs.
                gc.collect()
                await anyio.sleep(0)
                answered = await client.get(flood.url("/small"))
        served = flood.settle()
    assert (answered.status_code, answered.content) == (200, b"xx")
    assert [one.path for one in served] == ["/endless"] * 20 + ["/small"]
    assert not any(one.done for one in served[:20])
