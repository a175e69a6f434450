"""What the caller and the logs see: redirect history, hooks, and JSON events on the wire."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest
import requests
import structlog

import resilient_session
from resilient_session.testing.upstream import Reply
from tests.event_fields import HTTP_TRY_FIELDS

pytestmark = pytest.mark.integration


def _record_status(into: list[int]) -> Callable[..., None]:
    """A response hook that appends each response's status to *into*."""

    def hook(response: requests.Response, *args: Any, **kwargs: Any) -> None:
        into.append(response.status_code)

    return hook


def test_redirect_history_holds_the_redirect_and_never_the_retries(upstream, make_session):
    """A 302 to a path answering 503 then 200 ends in 200 with only the 302 in history,
    and response hooks run once per hop exactly as with plain requests."""
    upstream.script("/from", Reply(302, headers={"Location": "/to"}))
    upstream.script("/to", Reply(503, body=b"busy"), Reply(200, body=b"arrived"))
    upstream.script("/plain-from", Reply(302, headers={"Location": "/plain-to"}))
    upstream.script("/plain-to", Reply(200, body=b"arrived"))
    session = make_session()
    hooked: list[int] = []
    session.hooks["response"].append(_record_status(hooked))
    plain_hooked: list[int] = []

    response = session.get(upstream.url("/from"))
    with requests.Session() as plain:
        plain.hooks["response"].append(_record_status(plain_hooked))
        plain_response = plain.get(upstream.url("/plain-from"))

    assert (response.status_code, response.content) == (200, b"arrived")
    assert [(r.status_code, r.url) for r in response.history] == [(302, upstream.url("/from"))]
    assert response.url == upstream.url("/to")
    assert (upstream.hits("/from"), upstream.hits("/to")) == (1, 2)
    assert hooked == [302, 200]
    assert len(hooked) == len(plain_hooked) == 1 + len(plain_response.history)


def test_events_are_json_lines_with_redacted_url_and_no_credentials(upstream, make_session):
    """A 503-then-200 call writes exactly two JSON lines, the URL without userinfo or token."""
    upstream.script("/events", Reply(503), Reply(200, body=b"ok"))
    url = f"http://user:pw@127.0.0.1:{upstream.port}/events?token=secret&x=1"
    stream = io.StringIO()
    resilient_session.log_json_lines(stream)
    try:
        response = make_session().get(url, headers={"X-Trace": "t-1"})
    finally:
        structlog.reset_defaults()
    output = stream.getvalue()

    assert response.status_code == 200
    lines = [json.loads(line) for line in output.splitlines()]
    assert len(lines) == 2
    assert all(set(line) >= HTTP_TRY_FIELDS for line in lines)
    assert {key for line in lines for key in line} - HTTP_TRY_FIELDS <= {"level", "timestamp"}
    assert [line["url"] for line in lines] == [f"{upstream.base_url}/events?token=REDACTED&x=1"] * 2
    assert [
        (line["event"], line["attempt"], line["status"], line["decision"], line["reason"])
        for line in lines
    ] == [("http.try", 1, 503, "retry", "overload"), ("http.try", 2, 200, "success", "ok")]
    assert [line["host"] for line in lines] == [upstream.base_url] * 2
    authorization = {hit.header("Authorization") for hit in upstream.received("/events")}
    assert len(authorization) == 1
    (credentials,) = authorization
    assert credentials is not None
    assert credentials.startswith("Basic ")
    for secret in ("secret", "pw", credentials, credentials.split()[1]):
        assert secret not in output
