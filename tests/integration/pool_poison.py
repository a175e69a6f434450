"""Calls cut mid-call by their deadline, then calls that must go through: the cancellation that
poisons httpcore's connection pool (httpx #1461, #2139; httpcore #1093), for any AsyncClient.

httpcore's pool gives a waiting request a connection it creates for it; when that request's
task is cancelled before the connection is made, nothing ever closes or reuses it, and it
holds a slot for good (the pool does not reap a connection still in its first state). Calls
cut by a deadline shorter than the answer, more at once than the pool has connections, make
that happen every round: the cancelled calls on the wire close their connections, whose slots
go to cancelled calls still waiting.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import anyio
import httpx

from resilient_session.testing.upstream import FlakyUpstream, Reply

# httpcore's own default size for a pool; httpx's Client defaults to 100.
POOL = 10
AT_ONCE = 2 * POOL
CANCELLED = 400
AFTER = 50
ANSWER_AFTER = 0.03
DEADLINE = 0.02


@dataclass
class Poisoned:
    """What the cut calls and the calls after them did."""

    cancelled: int = 0
    answered: int = 0
    # The calls after: answered 200, or the httpx error each raised.
    ok: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    # What the upstream saw of the calls after.
    reached: int = 0


def stock_limits() -> httpx.Limits:
    return httpx.Limits(max_connections=POOL, max_keepalive_connections=POOL)


async def cut_then_call(client: httpx.AsyncClient, upstream: FlakyUpstream) -> Poisoned:
    """CANCELLED calls to *upstream*'s /slow (answered after 30 ms), AT_ONCE at a time, each
    cut by a 20 ms deadline; then AFTER calls at once to /."""
    upstream.script("/slow", Reply(200, body=b"slow", delay=ANSWER_AFTER), cycle=True)
    seen = Poisoned()

    async def cut() -> None:
        with anyio.move_on_after(DEADLINE) as scope:
            await client.get(upstream.url("/slow"))
            seen.answered += 1
        seen.cancelled += scope.cancelled_caught

    async def after() -> None:
        try:
            response = await client.get(upstream.url("/"))
        except httpx.HTTPError as error:
            seen.errors[type(error).__name__] += 1
        else:
            seen.ok += response.status_code == 200

    with anyio.fail_after(60):
        while seen.cancelled + seen.answered < CANCELLED:
            async with anyio.create_task_group() as tasks:
                for _ in range(AT_ONCE):
                    tasks.start_soon(cut)
        async with anyio.create_task_group() as tasks:
            for _ in range(AFTER):
                tasks.start_soon(after)
    seen.reached = upstream.hits("/")
    return seen
