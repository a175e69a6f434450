"""The pool guard: a try shielded until httpcore's first step on a connection, the caller's
own trace still told every step, the caller's request left as it was."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest

from resilient_session._transport.httpx_pool_guard import poisons_on_cancel, send_guarded

pytestmark = [pytest.mark.httpx, pytest.mark.anyio]


class Stepping(httpx.AsyncBaseTransport):
    """Waits for a connection (until *handed* is set), then reports two steps through the
    request's trace, with a checkpoint after each."""

    def __init__(self) -> None:
        self.waiting = anyio.Event()
        self.handed = anyio.Event()
        self.steps = 0
        self.taken = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.waiting.set()
        await self.handed.wait()  # cancelled here, httpcore's pool keeps a stuck connection
        self.taken = True
        for step in ("connection.connect_tcp.started", "http11.send_request_headers.started"):
            trace = request.extensions.get("trace")
            if trace is not None:
                await trace(step, {})
            await anyio.lowlevel.checkpoint()
            self.steps += 1
        return httpx.Response(200)


async def test_a_cancellation_waits_for_the_first_step_then_cuts(anyio_backend):
    inner = Stepping()
    request = httpx.Request("GET", "http://svc.test/")
    with anyio.fail_after(5):
        async with anyio.create_task_group() as group:
            group.start_soon(send_guarded, inner, request)
            await inner.waiting.wait()
            group.cancel_scope.cancel()
            inner.handed.set()
    # Shielded through the wait, cut at the first checkpoint after the first step.
    assert (group.cancel_scope.cancelled_caught, inner.taken, inner.steps) == (
        True,
        True,
        0,
    )
    assert "trace" not in request.extensions


async def test_the_callers_trace_is_told_every_step(anyio_backend):
    steps: list[str] = []

    async def trace(name: str, info: dict[str, Any]) -> None:
        steps.append(name)

    request = httpx.Request("GET", "http://svc.test/", extensions={"trace": trace})
    inner = Stepping()
    inner.handed.set()
    with anyio.fail_after(5):
        response = await send_guarded(inner, request)
    assert response.status_code == 200
    assert steps == ["connection.connect_tcp.started", "http11.send_request_headers.started"]
    assert request.extensions["trace"] is trace


def test_only_httpx_own_transport_is_guarded():
    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200)

    assert poisons_on_cancel(httpx.AsyncHTTPTransport()) is True
    assert poisons_on_cancel(httpx.MockTransport(handler)) is False
