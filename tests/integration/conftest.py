"""Fixtures for the integration tier: loopback upstreams and sessions tuned for fast retries."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from resilient_session import ResilientSession
from resilient_session.upstream import FlakyUpstream

# Real time is spent in these tests, so backoff is tiny: the behaviour is what is tested.
FAST_RETRY = {"backoff_base": 0.01, "backoff_cap": 0.05}

SessionFactory = Callable[..., ResilientSession]


@pytest.fixture
def upstream() -> Iterator[FlakyUpstream]:
    """A running FlakyUpstream, stopped when the test ends."""
    with FlakyUpstream() as up:
        yield up


@pytest.fixture
def make_session() -> Iterator[SessionFactory]:
    """Build ``ResilientSession``s whose defaults are fast retries plus the given sections.

    ``make_session(retry={"max_attempts": 1}, breaker={...})`` merges each section over the
    fast defaults; every session built is closed when the test ends.
    """
    sessions: list[ResilientSession] = []

    def make(**sections: dict[str, Any]) -> ResilientSession:
        defaults: dict[str, Any] = {"retry": dict(FAST_RETRY)}
        for name, values in sections.items():
            defaults[name] = {**defaults.get(name, {}), **values}
        session = ResilientSession({"defaults": defaults})
        sessions.append(session)
        return session

    yield make
    for session in sessions:
        session.close()
