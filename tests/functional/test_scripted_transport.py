"""ScriptedTransport.attach plays a script for a real session's calls, through the pipeline."""

from __future__ import annotations

import pytest

from resilient_session import ResilientSession
from resilient_session.testing import FakeClock, ScriptedTransport

URL = "https://api.test/items"


def test_attached_script_runs_through_the_pipeline_and_the_sessions_state(clock):
    """503, 503, 200 attached to a session: a 200 after three tries, two waits on the fake
    clock, and the session's health counts the call and its three tries."""
    session = ResilientSession(clock=clock)
    transport = ScriptedTransport(clock, 503, 503, 200, latency=0.1)
    transport.attach(session)
    response = session.get(URL, deadline=30.0)
    assert response.status_code == 200
    assert response.request.url == URL
    assert transport.calls == 3
    assert len(clock.sleeps) == 2
    health = session.health()["https://api.test:443"]
    assert (health.calls, health.tries, health.retries) == (1, 3, 2)


def test_only_the_given_prefixes_are_scripted(clock):
    """A script attached for https:// leaves http:// to the adapter the session made."""
    session = ResilientSession(clock=clock)
    own = session.get_adapter("http://api.test/")
    ScriptedTransport(clock, 200).attach(session, prefixes=("https://",))
    assert session.get_adapter("http://api.test/") is own
    assert session.get_adapter("https://api.test/") is not own
    assert session.get(URL).status_code == 200


def test_attach_refuses_a_session_on_another_clock(clock):
    """A script on one fake clock cannot drive a session on another: decisions would not add
    up."""
    with pytest.raises(ValueError, match="clock"):
        ScriptedTransport(FakeClock(), 200).attach(ResilientSession(clock=clock))
