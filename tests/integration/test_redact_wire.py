"""The JSON line a real call writes hides a sensitive value whatever '-' or '_' its name is
spelt with, built-in names and configured ones alike."""

from __future__ import annotations

import io
import json

import pytest
import structlog

import resilient_session
from resilient_session.testing.upstream import Reply

pytestmark = pytest.mark.integration


def test_the_logged_url_hides_names_spelt_with_either_separator(upstream):
    """access-key (built in as access_key), Secret-Key, x_api_key and a configured session-id
    sent as session_id: each value is REDACTED in the http.try line, the rest kept as sent."""
    upstream.script("/keys", Reply(200, body=b"ok"))
    query = "access-key=s3cret-1&Secret-Key=s3cret-2&x_api_key=s3cret-3&session_id=s3cret-4&x=1"
    stream = io.StringIO()
    resilient_session.log_json_lines(stream)
    try:
        config = {"events": {"redact_params": ["session-id"]}}
        with resilient_session.ResilientSession(config) as session:
            response = session.get(f"{upstream.base_url}/keys?{query}")
    finally:
        structlog.reset_defaults()
    output = stream.getvalue()

    assert response.status_code == 200
    (line,) = [json.loads(text) for text in output.splitlines()]
    assert (line["event"], line["status"]) == ("http.try", 200)
    assert line["url"] == (
        f"{upstream.base_url}/keys?access-key=REDACTED&Secret-Key=REDACTED"
        "&x_api_key=REDACTED&session_id=REDACTED&x=1"
    )
    assert "s3cret" not in output
    assert [hit.target for hit in upstream.received("/keys")] == [f"/keys?{query}"]
