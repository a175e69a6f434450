"""Every guard reads one table: a status configured as overload is overload for the throttle
and the limit too, and one taken out of the list is overload for none (loopback)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from resilient_session import ResilientSession, ThrottledError
from resilient_session.testing import FlakyUpstream, Reply

pytestmark = pytest.mark.integration

CALLS = 120


def _session(overload: list[int]) -> ResilientSession:
    defaults: dict[str, Any] = {
        "retry": {"max_attempts": 1, "overload_statuses": overload},
        "breaker": {"failure_threshold": 1_000_000},
        "limit": {"initial": 8, "initial_burst": 8, "min": 1},
    }
    return ResilientSession({"defaults": defaults}, rng=random.Random(5))


def _refused(session: ResilientSession, url: str) -> int:
    refused = 0
    for _ in range(CALLS):
        try:
            session.get(url, timeout=2.0)
        except ThrottledError:
            refused += 1
    return refused


def _key(upstream: FlakyUpstream) -> str:
    return f"http://{upstream.host}:{upstream.port}"


@pytest.mark.parametrize(
    ("status", "overload", "throttled", "limit_after"),
    [
        (420, [420, 429, 503], True, 1),
        (429, [429, 503], True, 1),
        (420, [429, 503], False, 8),
        (429, [503], False, 8),
    ],
    ids=["420-listed", "429-listed", "420-unlisted", "429-unlisted"],
)
def test_a_listed_status_is_overload_for_the_throttle_and_the_limit(
    upstream, status, overload, throttled, limit_after
):
    """120 calls all answered *status*: listed as overload, the throttle refuses most of them
    and the limit shrinks to its floor; unlisted, nothing is refused and the limit holds."""
    upstream.script("/answer", Reply(status))
    with _session(overload) as session:
        refused = _refused(session, upstream.url("/answer"))
        health = session.health()[_key(upstream)]
    if throttled:
        assert refused >= 0.6 * CALLS
    else:
        assert refused == 0
    assert upstream.hits("/answer") == CALLS - refused
    assert health.limit == limit_after
