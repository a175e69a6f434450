"""Messages the library writes itself name the URL without its secrets."""

from __future__ import annotations

import io

import requests

from resilient_session.body import _exceeded

URL = "https://user:hunter2@api.test/p;jsessionid=js1/x?page=2&token=tk1#access_token=fr1"


def test_body_deadline_message_names_the_url_redacted():
    """A deadline cut in the body names status and URL, with no userinfo, value or fragment."""
    response = requests.Response()
    response.status_code = 200
    response.url = URL
    response.raw = io.BytesIO(b"")
    error = _exceeded(response)
    assert str(error) == (
        "deadline ran out while reading the body of 200 from "
        "https://api.test/p;jsessionid=REDACTED/x?page=2&token=REDACTED"
    )
