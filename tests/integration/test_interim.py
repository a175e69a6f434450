"""Informational answers (1xx) before the final one, against a raw-socket upstream: each call
gets its own answer and the pooled connection stays in step with its requests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from resilient_session import ResilientSession

from .interim_server import Interim, InterimUpstream

pytestmark = pytest.mark.integration

# Long enough that the final answer comes in a read of its own, after the hints were taken.
PAUSE = 0.2


@pytest.fixture
def upstream() -> Iterator[InterimUpstream]:
    with InterimUpstream() as server:
        yield server


@pytest.fixture
def session() -> Iterator[ResilientSession]:
    with ResilientSession() as s:
        yield s


def _bodies(session: requests.Session, upstream: InterimUpstream, *paths: str) -> list[str]:
    replies = []
    for path in paths:
        response = session.get(upstream.url(path), timeout=5)
        replies.append(f"{response.status_code} {response.text}")
    return replies


@pytest.mark.parametrize("pause", [PAUSE, 0.0], ids=["hints-then-pause", "hints-at-once"])
def test_early_hints_are_skipped_and_the_next_call_gets_its_own_answer(upstream, session, pause):
    """103 Early Hints, a pause, then 200: the call returns the 200, and the next two calls on
    the same pooled connection each get their own answer."""
    upstream.script("/hints", Interim((103,), pause))

    replies = _bodies(session, upstream, "/hints", "/second", "/third")

    assert replies == [
        "200 reply to /hints #1",
        "200 reply to /second #2",
        "200 reply to /third #3",
    ]
    assert upstream.connections == 1
    assert upstream.requests == [(1, "/hints"), (1, "/second"), (1, "/third")]


def test_several_informational_answers_are_all_skipped(upstream, session):
    """102 Processing, 103 twice and 100 Continue, then 200: the 200 is the call's answer and
    the connection serves the next call."""
    upstream.script("/many", Interim((102, 103, 103, 100), PAUSE))

    replies = _bodies(session, upstream, "/many", "/after")

    assert replies == ["200 reply to /many #1", "200 reply to /after #2"]
    assert upstream.connections == 1


def test_continue_and_plain_answers_are_as_before(upstream, session):
    """100 Continue then 200, and answers with no informational one: what plain requests
    returns, call for call, one connection each."""
    upstream.script("/continue", Interim((100,), PAUSE))
    paths = ("/continue", "/plain", "/continue", "/plain")

    with requests.Session() as plain:
        expected = _bodies(plain, upstream, *paths)
    replies = _bodies(session, upstream, *paths)

    assert replies == expected == [f"200 reply to {path} #{n}" for n, path in enumerate(paths, 1)]
    assert upstream.connections == 2


def test_endless_informational_answers_end_the_call(upstream):
    """An upstream that sends informational answers and never a final one: the try ends with
    a ConnectionError after a handful of them (plain requests returns the first, a 103)."""
    upstream.script("/endless", Interim((103,) * 1000))

    with (
        ResilientSession({"defaults": {"retry": {"max_attempts": 1}}}) as session,
        pytest.raises(requests.ConnectionError, match="informational"),
    ):
        session.get(upstream.url("/endless"), timeout=5)

    assert upstream.requests == [(1, "/endless")]
