"""requests-mock's Mocker answers each try, and the pipeline runs around it: retries, waits and
events, as with `responses`."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import requests
import requests_mock
from structlog.testing import capture_logs

from resilient_session import ResilientAdapter, ResilientSession

from .conftest import FAST

URL = "http://svc.test/items"
FLAKY = [{"status_code": 503}, {"status_code": 503}, {"status_code": 200, "text": "items"}]


def _tries(logs: list[MutableMapping[str, Any]]) -> list[tuple[object, object]]:
    return [(e["attempt"], e["status"]) for e in logs if e["event"] == "http.try"]


def test_mocker_503_503_200_is_retried_to_the_200(clock):
    """A Mocker answering 503, 503, 200: the caller gets the 200, the mocker counts three calls,
    three http.try events are logged and the two waits went to the clock."""
    session = ResilientSession(FAST, clock=clock)
    with requests_mock.Mocker() as mocker, capture_logs() as logs:
        mocker.get(URL, FLAKY)
        response = session.get(URL)
    assert (response.status_code, response.text) == (200, "items")
    assert mocker.call_count == 3
    assert _tries(logs) == [(1, 503), (2, 503), (3, 200)]
    assert len(clock.sleeps) == 2


def test_requests_mock_fixture_is_retried_too(requests_mock, clock):
    """The pytest fixture of requests-mock is a Mocker: 503, 503, 200 gives 200 after three."""
    requests_mock.get(URL, FLAKY)
    with capture_logs() as logs:
        response = ResilientSession(FAST, clock=clock).get(URL, deadline=5.0)
    assert response.status_code == 200
    assert requests_mock.call_count == 3
    assert [r.headers["X-Request-Attempt"] for r in requests_mock.request_history] == [
        "1; max=4",
        "2; max=4",
        "3; max=4",
    ]
    assert len(_tries(logs)) == 3


def test_mocker_on_one_session_and_its_end_leave_ours_in_place(clock):
    """A Mocker aimed at one session retries too; once it stops, the session keeps no trace of
    it and sends through its own ResilientAdapter again."""
    session = ResilientSession(FAST, clock=clock)
    with requests_mock.Mocker(session=session) as mocker:
        mocker.get(URL, FLAKY)
        assert session.get(URL).status_code == 200
        assert mocker.call_count == 3
    assert "get_adapter" not in vars(session)
    assert isinstance(session.get_adapter(URL), ResilientAdapter)


def test_a_give_up_status_is_not_retried_and_the_budget_is_the_sessions(clock):
    """A 404 is answered at once (one call); the tries a Mocker serves count in the session's
    own per-host health."""
    session = ResilientSession(FAST, clock=clock)
    with requests_mock.Mocker() as mocker:
        mocker.get(URL, status_code=404)
        mocker.get(URL + "/flaky", FLAKY)
        assert session.get(URL).status_code == 404
        assert session.get(URL + "/flaky").status_code == 200
    assert mocker.call_count == 4
    health = session.health()["http://svc.test:80"]
    assert (health.calls, health.tries) == (2, 4)


def test_plain_session_under_mocker_is_untouched():
    """A plain requests.Session under the same Mocker still gets the first answer: nothing of
    ours reaches sessions that are not ResilientSessions."""
    with requests_mock.Mocker() as mocker:
        mocker.get(URL, FLAKY)
        assert requests.Session().get(URL).status_code == 503
    assert mocker.call_count == 1
