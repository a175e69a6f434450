"""A try on httpx's own async transport that a cancellation cannot leave stuck in the pool.

Stock httpcore (1.0, beneath httpx 0.28) makes a connection for a request waiting in its pool
and hands it over; a request cancelled between the hand-over and its first use leaves that
connection in the pool for good, neither connected nor closed (httpx #1461, #2139; httpcore
#1093). After as many such cancellations as the pool has connections, every request waits out
its pool timeout against a healthy host. A deadline, a hedge's loser or a caller's cancel scope
each cancel a try wherever it waits, so the transport cannot avoid cancelling tries there.

The guard shields the try from cancellation until httpcore reports (through the request's
``trace`` extension) the first step on a connection: from then on the connection belongs to
the request and a cancellation closes it (a connect cut short expires, a cut exchange closes).
The price is a cancelled try's wait for its connection, bounded by the pool timeout, which the
deadline stage clamps to what is left of the deadline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from .httpx_wire import copied

Trace = Callable[[str, dict[str, Any]], Awaitable[None]]


def poisons_on_cancel(inner: httpx.AsyncBaseTransport) -> bool:
    """Whether *inner* hands requests to an httpcore pool (httpx's own transport); a mock or
    a transport of the caller's own is sent to as it is."""
    return isinstance(inner, httpx.AsyncHTTPTransport)


async def send_guarded(inner: httpx.AsyncBaseTransport, request: httpx.Request) -> httpx.Response:
    """``inner.handle_async_request(request)``, cancellable only once httpcore has started on
    a connection for it."""
    import anyio  # only async calls load it

    scope = anyio.CancelScope(shield=True)
    sent = copied(request)
    extensions = sent.extensions  # httpcore's request holds this same dict
    theirs: Trace | None = extensions.get("trace")

    async def first_step(name: str, info: dict[str, Any]) -> None:
        scope.shield = False  # a pending cancellation is delivered at the next await
        if theirs is None:
            # httpcore reads the extension anew at each step: the rest of the try untraced.
            extensions.pop("trace", None)
        else:
            await theirs(name, info)

    extensions["trace"] = first_step
    with scope:
        return await inner.handle_async_request(sent)
    # Never reached: nothing cancels the scope itself, so it swallows no cancellation.
    raise AssertionError("the pool guard's scope swallowed a cancellation")  # pragma: no cover
