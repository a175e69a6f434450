"""One HostRegistry for a ResilientSession and for async callers in the same process: one
breaker, budget and limit per host, whoever calls; and what of the per-host state still
names requests."""

from __future__ import annotations

import ast
from pathlib import Path

import httpx
import pytest

import resilient_session._state
from resilient_session import ResilientSession
from resilient_session._state.breaker import BreakerState
from resilient_session._state.limit import Signal
from resilient_session._state.registry import HostRegistry
from resilient_session.config import load
from resilient_session.errors import ConcurrencyLimitError
from resilient_session.testing import FakeClock, ScriptedTransport

pytestmark = pytest.mark.httpx

URL = "http://api.test/items"
# The package the tests import, not the checkout's src/: the unit tier also runs against an
# installed copy, beside which there is no src/.
STATE = Path(resilient_session._state.__file__).resolve().parent


def shared(clock: FakeClock, **defaults: object) -> tuple[HostRegistry, ResilientSession]:
    registry = HostRegistry(load({"defaults": defaults}), clock=clock)
    return registry, ResilientSession(registry=registry)


@pytest.mark.anyio
async def test_a_breaker_the_session_opened_refuses_the_async_side(anyio_backend, clock):
    """Five 503s through the session open the host's breaker: the state an async caller finds
    for the same host, by an httpx URL of another spelling, is that breaker, open."""
    registry, session = shared(clock, retry={"max_attempts": 1}, breaker={"failure_threshold": 5})
    ScriptedTransport(clock, 503).attach(session)
    for _ in range(5):
        assert session.get(URL).status_code == 503
    spelled = str(httpx.Request("GET", "HTTP://API.test:80/other?x=1").url)
    state = registry.for_url(spelled)
    assert state is session.registry.for_url(URL)
    permit, _ = state.breaker.closed_admission or state.breaker.allow()
    assert (permit, state.breaker.state) == (None, BreakerState.OPEN)
    assert registry.health()["http://api.test:80"].rejected == 1


@pytest.mark.anyio
async def test_slots_tasks_hold_refuse_the_sessions_try(anyio_backend, clock):
    """Two tasks hold the host's two slots: the session's call waits max_wait on the shared
    clock and is refused with ConcurrencyLimitError; once a task gives its slot back, the
    session's next call goes out."""
    registry, session = shared(
        clock,
        retry={"max_attempts": 1},
        limit={"enabled": True, "initial": 2, "min": 2, "max": 2, "max_wait": 0.25},
    )
    transport = ScriptedTransport(clock, 200)
    transport.attach(session)
    limit = registry.for_url(URL).limit
    assert limit is not None
    assert [await limit.aacquire(None) for _ in range(2)] == [True, True]
    with pytest.raises(ConcurrencyLimitError):
        session.get(URL)
    assert (transport.calls, clock.sleeps) == (0, [0.25])
    limit.release(Signal.IGNORE)
    assert session.get(URL).status_code == 200
    assert registry.health()["http://api.test:80"].in_flight == 1


def test_the_budget_is_one_for_both(clock):
    """The async side withdraws the host's two tokens: the session's call answered 503 gets
    no retry (budget_exhausted, one try sent); four first tries deposit two tokens back,
    which the async side can withdraw again."""
    registry, session = shared(
        clock,
        retry={"max_attempts": 3},
        budget={"ratio": 0.5, "max_tokens": 2, "min_per_second": 0},
    )
    transport = ScriptedTransport(clock, 503)
    transport.attach(session)
    bucket = registry.for_url(URL).bucket
    assert [bucket.try_withdraw() for _ in range(3)] == [True, True, False]
    assert session.get(URL).status_code == 503
    assert transport.calls == 1
    # The async side's third withdrawal, and the session's retry.
    assert registry.health()["http://api.test:80"].budget_exhausted == 2
    transport = ScriptedTransport(clock, 200)
    transport.attach(session)
    for _ in range(4):
        session.get(URL)
    assert [bucket.try_withdraw() for _ in range(3)] == [True, True, False]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_no_state_module_names_requests():
    """Per-host state a second transport can share: no module of _state imports requests or
    urllib3 (in a function or under TYPE_CHECKING too), the table of meanings included, whose
    errors come by kind from the call's wire; nor httpx or anyio at import, which async
    callers bring (anyio is imported inside the awaited functions)."""
    naming = {
        str(path.relative_to(STATE)): _imports(path) & {"requests", "urllib3", "httpx"}
        for path in sorted(STATE.rglob("*.py"))
    }
    assert {name for name, found in naming.items() if found} == set()
    assert len(naming) > 20
