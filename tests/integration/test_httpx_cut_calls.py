"""Calls cut mid-call through a ResilientTransport on stock httpx: the pool poisoning of
test_httpx_pool.py must not follow (tests/integration/pool_poison.py has the scenario), and
what each cut call took from its host (a limit slot, a breaker probe, a budget token) is back."""

from __future__ import annotations

import gc
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
import pytest

from resilient_session import HostRegistry
from resilient_session.httpx import AsyncResilientClient, ResilientTransport
from resilient_session.testing.upstream import FlakyUpstream

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
