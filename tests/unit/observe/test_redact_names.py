"""The names added to the built-in redaction list: hidden in URLs and in http.try events."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from resilient_session._observe.redact import SENSITIVE_PARAMS, fold_name, redact_text, redact_url

# API keys and cloud keys, OAuth 1.0a (RFC 5849 §3.5.3 allows its parameters in the query),
# camelCase tokens, the session cookies of PHP and ASP.NET when put in a URL, one-time
# passwords, CAS service tickets (?ticket=ST-...) and CSRF tokens.
ADDED = (
    "x-api-key",
    "access_key",
    "secret_key",
    "oauth_token",
    "oauth_signature",
    "accessToken",
    "authToken",
    "sessionToken",
    "PHPSESSID",
    "ASP.NET_SessionId",
    "otp",
    "ticket",
    "csrf_token",
)
DOCS = Path(__file__).resolve().parents[3] / "docs" / "events.md"
SPELLINGS = [
    pytest.param(spelling, id=spelling)
    for name in ADDED
    for spelling in dict.fromkeys((name, name.lower(), name.upper()))
]


@pytest.mark.parametrize("name", ADDED)
def test_name_is_built_in_lower_case(name):
    """Each added name is in the built-in list, stored folded as matching expects."""
    assert fold_name(name) in SENSITIVE_PARAMS


@pytest.mark.parametrize("name", SPELLINGS)
def test_value_is_hidden_in_a_query(name):
    """The added name's value is hidden in a query, in any case, beside kept parameters."""
    url = f"https://u:pw@api.test/p?page=2&{name}=s3cret-v&x=1"
    assert redact_url(url) == f"https://api.test/p?page=2&{name}=REDACTED&x=1"


@pytest.mark.parametrize("name", SPELLINGS)
def test_value_is_hidden_after_a_semicolon_and_in_messages(name):
    """The added name is hidden after ';' too, and in text quoting urllib3's path-and-query."""
    assert redact_url(f"https://api.test/p?a=1;{name}=s3cret-v") == (
        f"https://api.test/p?a=1;{name}=REDACTED"
    )
    message = f"Max retries exceeded with url: /p?{name}=s3cret-v (Caused by ...)"
    assert "s3cret-v" not in redact_text(message)


@pytest.mark.parametrize("name", SPELLINGS)
def test_value_is_hidden_in_the_http_try_event(name, harness, logs):
    """An http.try event's url hides the added name's value and keeps the other parameters."""
    outcome, transport = harness().run(200, url=f"http://svc.test/items?{name}=s3cret-v&x=1")
    assert (outcome.status, transport.calls) == (200, 1)
    [event] = [event for event in logs if event["event"] == "http.try"]
    assert event["url"] == f"http://svc.test/items?{name}=REDACTED&x=1"


def test_the_documented_list_is_the_built_in_list():
    """docs/events.md ("Redaction") lists exactly the built-in names, the added ones included,
    each once: access-token and access_token are one name."""
    text = DOCS.read_text(encoding="utf-8")
    listing = text[text.index("The built-in names:") : text.index("; neither")]
    documented = [fold_name(name) for name in re.findall(r"`([^`]+)`", listing)]
    assert sorted(documented) == sorted(SENSITIVE_PARAMS)
    assert len(SENSITIVE_PARAMS) == 45
