"""Redaction takes '-' and '_' in a name alike: access-key is access_key, for the built-in
names and for the ones events.redact_params adds."""

from __future__ import annotations

import pytest

from resilient_session._observe.redact import (
    SENSITIVE_PARAMS,
    is_sensitive,
    redact_text,
    redact_url,
    sensitive_names,
)

# A built-in name in the other spelling: '-' for '_' or '_' for '-', in any case.
OTHER_SPELLINGS = (
    "access-key",
    "Access-Key",
    "secret-key",
    "access-token",
    "refresh-token",
    "id-token",
    "client-secret",
    "client-assertion",
    "private-token",
    "auth-token",
    "oauth-token",
    "oauth-signature",
    "csrf-token",
    "api_key",
    "x_api_key",
    "X_Amz_Signature",
    "x_amz_security_token",
    "x-amz_credential",
    "x_goog_signature",
    "ASP.NET-SessionId",
)


@pytest.mark.parametrize("name", OTHER_SPELLINGS)
def test_the_other_spelling_of_a_built_in_name_is_hidden(name):
    """The value of a built-in name spelt with '-' for '_' (or the reverse) is hidden in a
    query, after ';', in a path parameter, in an array-style name and in free text."""
    assert redact_url(f"https://a.test/p?page=2&{name}=s3cret&x=1") == (
        f"https://a.test/p?page=2&{name}=REDACTED&x=1"
    )
    assert redact_url(f"https://a.test/p;{name}=s3cret?a=1;{name}=s3cret") == (
        f"https://a.test/p;{name}=REDACTED?a=1;{name}=REDACTED"
    )
    assert redact_url(f"https://a.test/?user[{name}]=s3cret") == (
        f"https://a.test/?user[{name}]=REDACTED"
    )
    assert "s3cret" not in redact_text(f"signing failed: {name}=s3cret (Caused by ...)")


def test_names_are_kept_in_one_spelling():
    """The built-in names are held with '_' for '-', lower-case, so each is one name whatever
    its separators: access-token and access_token are one entry."""
    assert all(name == name.lower().replace("-", "_") for name in SENSITIVE_PARAMS)
    assert {"access_key", "access_token", "x_api_key", "x_amz_signature"} <= SENSITIVE_PARAMS


@pytest.mark.parametrize(
    ("configured", "sent"),
    [
        ("session-id", "session_id"),
        ("session-id", "Session-ID"),
        ("Trace_Id", "trace-id"),
        ("my-api_token", "MY_API-TOKEN"),
    ],
)
def test_a_configured_name_is_hidden_in_either_spelling(configured, sent):
    """A name added in events.redact_params hides its value however '-' and '_' are spelt."""
    names = sensitive_names([configured])

    assert redact_url(f"https://a.test/?{sent}=s3cret&x=1", names) == (
        f"https://a.test/?{sent}=REDACTED&x=1"
    )
    assert "s3cret" not in redact_text(f"url: /p?{sent}=s3cret", names)


@pytest.mark.parametrize(
    "name", ["access-keys", "access", "key-id", "accesskey-", "access--key", "page", "x-amz-date"]
)
def test_names_that_only_look_alike_are_kept(name):
    """'-' and '_' are one character, never none: other names keep their values, and a URL
    with nothing to hide is returned as it is."""
    url = f"https://a.test/p?{name}=v1&q=a-b_c"

    assert redact_url(url) is url
    assert not is_sensitive(name)
