"""ResilientSession combined with the Session subclasses users already have, in either order of
the class list, against a real loopback upstream."""

from __future__ import annotations

from typing import Any

import pytest
import requests
import requests_mock
from requests_cache import CachedSession, CacheMixin
from requests_oauthlib import OAuth2Session

from resilient_session import ResilientAdapter, ResilientSession, deadline
from resilient_session.testing.upstream import FlakyUpstream, Reply

pytestmark = pytest.mark.integration

FAST = {"defaults": {"retry": {"backoff_base": 0.01, "backoff_cap": 0.05}}}
TOKEN = {"access_token": "t0k3n", "token_type": "Bearer"}


class KeywordSession(requests.Session):
    """A Session subclass written as many are: request takes requests' keywords as **kwargs."""

    def __init__(self, *, tag: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tag = tag
        self.seen: list[str] = []

    def request(  # type: ignore[override]
        self, method: str, url: str, **kwargs: Any
    ) -> requests.Response:
        self.seen.append(method)
        headers = {**(kwargs.pop("headers", None) or {}), "X-Tag": self.tag}
        return super().request(method, url, headers=headers, **kwargs)


# mypy flags each combination below ([misc]): the request signatures differ, as they do for
# users who combine these classes; the behaviour is what is tested.
class ResilientFirst(ResilientSession, KeywordSession):  # type: ignore[misc]
    """Ours first."""


class KeywordFirst(KeywordSession, ResilientSession):  # type: ignore[misc]
    """Theirs first."""


class ResilientOAuth(ResilientSession, OAuth2Session):  # type: ignore[misc]
    """Ours first: OAuth2Session's request runs inside ours."""


class OAuthResilient(OAuth2Session, ResilientSession):  # type: ignore[misc]
    """Theirs first: ResilientSession's request runs inside OAuth2Session's."""


class CachedResilient(CacheMixin, ResilientSession):  # type: ignore[misc]
    """requests-cache's mixin in front: a cached hit never reaches our adapter."""


@pytest.fixture
def flaky(upstream: FlakyUpstream) -> FlakyUpstream:
    """An upstream whose /items answers 503, 503, then 200."""
    upstream.script("/items", Reply(503), Reply(503), Reply(200, body=b"items"))
    return upstream


@pytest.fixture
def insecure_oauth(monkeypatch: pytest.MonkeyPatch) -> None:
    """oauthlib refuses http:// URLs unless told the transport is a test's loopback."""
    monkeypatch.setenv("OAUTHLIB_INSECURE_TRANSPORT", "1")


@pytest.mark.parametrize("cls", [ResilientFirst, KeywordFirst])
def test_keyword_subclass_retries_in_either_order(flaky, cls):
    """A subclass whose request takes **kwargs combines either way: 503, 503, 200 gives the
    200 after three tries, each carrying the subclass's header, and its request ran once."""
    with cls(config=FAST) as s:
        s.tag = "mine"
        response = s.get(flaky.url("/items"), params={"page": "2"}, deadline=5.0)
        assert (response.status_code, response.content) == (200, b"items")
        assert s.seen == ["GET"]
    hits = flaky.received("/items")
    assert [hit.header("X-Tag") for hit in hits] == ["mine"] * 3
    assert [hit.target for hit in hits] == ["/items?page=2"] * 3
    assert hits[0].header("X-Request-Timeout-Ms") is not None


@pytest.mark.usefixtures("insecure_oauth")
@pytest.mark.parametrize("cls", [ResilientOAuth, OAuthResilient])
def test_oauth2_session_sends_the_token_on_every_try(flaky, cls):
    """OAuth2Session in either order: 503, 503, 200 gives the 200, and each of the three tries
    the upstream received carried the bearer token."""
    with (
        cls(FAST, client_id="app", token=TOKEN)
        if cls is ResilientOAuth
        else cls(client_id="app", token=TOKEN, config=FAST) as s
    ):
        assert s.token == TOKEN
        response = s.get(flaky.url("/items"), deadline=5.0)
    assert (response.status_code, response.content) == (200, b"items")
    assert [hit.header("Authorization") for hit in flaky.received("/items")] == ["Bearer t0k3n"] * 3


def test_cache_mixin_retries_then_answers_from_its_cache(flaky):
    """CacheMixin in front: the first call retries 503, 503 to the 200 (three hits), the second
    is answered from the in-memory cache and never reaches the upstream."""
    with CachedResilient(backend="memory", config=FAST) as s:
        first = s.get(flaky.url("/items"))
        second = s.get(flaky.url("/items"))
    assert (first.status_code, first.from_cache) == (200, False)
    assert (second.status_code, second.content, second.from_cache) == (200, b"items", True)
    assert flaky.hits("/items") == 3


def test_mocker_with_real_http_lets_unregistered_calls_reach_the_network(flaky):
    """Under Mocker(real_http=True) a registered URL is mocked, retried to its 200, and an
    unregistered one reaches the real upstream, which the pipeline retries 503, 503 to 200."""
    with ResilientSession(FAST) as s, requests_mock.Mocker(real_http=True) as mocker:
        mocker.get("http://svc.test/mocked", [{"status_code": 503}, {"status_code": 200}])
        assert s.get("http://svc.test/mocked").status_code == 200
        response = s.get(flaky.url("/items"))
    assert (response.status_code, response.content) == (200, b"items")
    assert mocker.call_count == 3  # two mocked tries, then the one the mocker passed on
    assert flaky.hits("/items") == 3


@pytest.mark.usefixtures("insecure_oauth")
def test_resilient_adapter_mounted_on_an_oauth2_session(flaky):
    """The docs/integrations.md shape: a ResilientAdapter mounted on an OAuth2Session you
    already have, calls under ``with deadline()``: 200 after three tries, each with the token
    and each with the deadline's header."""
    session = OAuth2Session(client_id="app", token=TOKEN)
    adapter = ResilientAdapter(FAST)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    with session, deadline(5.0):
        response = session.get(flaky.url("/items"))
    assert response.status_code == 200
    hits = flaky.received("/items")
    assert [hit.header("Authorization") for hit in hits] == ["Bearer t0k3n"] * 3
    assert all(int(hit.header("X-Request-Timeout-Ms") or 0) > 0 for hit in hits)


def test_resilient_adapter_mounted_on_a_cached_session(flaky):
    """A CachedSession with a ResilientAdapter mounted: retried once to the 200, then cached."""
    session = CachedSession(backend="memory")
    session.mount("http://", ResilientAdapter(FAST))
    with session:
        assert session.get(flaky.url("/items")).status_code == 200
        assert session.get(flaky.url("/items")).from_cache
    assert flaky.hits("/items") == 3
