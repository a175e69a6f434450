"""The resilient clients' jar (``_transport/httpx_cookies.py``): the cookies it keeps are the
ones httpx's keeps, answer for answer, and it skips the jar only where the jar would find
no header to read."""

from __future__ import annotations

import http.cookiejar
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resilient_session._transport.httpx_cookies import AnswerCookies, answer_cookies
from resilient_session.httpx import AsyncResilientClient, ResilientClient

pytestmark = pytest.mark.httpx

URL = "http://svc.test/items?id=1"


def _answer(headers: list[tuple[bytes, bytes]], request: httpx.Request | None = None) -> Any:
    return httpx.Response(200, headers=headers, request=request or httpx.Request("GET", URL))


class _CountedWraps:
    """How often the jar was handed an answer: each call wraps it for http.cookiejar."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.wrapped = 0
        original = httpx.Cookies._CookieCompatResponse
        counter = self

        class Counted(original):  # type: ignore[misc,valid-type]
            def __init__(self, response: httpx.Response) -> None:
                counter.wrapped += 1
                super().__init__(response)

        monkeypatch.setattr(httpx.Cookies, "_CookieCompatResponse", Counted)


def _wraps(monkeypatch: pytest.MonkeyPatch, cookies: httpx.Cookies, answer: Any) -> int:
    counted = _CountedWraps(monkeypatch)
    cookies.extract_cookies(answer)
    monkeypatch.undo()
    return counted.wrapped


@pytest.mark.parametrize(
    ("headers", "readable"),
    [
        ([(b"Content-Type", b"application/json")], False),
        ([], False),
        ([(b"Set-Cookie", b"a=1; Path=/")], True),
        ([(b"SET-COOKIE", b"a=1")], True),
        ([(b"Set-Cookie2", b'a="1"; Version="1"')], True),
        # The Kelvin sign lowers to "k" in the email parser's comparison: left to the jar.
        ([("set-coo\u212aie".encode(), b"a=1")], True),
    ],
)
def test_the_jar_is_handed_only_an_answer_with_a_header_it_could_read(
    monkeypatch: pytest.MonkeyPatch, headers: list[tuple[bytes, bytes]], readable: bool
):
    """Handed on as httpx's own Cookies hands it on (every answer on httpx 0.28; the httpx2
    fork skips those without a Set-Cookie name itself), save one no header of could set a
    cookie."""
    theirs = _wraps(monkeypatch, httpx.Cookies(), _answer(headers))
    ours = _wraps(monkeypatch, AnswerCookies(), _answer(headers))
    assert ours == (theirs if readable else 0)
    assert theirs in (0, 1)


def test_a_jar_with_logic_of_its_own_is_handed_what_httpxs_cookies_hand_it():
    class Seeing(http.cookiejar.CookieJar):
        seen = 0

        def extract_cookies(self, response: Any, request: Any) -> None:
            Seeing.seen += 1
            super().extract_cookies(response, request)

    class Making(http.cookiejar.CookieJar):
        made = 0

        def make_cookies(self, response: Any, request: Any) -> Any:
            Making.made += 1
            return super().make_cookies(response, request)

    plain = [(b"Content-Type", b"text/plain")]
    handed = []
    for cookies_class in (httpx.Cookies, AnswerCookies):
        Seeing.seen = Making.made = 0
        cookies_class(Seeing()).extract_cookies(_answer(plain))
        cookies_class(Making()).extract_cookies(_answer(plain))
        handed.append((Seeing.seen, Making.made))
    assert handed[1] == handed[0]
    assert handed[0] in ((1, 1), (0, 0))


def _raised(cookies: httpx.Cookies, answer: Any) -> str | None:
    try:
        cookies.extract_cookies(answer)
    except RuntimeError as exc:
        return str(exc)
    return None


def test_an_answer_without_its_request_fares_as_in_httpxs():
    bare = httpx.Response(200, headers=[(b"Content-Type", b"text/plain")])
    assert _raised(AnswerCookies(), bare) == _raised(httpx.Cookies(), bare)


_NAMES = st.sampled_from(
    ["Set-Cookie", "set-cookie", "Content-Type", "X-Other", "Set-Cookie2", "Cache-Control"]
)
_VALUES = st.sampled_from(
    ["a=1", "b=2; Path=/items", "c=3; Domain=svc.test", "d=4; Max-Age=0", 'e="5"; Version="1"']
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.tuples(_NAMES, _VALUES), max_size=4), min_size=1, max_size=4))
def test_the_cookies_kept_are_httpxs_answer_for_answer(answers: list[list[tuple[str, str]]]):
    """The same answers, in turn, into httpx's Cookies and into AnswerCookies: the same
    cookies by name, value, domain and path after each."""
    plain, ours = httpx.Cookies(), AnswerCookies()
    for headers in answers:
        raw = [(name.encode(), value.encode()) for name, value in headers]
        plain.extract_cookies(_answer(raw))
        ours.extract_cookies(_answer(raw))
        kept = [sorted((c.name, c.value, c.domain, c.path) for c in j.jar) for j in (plain, ours)]
        assert kept[0] == kept[1]


def test_answer_cookies_makes_what_httpxs_setter_makes():
    """A Cookies given is copied (a cookie set after is not seen), a CookieJar kept."""
    given = httpx.Cookies({"a": "1"})
    made = answer_cookies(given)
    given.set("b", "2")
    assert (made["a"], "b" in made) == ("1", False)
    jar = http.cookiejar.CookieJar()
    assert answer_cookies(jar).jar is jar
    assert dict(answer_cookies({"c": "3"})) == {"c": "3"}


@pytest.mark.parametrize("client_class", [ResilientClient, AsyncResilientClient])
def test_both_clients_keep_the_jar_they_are_given_and_set_one_as_httpx_does(client_class: Any):
    jar = http.cookiejar.CookieJar()
    client = client_class(cookies=jar)
    assert type(client.cookies) is AnswerCookies
    assert client.cookies.jar is jar
    client.cookies = {"a": "1"}
    assert type(client.cookies) is AnswerCookies
    assert dict(client.cookies) == {"a": "1"}


def test_a_client_keeps_a_cookie_an_answer_sets_and_sends_it_after():
    """On the canned transport: the first answer sets one, the second sets none (skipped),
    and the third request carries the cookie the first set."""
    sent: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("cookie"))
        if len(sent) == 1:
            return httpx.Response(200, headers={"Set-Cookie": "session=abc; Path=/"})
        return httpx.Response(200, headers={"Content-Type": "text/plain"})

    with ResilientClient(transport=httpx.MockTransport(handler)) as client:
        for _ in range(3):
            assert client.get(URL).status_code == 200
        assert client.cookies["session"] == "abc"
    assert sent == [None, "session=abc", "session=abc"]
