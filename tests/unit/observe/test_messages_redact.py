"""Messages the library writes itself name the URL without its secrets."""

from __future__ import annotations

import io

import requests

from resilient_session._observe.redact import SENSITIVE_PARAMS, sensitive_names
from resilient_session._transport.body import body_cut

URL = "https://user:hunter2@api.test/p;jsessionid=js1/x?page=2&token=tk1#access_token=fr1"


def test_body_deadline_message_names_the_url_redacted():
    """A deadline cut in the body names status and URL, with no userinfo, value or fragment."""
    response = requests.Response()
    response.status_code = 200
    response.url = URL
    response.raw = io.BytesIO(b"")
    error = body_cut(response, SENSITIVE_PARAMS)
    assert str(error) == (
        "deadline ran out while reading the body of 200 from "
        "https://api.test/p;jsessionid=REDACTED/x?page=2&token=REDACTED"
    )


def test_body_deadline_message_hides_the_configured_names_too():
    """Names added under events.redact_params are hidden in the library's messages as well."""
    response = requests.Response()
    response.status_code = 503
    response.url = "https://api.test/d?mytoken=SECRET&page=2"
    response.raw = io.BytesIO(b"")
    error = body_cut(response, sensitive_names(["mytoken"]))
    assert "SECRET" not in str(error)
    assert str(error).endswith("https://api.test/d?mytoken=REDACTED&page=2")
