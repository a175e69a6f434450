"""Fixtures for the functional tier: requests shaped by `responses`, on the fake clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import responses
from responses.registries import OrderedRegistry

from resilient_session import ResilientSession
from resilient_session.testing import FakeClock

# Backoff short enough to read in an assertion; the fake clock never really waits for it.
FAST = {"defaults": {"retry": {"backoff_base": 0.05, "backoff_cap": 0.1}}}


@pytest.fixture
def mock() -> Iterator[responses.RequestsMock]:
    """`responses`, answering in the order the test registers, one answer per try."""
    with responses.RequestsMock(registry=OrderedRegistry) as rsps:
        yield rsps


@pytest.fixture
def session(clock: FakeClock) -> ResilientSession:
    return ResilientSession(FAST, clock=clock)
