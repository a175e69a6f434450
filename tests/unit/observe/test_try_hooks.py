"""The per-try hook seam: every try told once, as the event tells it, and headers added by a
send hook reach only the tries that leave."""

from __future__ import annotations

import random
from collections.abc import Iterable, MutableMapping
from typing import Any

import pytest
import requests

from resilient_session import (
    HostRegistry,
    ResilientSession,
    SendHook,
    StateChange,
    StateHook,
    TryHook,
    TryRecord,
    TrySending,
)
from resilient_session._pipeline.attempt import Attempt
from resilient_session._pipeline.call import start_call
from resilient_session._pipeline.drive import drive
from resilient_session._pipeline.stages import standard_chain
from resilient_session._transport.requests_wire import REQUESTS_WIRE
from resilient_session.config import load
from resilient_session.testing import FakeClock, ScriptedTransport, Step

URL = "http://user:pw@svc.test/items?token=t0p&x=1"


class Spy:
    """A hook that keeps what it is told."""

    def __init__(self) -> None:
        self.records: list[TryRecord] = []

    def on_try(self, record: TryRecord, /) -> None:
        self.records.append(record)


class Stamp(Spy):
    """A send hook that adds one header naming the try."""

    def __init__(self) -> None:
        super().__init__()
        self.sending: list[TrySending] = []

    def on_send(self, sending: TrySending, /) -> Iterable[tuple[str, str]]:
        self.sending.append(sending)
        return [("X-Stamp", f"try-{sending.attempt}")]


def _run(
    registry: HostRegistry, clock: FakeClock, *steps: Step, latency: float = 0.0
) -> ScriptedTransport:
    transport = ScriptedTransport(clock, *steps, latency=latency)
    chain = standard_chain(transport, registry.runtime)
    request = requests.Request("GET", URL).prepare()
    drive(chain, Attempt.first(start_call(request, registry, REQUESTS_WIRE)))
    return transport


def _registry(
    clock: FakeClock, hook: TryHook, config: dict[str, Any] | None = None
) -> HostRegistry:
    return HostRegistry(load(config or {}), clock=clock, rng=random.Random(0), try_hooks=[hook])


def test_each_try_is_told_once_with_the_event_fields(
    clock: FakeClock, logs: list[MutableMapping[str, Any]]
) -> None:
    """503, 503, 200: three records whose event fields are the three http.try events."""
    spy = Spy()
    config = {"defaults": {"retry": {"backoff_base": 0.1}}}
    _run(_registry(clock, spy, config), clock, 503, 503, 200, latency=0.5)
    events = [
        {k: v for k, v in e.items() if k not in ("event", "log_level")}
        for e in logs
        if e["event"] == "http.try"
    ]
    assert [r.event_fields() for r in spy.records] == events
    assert [(r.attempt, r.status, r.decision, r.refused) for r in spy.records] == [
        (1, 503, "retry", None),
        (2, 503, "retry", None),
        (3, 200, "success", None),
    ]
    assert spy.records[0].url == "http://svc.test/items?token=REDACTED&x=1"
    assert all(r.ended - r.started == pytest.approx(0.5) for r in spy.records)
    assert spy.records[1].started == pytest.approx(spy.records[0].ended + spy.records[0].wait)
    assert not any(r.hedge for r in spy.records)


def test_a_refused_try_is_told_with_its_reason(clock: FakeClock) -> None:
    """With the breaker open, the hook hears one fail_fast try refused by breaker_open."""
    spy = Spy()
    registry = _registry(clock, spy, {"defaults": {"breaker": {"failure_threshold": 1}}})
    _run(registry, clock, 500)
    transport = _run(registry, clock, 200)
    assert transport.calls == 0
    last = spy.records[-1]
    assert (last.decision, last.reason, last.refused, last.status) == (
        "fail_fast",
        "breaker_open",
        "breaker_open",
        None,
    )


def test_a_send_hook_adds_headers_to_the_tries_that_leave(clock: FakeClock) -> None:
    """Each try sent carries its own header; the caller's request keeps none, and a refused
    try is never seen by on_send."""
    stamp = Stamp()
    assert isinstance(stamp, SendHook)
    registry = _registry(clock, stamp, {"defaults": {"breaker": {"failure_threshold": 3}}})
    transport = _run(registry, clock, 503, 503, 200)
    assert [a.request.headers["X-Stamp"] for a in transport.sent] == ["try-1", "try-2", "try-3"]
    assert "X-Stamp" not in transport.sent[0].call.request.headers
    assert [s.attempt for s in stamp.sending] == [1, 2, 3]
    assert stamp.sending[0].url == "http://svc.test/items?token=REDACTED&x=1"
    _run(registry, clock, 500)  # three failures open the breaker
    sent_before = len(stamp.sending)
    assert _run(registry, clock, 200).calls == 0
    assert len(stamp.sending) == sent_before
    assert stamp.records[-1].refused == "breaker_open"


def test_hooks_go_with_the_registry_when_one_is_shared(clock: FakeClock) -> None:
    """A session handed a registry takes the registry's hooks, and says so when given others."""
    spy = Spy()
    registry = _registry(clock, spy)
    with pytest.raises(ValueError, match="try_hooks"):
        ResilientSession(registry=registry, try_hooks=[Spy()])
    session = ResilientSession(registry=registry)
    ScriptedTransport(clock, 200).attach(session)
    assert session.get("http://svc.test/a").status_code == 200
    assert [(r.method, r.status) for r in spy.records] == [("GET", 200)]


class Watcher(Spy):
    """A hook that also keeps each breaker state change."""

    def __init__(self) -> None:
        super().__init__()
        self.changes: list[tuple[str, str, int]] = []

    def on_transition(self, change: StateChange, /) -> None:
        self.changes.append((change.from_state.value, change.to_state.value, change.seq))


def test_breaker_changes_reach_a_state_hook_after_the_event(
    clock: FakeClock, logs: list[MutableMapping[str, Any]]
) -> None:
    """Open, half-open, closed: the hook hears each change the breaker.transition events log."""
    watcher = Watcher()
    assert isinstance(watcher, StateHook)
    config = {"defaults": {"breaker": {"failure_threshold": 1, "recovery_timeout": 5}}}
    registry = _registry(clock, watcher, config)
    _run(registry, clock, 500)
    clock.advance(6)
    _run(registry, clock, 200)
    logged = [(e["from"], e["to"], e["seq"]) for e in logs if e["event"] == "breaker.transition"]
    assert (
        watcher.changes
        == logged
        == [
            ("closed", "open", 1),
            ("open", "half_open", 2),
            ("half_open", "closed", 3),
        ]
    )
