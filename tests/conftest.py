"""Fixtures shared by every tier: a fake clock, a seeded random source, captured events."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

import pytest
import requests
import structlog
from structlog.testing import capture_logs

from resilient_session._pipeline.attempt import Attempt, Outcome
from resilient_session._pipeline.call import start_call
from resilient_session._pipeline.drive import drive
from resilient_session._pipeline.stages import standard_chain
from resilient_session._state.registry import HostRegistry, HostState
from resilient_session._transport.requests_wire import REQUESTS_WIRE
from resilient_session.config import load
from resilient_session.deadline import deadline as deadline_scope
from resilient_session.testing import FakeClock, ScriptedTransport, Step


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def rng() -> random.Random:
    return random.Random(0)


@pytest.fixture
def logs() -> Iterator[list[MutableMapping[str, Any]]]:
    """Every structlog event emitted inside the test, as dicts."""
    with capture_logs() as captured:
        yield captured


@pytest.fixture(autouse=True)
def _unconfigured_structlog() -> Iterator[None]:
    """Each test starts with structlog as an application that never configured it."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


class Harness:
    """One host's chain on a fake clock: ``run(*steps)`` drives one call through all stages."""

    def __init__(self, clock: FakeClock, rng: random.Random, config: dict[str, Any] | None = None):
        self.clock = clock
        self.rng = rng
        self.registry = HostRegistry(load(config or {}), clock=clock, rng=rng)

    def run(
        self, *steps: Step, latency: float = 0.0, **request: Any
    ) -> tuple[Outcome, ScriptedTransport]:
        """Drive one call; *request* takes the keywords of :meth:`first_attempt`."""
        transport = ScriptedTransport(self.clock, *steps, latency=latency)
        chain = standard_chain(transport)
        outcome = drive(chain, self.first_attempt(**request))
        return outcome, transport

    def first_attempt(
        self,
        method: str = "GET",
        url: str = "http://svc.test/items",
        headers: dict[str, str] | None = None,
        body: Any = None,
        timeout: Any = None,
        deadline: float | None = None,
    ) -> Attempt:
        request = requests.Request(method, url, headers=headers, data=body).prepare()
        if deadline is None:
            call = start_call(request, self.registry, REQUESTS_WIRE, timeout=timeout)
        else:
            with deadline_scope(deadline, clock=self.clock):
                call = start_call(request, self.registry, REQUESTS_WIRE, timeout=timeout)
        return Attempt.first(call)

    def host(self, url: str = "http://svc.test/items") -> HostState:
        return self.registry.for_url(url)


@pytest.fixture
def harness(clock: FakeClock, rng: random.Random) -> Callable[..., Harness]:
    """Build a Harness with an optional config dict."""

    def build(config: dict[str, Any] | None = None) -> Harness:
        return Harness(clock, rng, config)

    return build


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every ``@pytest.mark.anyio`` test runs under both event loops anyio drives."""
    backend: str = request.param
    return backend
