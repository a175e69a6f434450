"""Fixtures shared by every tier: a fake clock, a seeded random source, captured events."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from resilient_session.testing import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def rng() -> random.Random:
    return random.Random(0)


@pytest.fixture
def logs() -> Iterator[list[dict[str, Any]]]:
    """Every structlog event emitted inside the test, as dicts."""
    with capture_logs() as captured:
        yield captured


@pytest.fixture(autouse=True)
def _unconfigured_structlog() -> Iterator[None]:
    """Each test starts with structlog as an application that never configured it."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()
