"""One runtime per registry: the clock, random source and redacted names every call carries."""

from __future__ import annotations

import random

import requests

from resilient_session import ResilientAdapter, ResilientSession
from resilient_session._observe.redact import SENSITIVE_PARAMS
from resilient_session._pipeline.call import start_call
from resilient_session._state.registry import HostRegistry
from resilient_session._transport.requests_wire import REQUESTS_WIRE
from resilient_session.config import load
from resilient_session.testing import FakeClock


def test_the_registry_builds_its_runtime_from_its_clock_rng_and_config(clock, rng):
    """The runtime holds the registry's own clock and random source, and the built-in names
    plus the config's extra ones, lower-cased."""
    config = load({"events": {"redact_params": ["Trace_Id"]}})
    registry = HostRegistry(config, clock=clock, rng=rng)
    runtime = registry.runtime
    assert (runtime.clock, runtime.rng) == (clock, rng)
    assert runtime.redact == SENSITIVE_PARAMS | {"trace_id"}
    assert len(runtime.redact) == len(SENSITIVE_PARAMS) + 1


def test_every_call_carries_its_registrys_runtime(clock):
    """start_call reads the clock once from the registry and hands the same runtime on."""
    registry = HostRegistry(clock=clock)
    clock.advance(12.5)
    request = requests.Request("GET", "http://svc.test/a").prepare()
    call = start_call(request, registry, REQUESTS_WIRE)
    assert call.runtime is registry.runtime
    assert call.started_at == clock.monotonic() == FakeClock().monotonic() + 12.5


def test_session_and_adapter_hand_their_clock_and_rng_to_the_registry(clock):
    """clock= and rng= reach the registry, and every adapter the session mounts shares it."""
    rng = random.Random(7)
    session = ResilientSession(clock=clock, rng=rng)
    runtime = session.registry.runtime
    assert (runtime.clock, runtime.rng) == (clock, rng)
    adapters = [session.get_adapter(url) for url in ("http://a.test/", "https://a.test/")]
    assert all(isinstance(adapter, ResilientAdapter) for adapter in adapters)
    assert {id(adapter.registry) for adapter in adapters} == {id(session.registry)}  # type: ignore[attr-defined]
    own = ResilientAdapter(clock=clock, rng=rng)
    assert (own.registry.runtime.clock, own.registry.runtime.rng) == (clock, rng)
