"""URLs in events, and messages built from outside text, never carry credentials."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resilient_session._observe.redact import (
    SENSITIVE_PARAMS,
    _name_pattern,
    fold_name,
    redact_text,
    redact_url,
    sensitive_names,
)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://user:pw@api.test/x?a=1", "https://api.test/x?a=1"),
        ("https://api.test/x?token=abc&page=2", "https://api.test/x?token=REDACTED&page=2"),
        ("https://api.test/x?API_KEY=abc", "https://api.test/x?API_KEY=REDACTED"),
        ("https://api.test/x?q=a%20b&sig=zz", "https://api.test/x?q=a%20b&sig=REDACTED"),
        ("https://api.test/x?code=1&code=2", "https://api.test/x?code=REDACTED&code=REDACTED"),
        ("https://api.test/cb#access_token=abc", "https://api.test/cb"),
        ("https://api.test/x?flag", "https://api.test/x?flag"),
        ("https://api.test/x?client%5Fsecret=s", "https://api.test/x?client%5Fsecret=REDACTED"),
        ("http://[::1]:8080/x?password=p", "http://[::1]:8080/x?password=REDACTED"),
        ("https://a.test/x?a=1;token=t;b=2", "https://a.test/x?a=1;token=REDACTED;b=2"),
        (
            "https://a.test/x?token[]=t&token[]=u",
            "https://a.test/x?token[]=REDACTED&token[]=REDACTED",
        ),
        ("https://a.test/x?auth[token]=t&a[b]=1", "https://a.test/x?auth[token]=REDACTED&a[b]=1"),
        ("https://a.test/x?user[password]=p", "https://a.test/x?user[password]=REDACTED"),
        ("https://a.test/x?user%5BPassword%5D=p", "https://a.test/x?user%5BPassword%5D=REDACTED"),
        ("https://a.test/p;jsessionid=s?q=1", "https://a.test/p;jsessionid=REDACTED?q=1"),
        ("https://a.test/a;token=t/b;v=2", "https://a.test/a;token=REDACTED/b;v=2"),
        (
            "https://a.test/s3?X-Amz-Signature=ab&X-Amz-Date=1",
            "https://a.test/s3?X-Amz-Signature=REDACTED&X-Amz-Date=1",
        ),
        ("http://u:pw@[::1/x?token=t#f", "http://[::1/x?token=REDACTED"),
        ("https://a.test/x?q=%2F;p=a+b&key", "https://a.test/x?q=%2F;p=a+b&key=REDACTED"),
    ],
)
def test_redact_url(url, expected):
    """Userinfo and fragments are dropped and sensitive values replaced, the rest kept as sent."""
    assert redact_url(url) == expected


def test_every_listed_name_is_redacted():
    """Each name of the contract's list is hidden, whatever its case."""
    for name in SENSITIVE_PARAMS:
        assert "s3cret" not in redact_url(f"https://a.test/?{name.upper()}=s3cret")


def test_added_default_names():
    """The cloud signing, token and session names are among the defaults, stored lower-case."""
    added = {
        "x-amz-signature", "x-amz-security-token", "x-amz-credential", "x-goog-signature",
        "x-goog-credential", "access-token", "api-key", "private_token", "auth_token", "jwt",
        "session", "sessionid", "pwd", "pass", "bearer", "authorization", "client_assertion",
        "credential",
    }  # fmt: skip
    assert {fold_name(name) for name in added} <= SENSITIVE_PARAMS
    assert all(name == fold_name(name) for name in SENSITIVE_PARAMS)


def test_nothing_to_hide_is_returned_as_is():
    """A URL with nothing sensitive is the very same string: no parsing, no re-encoding."""
    url = "https://a.test/p/q?page=2&q=a-b;x=y&tokens=1&keys[]=2&user[id]=3"
    assert redact_url(url) is url


def test_extra_names_from_config():
    """Names added in config are hidden too."""
    names = sensitive_names(["Session_ID"])
    assert redact_url("https://a.test/?session_id=1&x=2", names) == (
        "https://a.test/?session_id=REDACTED&x=2"
    )


NAME_PARTS = st.sampled_from(
    [
        "token", "TOKEN", "Api_Key", "sig", "code", "id", "page", "tok", "en", " ", "\t",
        "\x1c", "K", "[", "]", "[]", "user", "X-Amz-Signature", "Jwt", "Api-Key",
        "access-key", "X_Amz_Signature", "-", "_",
    ]
)  # fmt: skip
NAMES = st.lists(NAME_PARTS, min_size=1, max_size=4).map("".join)


def _hidden(name: str) -> bool:
    """The oracle: a name is sensitive when it, or a part of it between brackets, is listed,
    '-' and '_' alike."""
    parts = [name, *re.split(r"[\[\]]", name)]
    return any(part.strip().lower().replace("-", "_") in SENSITIVE_PARAMS for part in parts)


@settings(max_examples=500)
@given(
    names=st.lists(NAMES, max_size=6),
    separators=st.lists(st.sampled_from("&;"), min_size=6, max_size=6),
)
def test_no_sensitive_value_survives_any_spelling(names, separators):
    """Whatever case, whitespace, brackets and separator a query parameter has, a sensitive
    one loses its value and every other keeps it."""
    query = "".join(
        f"{separators[index] if index else ''}{name}=v{index}x" for index, name in enumerate(names)
    )
    logged = redact_url(f"https://a.test/x?{query}")
    for index, name in enumerate(names):
        assert (f"v{index}x" in logged) is not _hidden(name), (name, logged)


@settings(max_examples=300)
@given(segments=st.lists(st.tuples(NAMES, NAMES), min_size=1, max_size=4))
def test_no_sensitive_path_parameter_survives(segments):
    """A path parameter (/seg;name=value) with a sensitive name loses its value; others keep
    theirs, and the query after the path is redacted as well."""
    path = "".join(
        f"/s{index};{a}=v{index}a;{b}=v{index}b" for index, (a, b) in enumerate(segments)
    )
    logged = redact_url(f"https://a.test{path}?Token=qsecret")
    assert "qsecret" not in logged
    for index, (a, b) in enumerate(segments):
        assert (f"v{index}a" in logged) is not _hidden(a), (a, logged)
        assert (f"v{index}b" in logged) is not _hidden(b), (b, logged)


URLLIB3_MESSAGE = (
    "HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: "
    "/p;jsessionid=js1?page=2&token=tk1#access_token=fr1 (Caused by "
    "NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f>: "
    "Failed to establish a new connection: [Errno 111] Connection refused'))"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            URLLIB3_MESSAGE,
            "HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: "
            "/p;jsessionid=REDACTED?page=2&token=REDACTED (Caused by "
            "NewConnectionError('<urllib3.connection.HTTPConnection object at 0x7f>: "
            "Failed to establish a new connection: [Errno 111] Connection refused'))",
        ),
        (
            "404 Client Error: Not Found for url: https://u:hunter2@a.test/x?sig=s1&q=1#frag",
            "404 Client Error: Not Found for url: https://a.test/x?sig=REDACTED&q=1",
        ),
        (
            "Invalid URL 'http://[::1/?token=t1': bad",
            "Invalid URL 'http://[::1/?token=REDACTED': bad",
        ),
        ("http://[::1/", "http://[::1/"),
        ("proxy http://pu:pp@127.0.0.1:1 refused", "proxy http://127.0.0.1:1 refused"),
        ("next=https://a.test/?to=http://u:pw@b.test/", "next=https://a.test/?to=http://b.test/"),
        (
            "Api-Key=k1 and password = 'p w' then jwt=\"a b\"",
            "Api-Key=REDACTED and password = REDACTED then jwt=REDACTED",
        ),
        ("got token=ab/cd+ef== from url=/cb#state=s1", "got token=REDACTED from url=/cb"),
        ("user[password]=p1&page=2", "user[password]=REDACTED&page=2"),
        ("nothing here, not even key-value", "nothing here, not even key-value"),
    ],
)
def test_redact_text(text, expected):
    """Every URL in a message, absolute or urllib3's path-and-query, and every sensitive pair
    anywhere, is shown without secrets; the rest of the text is kept."""
    assert redact_text(text) == expected


@settings(max_examples=500)
@given(text=st.text())
def test_redact_text_never_raises(text):
    """Any text at all, however malformed its URLs, comes back as a string."""
    assert isinstance(redact_text(text), str)


@settings(max_examples=500)
@given(tail=st.text(alphabet=st.sampled_from("[]:@/?#;&=%+ \ttoken")))
def test_redact_url_never_raises(tail):
    """A URL that does not parse (a bracket left open, a port that is no number) still comes
    back as a string, never an exception."""
    assert isinstance(redact_url(f"http://{tail}"), str)


SECRETS = ("hunter2", "tk-9", "sg-9", "fr-9")


@settings(max_examples=300)
@given(
    host=st.sampled_from(["a.test", "127.0.0.1:8080", "[::1]:80", "[::1", "a.test:notaport"]),
    before=st.sampled_from(["", " ", "url: ", "'", '"', "(", "<", "Invalid URL "]),
    after=st.sampled_from(["", " ", "'", '"', ")", "> (Caused by x)", ", next"]),
    relative=st.booleans(),
)
def test_no_secret_survives_in_any_message(host, before, after, relative):
    """A URL with userinfo, secret query values and a fragment, written into a message in any
    of the ways libraries quote it, loses every secret."""
    tail = "/p?page=1&token=tk-9;sig=sg-9#access_token=fr-9"
    url = tail if relative else f"http://user:hunter2@{host}{tail}"
    shown = redact_text(f"{before}{url}{after}")
    assert not [secret for secret in SECRETS if secret in shown], shown


def test_a_login_inside_a_query_value_is_dropped():
    """A redirect target carried in the query keeps its URL but not its user:password@."""
    url = "https://app.test/login?next=http://alice:s3cret@idp.test/cb&page=2"
    assert redact_url(url) == "https://app.test/login?next=http://idp.test/cb&page=2"


SHORT_NAMES = st.text(alphabet=st.sampled_from("aAb.-_["), min_size=1, max_size=4)


@settings(max_examples=500)
@given(
    names=st.frozensets(SHORT_NAMES.map(str.lower), min_size=1, max_size=8),
    query=st.text(alphabet=st.sampled_from("aAb.-_[]&;= "), max_size=20),
)
def test_the_quick_name_check_agrees_with_one_alternative_per_name(names, query):
    """The prefix-sharing pattern finds a listed name in a query exactly where a pattern with
    one alternative per name, longest first, does: shared prefixes, names that are prefixes
    of others, regex characters, and '-' and '_' alike included."""
    folded = {name.replace("-", "_") for name in names}
    plain = "|".join(
        re.escape(name).replace("_", "[-_]") for name in sorted(folded, key=len, reverse=True)
    )
    oracle = re.compile(rf"(?:^|[&;\[\]])\s*(?:{plain})\s*(?:[=&;\[\]]|$)", re.IGNORECASE)
    assert (_name_pattern(names).search(query) is None) is (oracle.search(query) is None)
