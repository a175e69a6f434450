"""What the async httpx path tells: ``http.try`` events with the requests path's fields, one
OpenTelemetry span per try (tasks on one thread each with their own), health() as the sync
path leaves it, and the deadline of ``with deadline(s):`` and of the inbound ASGI middleware
reaching calls made in tasks."""

from __future__ import annotations

import io
import json
import random
from typing import Any

import anyio
import httpx
import pytest
import structlog
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import resilient_session
from resilient_session import OpenTelemetryHook, deadline
from resilient_session.httpx import AsyncResilientClient, ResilientClient
from resilient_session.inbound import ASGIMiddleware
from resilient_session.testing import FakeClock
from tests.event_fields import HTTP_TRY_FIELDS

pytestmark = [pytest.mark.httpx, pytest.mark.anyio]

URL = "http://svc.test/items?token=secret"
RETRYING = {"defaults": {"retry": {"max_attempts": 3}}}


def per_path(*statuses: int) -> httpx.MockTransport:
    """Answers each path's tries with the next status (the last repeats), and a timeout
    extension's read part in the body."""
    counts: dict[str, int] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        counts[path] = counts.get(path, 0) + 1
        status = statuses[min(counts[path], len(statuses)) - 1]
        read = request.extensions.get("timeout", {}).get("read")
        return httpx.Response(status, content=f"read {read}".encode())

    return httpx.MockTransport(handler)


async def test_an_async_try_event_has_exactly_the_requests_paths_fields(clock: FakeClock):
    stream = io.StringIO()
    resilient_session.log_json_lines(stream)
    try:
        async with AsyncResilientClient(RETRYING, transport=per_path(503, 200), clock=clock) as c:
            response = await c.get(URL)
    finally:
        structlog.reset_defaults()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert response.status_code == 200
    assert [set(line) - {"level", "timestamp"} for line in lines] == [HTTP_TRY_FIELDS] * 2
    assert [
        (line["event"], line["attempt"], line["status"], line["decision"], line["reason"])
        for line in lines
    ] == [("http.try", 1, 503, "retry", "overload"), ("http.try", 2, 200, "success", "ok")]
    assert {line["url"] for line in lines} == {"http://svc.test/items?token=REDACTED"}
    assert {line["host"] for line in lines} == {"http://svc.test:80"}


async def test_each_async_try_is_one_span_whatever_task_shares_the_thread(clock: FakeClock):
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    hook = OpenTelemetryHook(tracer_provider, MeterProvider())
    async with (
        AsyncResilientClient(
            RETRYING, transport=per_path(503, 200), clock=clock, try_hooks=[hook]
        ) as c,
        anyio.create_task_group() as group,
    ):
        for path in ("/a", "/b", "/c"):
            group.start_soon(c.get, f"http://svc.test{path}")
    finished = spans.get_finished_spans()
    by_path = sorted(
        (
            str(span.attributes["url.full"]).rsplit("/", 1)[1],
            span.attributes["http.response.status_code"],
        )
        for span in finished
        if span.attributes is not None
    )
    assert by_path == [("a", 200), ("a", 503), ("b", 200), ("b", 503), ("c", 200), ("c", 503)]
    assert {span.name for span in finished} == {"GET"}


def test_health_after_async_calls_is_as_after_the_same_sync_calls():
    def sync_health() -> Any:
        clock = FakeClock()
        inner = per_path(503, 503, 200)
        with ResilientClient(RETRYING, transport=inner, clock=clock, rng=random.Random(7)) as c:
            for path in ("/a", "/b"):
                c.get(f"http://svc.test{path}")
            return c.registry.health()

    async def async_health() -> Any:
        clock = FakeClock()
        async with AsyncResilientClient(
            RETRYING, transport=per_path(503, 503, 200), clock=clock, rng=random.Random(7)
        ) as c:
            for path in ("/a", "/b"):
                await c.get(f"http://svc.test{path}")
            return c.registry.health()

    sync = sync_health()
    result = anyio.run(async_health)
    (host,) = result
    assert result == sync
    assert (result[host].calls, result[host].tries, result[host].retries) == (2, 6, 4)
    assert result[host].failures == 4


async def test_a_deadline_block_reaches_a_call_made_in_a_task(clock: FakeClock):
    bodies: list[str] = []
    async with AsyncResilientClient(transport=per_path(200), clock=clock) as c:

        async def call() -> None:
            bodies.append((await c.get(URL)).text)

        with deadline(0.75, clock=clock):
            async with anyio.create_task_group() as group:
                group.start_soon(call)
        await call()  # outside the block: the host's own timeout
    assert bodies[0] == "read 0.75"
    assert bodies[1] != "read 0.75"


def test_the_inbound_asgi_deadline_reaches_a_call_made_in_a_task(clock: FakeClock):
    bodies: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        async with AsyncResilientClient(transport=per_path(200), clock=clock) as c:

            async def call() -> None:
                bodies.append((await c.get(URL)).text)

            async with anyio.create_task_group() as group:
                group.start_soon(call)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    middleware = ASGIMiddleware(app, clock=clock)
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "headers": [(b"x-request-timeout-ms", b"800")],
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        pass

    anyio.run(middleware, scope, receive, send)
    # The caller's 800 ms, less the margin the adopter keeps for the answer's way back.
    (body,) = bodies
    assert float(body.split()[1]) == pytest.approx(0.79)
