"""What plain httpx's AsyncClient does after calls cut mid-call: the pool poisoning a resilient
transport must not inherit (tests/integration/pool_poison.py has the scenario). Facts about
the installed httpx, recorded as they are: stock httpx 0.28 with httpcore 1.0, or pydantic's
fork when scripts/test-python --httpx2 stands it in for httpx."""

from __future__ import annotations

import gc
import warnings
from collections.abc import Iterator

import httpx
import pytest

from resilient_session.testing.upstream import FlakyUpstream

from .pool_poison import AFTER, CANCELLED, POOL, cut_then_call, stock_limits

pytestmark = [pytest.mark.integration, pytest.mark.httpx, pytest.mark.anyio]

FORK = httpx.__name__ == "httpx2"


@pytest.fixture(autouse=True)
def _leaked_sockets_collected_here() -> Iterator[None]:
    """The sockets stock httpcore leaks when a call is cut mid-connect are these tests' fact,
    not a fault: they are collected here, their ResourceWarning silenced, rather than by
    whichever later test happens to run a full collection (and fail on the warning)."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def _stuck(client: httpx.AsyncClient) -> int:
    """Connections of the client's pool still in their first state: made for a request that
    is gone, never connected, never closed."""
    pool = client._transport._pool  # type: ignore[attr-defined]  # httpx's own transport's
    return sum("CONNECTING" in repr(connection) for connection in pool.connections)


@pytest.mark.skipif(FORK, reason="stock httpx's fact; the fork's is the next test")
async def test_stock_httpx_is_poisoned_by_400_calls_cut_mid_call(anyio_backend):
    """httpx 0.28 on httpcore 1.0, a pool of 10: 400 calls cut by a 20 ms deadline, 20 at
    once, against an upstream answering in 30 ms leave all 10 connections stuck, and each of
    the 50 calls after ends in PoolTimeout, none reaching the healthy upstream."""
    with FlakyUpstream() as upstream:
        timeout = httpx.Timeout(5.0, pool=1.0)
        async with httpx.AsyncClient(limits=stock_limits(), timeout=timeout) as client:
            seen = await cut_then_call(client, upstream)
            stuck = _stuck(client)
    assert seen.cancelled >= CANCELLED - 20
    assert stuck == POOL
    assert (seen.ok, dict(seen.errors), seen.reached) == (0, {"PoolTimeout": AFTER}, 0)


@pytest.mark.skipif(not FORK, reason="the httpx2 fork's fact: scripts/test-python --httpx2")
async def test_the_httpx2_fork_stays_healthy_after_400_calls_cut_mid_call(anyio_backend):
    """httpx2 (httpcore2), the same 400 cut calls: no connection stuck, the 50 calls after
    all answered."""
    with FlakyUpstream() as upstream:
        timeout = httpx.Timeout(5.0, pool=1.0)
        async with httpx.AsyncClient(limits=stock_limits(), timeout=timeout) as client:
            seen = await cut_then_call(client, upstream)
            stuck = _stuck(client)
    assert seen.cancelled >= CANCELLED - 20
    assert stuck == 0
    assert (seen.ok, dict(seen.errors), seen.reached) == (AFTER, {}, AFTER)


async def test_a_pool_free_of_contention_is_not_poisoned(anyio_backend):
    """The same cut calls, never more at once than the pool has connections (20 in a pool of
    20): nothing is stuck and the 50 calls after are answered, on httpx or its fork. What
    poisons the pool is a cancelled call that was waiting for a connection."""
    with FlakyUpstream() as upstream:
        limits = httpx.Limits(max_connections=2 * POOL, max_keepalive_connections=2 * POOL)
        timeout = httpx.Timeout(5.0, pool=1.0)
        async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:
            seen = await cut_then_call(client, upstream)
            stuck = _stuck(client)
    assert seen.cancelled >= CANCELLED - 20
    assert (stuck, seen.ok, dict(seen.errors)) == (0, AFTER, {})
