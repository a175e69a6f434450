"""The stale store: what it keeps and never keeps, how it keys an answer (method, URL, Vary,
credentials), how long an answer may be served, and its byte bound, under threads too."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import requests

from resilient_session._state import stale as stale_module
from resilient_session._state.stale import StaleScope, StaleStore
from resilient_session.config import StalePolicy
from resilient_session.testing import FakeClock
from tests.threads import run_together

URL = "http://svc.test/items?page=2"
ON = StalePolicy(enabled=True)


@pytest.fixture
def store(clock: FakeClock) -> StaleStore:
    return StaleStore(ON.max_bytes, clock)


def _keep(
    store: StaleStore,
    *,
    scope: StaleScope | None = None,
    policy: StalePolicy = ON,
    method: str = "GET",
    url: str = URL,
    request: dict[str, Any] | None = None,
    status: int = 200,
    headers: dict[str, str] | None = None,
    body: bytes = b"fresh",
    streamed: bool = False,
) -> bool:
    return store.keep(
        scope if scope is not None else StaleScope(),
        policy,
        method,
        url,
        request or {},
        status,
        headers if headers is not None else {"Content-Type": "text/plain"},
        body,
        streamed=streamed,
    )


def _found(
    store: StaleStore,
    *,
    policy: StalePolicy = ON,
    method: str = "GET",
    url: str = URL,
    request: dict[str, Any] | None = None,
) -> bytes | None:
    hit = store.find(policy, method, url, request or {})
    return None if hit is None else hit.answer.body


@pytest.mark.parametrize(
    ("status", "kept"),
    [
        (200, True),
        (203, True),
        (300, True),
        (301, True),
        (404, True),
        (410, True),
        (201, False),
        (204, False),
        (206, False),
        (302, False),
        (304, False),
        (400, False),
        (401, False),
        (403, False),
        (429, False),
        (500, False),
        (503, False),
    ],
)
def test_only_the_listed_statuses_are_kept(store, status, kept):
    """200, 203, 300, 301, 404 and 410 are kept and found; every other status is not."""
    assert _keep(store, status=status) is kept
    assert _found(store) == (b"fresh" if kept else None)


@pytest.mark.parametrize(
    ("method", "kept"),
    [
        ("GET", True),
        ("get", True),
        ("HEAD", True),
        ("POST", False),
        ("PUT", False),
        ("PATCH", False),
        ("DELETE", False),
        ("OPTIONS", False),
    ],
)
def test_only_get_and_head_are_kept(store, method, kept):
    """GET and HEAD (any case) are kept; every other method is neither kept nor looked up."""
    assert _keep(store, method=method) is kept
    assert _found(store, method=method) == (b"fresh" if kept else None)


def test_get_and_head_are_kept_apart(store):
    """A HEAD's answer is not a GET's, nor the other way round."""
    assert _keep(store, method="HEAD", body=b"")
    assert (_found(store, method="GET"), _found(store, method="HEAD")) == (None, b"")


@pytest.mark.parametrize(
    "cache_control", ["no-store", "No-Store", "max-age=60, no-store", 'private, no-store="x"']
)
def test_an_answer_marked_no_store_is_never_kept(store, cache_control):
    """Cache-Control: no-store, however spelt among other directives, is not kept."""
    assert not _keep(store, headers={"Cache-Control": cache_control})
    assert store.figures().entries == 0


def test_a_request_marked_no_store_is_not_kept(store):
    """A request's own Cache-Control: no-store keeps its answer out too."""
    assert not _keep(store, request={"Cache-Control": "no-store"})
    assert _keep(store, request={"Cache-Control": "no-cache"})


def test_a_streamed_body_is_never_kept(store):
    """The caller says the body was streamed: not kept."""
    assert not _keep(store, streamed=True)
    assert _found(store) is None


def test_a_body_over_max_entry_bytes_is_not_kept(store):
    """A body one byte past max_entry_bytes is refused; one at the bound is kept."""
    policy = StalePolicy(enabled=True, max_entry_bytes=100)
    assert not _keep(store, policy=policy, body=b"x" * 101)
    assert _keep(store, policy=policy, body=b"x" * 100)
    assert store.figures().entries == 1


def test_set_cookie_and_hop_by_hop_headers_are_never_kept(store):
    """Set-Cookie (any case) and the connection's own fields are dropped; the rest stay."""
    headers = {
        "Content-Type": "application/json",
        "set-cookie": "session=abc",
        "Connection": "keep-alive",
        "Transfer-Encoding": "chunked",
        "ETag": '"v1"',
    }
    assert _keep(store, headers=headers)
    hit = store.find(ON, "GET", URL, {})
    assert hit is not None
    assert hit.answer.headers == (("Content-Type", "application/json"), ("ETag", '"v1"'))


def test_the_served_headers_carry_age(store, clock):
    """The served copy's Age is its whole seconds in the store, added to the Age it came
    with, in place of that one."""
    assert _keep(store, headers={"Age": "5", "Content-Type": "text/plain"})
    clock.advance(7.9)
    hit = store.find(ON, "GET", URL, {})
    assert hit is not None
    assert hit.age == 12
    assert hit.served_headers() == (("Content-Type", "text/plain"), ("Age", "12"))


def test_an_answer_is_served_within_max_stale_only(store, clock):
    """At max_stale exactly it is served; a moment past, not."""
    policy = StalePolicy(enabled=True, max_stale=60)
    assert _keep(store, policy=policy)
    clock.advance(60.0)
    assert _found(store, policy=policy) == b"fresh"
    clock.advance(0.001)
    assert _found(store, policy=policy) is None


def test_stale_if_error_lets_an_answer_be_served_longer(store, clock):
    """The answer's own stale-if-error=600 serves it past max_stale 60, up to 600 s."""
    policy = StalePolicy(enabled=True, max_stale=60)
    headers = {"Cache-Control": "max-age=10, stale-if-error=600"}
    assert _keep(store, policy=policy, headers=headers)
    clock.advance(600.0)
    hit = store.find(policy, "GET", URL, {})
    assert (hit is not None, hit.age if hit else None) == (True, 600)
    clock.advance(1.0)
    assert store.find(policy, "GET", URL, {}) is None


@pytest.mark.parametrize("value", ["stale-if-error=abc", "stale-if-error=-5", "stale-if-error"])
def test_an_unreadable_stale_if_error_is_ignored(store, clock, value):
    """A stale-if-error that is no delta-seconds leaves max_stale alone in charge."""
    policy = StalePolicy(enabled=True, max_stale=60)
    assert _keep(store, policy=policy, headers={"Cache-Control": value})
    clock.advance(61.0)
    assert _found(store, policy=policy) is None


def test_the_url_is_part_of_the_key(store):
    """Another query string is another request."""
    assert _keep(store, url="http://svc.test/items?page=1", body=b"one")
    assert _keep(store, url="http://svc.test/items?page=2", body=b"two")
    assert (_found(store, url="http://svc.test/items?page=1"), _found(store)) == (b"one", b"two")
    assert _found(store, url="http://svc.test/items?page=3") is None


@pytest.mark.parametrize("name", ["Authorization", "Cookie", "Proxy-Authorization"])
def test_another_users_credentials_miss(store, name):
    """An answer kept for one user's credentials is not found with another's, nor with none;
    it is found with the same, whatever the header name's case."""
    assert _keep(store, request={name: "alice-secret"}, body=b"alice")
    assert _found(store, request={name: "bob-secret"}) is None
    assert _found(store) is None
    assert _found(store, request={name.lower(): "alice-secret"}) == b"alice"


def test_no_credential_is_held_in_the_store(store):
    """The store holds a 16-byte digest of the credentials, never their value."""
    credential = "Bearer s3cr3t-t0ken-value"
    assert _keep(store, request={"Authorization": credential, "Vary": "x"})
    assert _keep(store, request={"Cookie": credential}, headers={"Vary": "Cookie"})
    keys = list(store._entries)
    answers = [entry.answer for entry in store._entries.values()]
    held = repr(keys) + repr(list(store._vary)) + repr(answers)
    assert "s3cr3t" not in held
    assert [(len(primary[2]), len(variant)) for primary, variant in keys] == [(16, 16)] * 2


def test_a_requests_case_insensitive_dict_is_read(store):
    """requests' headers (bytes values included) key the answer as a plain dict does."""
    headers = requests.structures.CaseInsensitiveDict({"authorization": b"Basic YWxpY2U6eA=="})
    assert _keep(store, request=headers)  # type: ignore[arg-type]
    assert _found(store, request={"Authorization": b"Basic YWxpY2U6eA=="}) == b"fresh"


def test_vary_keys_on_the_named_request_headers(store):
    """Vary: Accept-Language keeps one answer per language; other headers do not matter."""
    vary = {"Vary": "Accept-Language"}
    assert _keep(store, request={"Accept-Language": "en"}, headers=vary, body=b"hello")
    assert _keep(store, request={"Accept-Language": "fr"}, headers=vary, body=b"bonjour")
    assert _found(store, request={"accept-language": "fr", "X-Other": "1"}) == b"bonjour"
    assert _found(store, request={"Accept-Language": "en"}) == b"hello"
    assert _found(store, request={"Accept-Language": "de"}) is None
    assert _found(store) is None
    assert store.figures().entries == 2


def test_a_request_without_a_varied_header_matches_only_its_like(store):
    """An answer kept for a request without the varied header is found only without it."""
    assert _keep(store, headers={"Vary": "accept-encoding, Accept"}, body=b"plain")
    assert _found(store) == b"plain"
    assert _found(store, request={"Accept": "text/html"}) is None


@pytest.mark.parametrize("vary", ["*", "Accept, *", " * "])
def test_vary_star_is_never_kept(store, vary):
    """Vary: * (alone or among names) matches no later request: never kept."""
    assert not _keep(store, headers={"Vary": vary})
    assert store.figures().entries == 0


def test_a_new_vary_drops_the_older_variants(store):
    """When the server varies on other headers, the answers kept under the old ones go."""
    assert _keep(store, request={"Accept": "a"}, headers={"Vary": "Accept"}, body=b"a")
    assert _keep(store, request={"Accept": "b"}, headers={"Vary": "Accept"}, body=b"b")
    assert _keep(store, request={"Accept": "a"}, headers={"Vary": "Accept-Language"}, body=b"c")
    assert store.figures().entries == 1
    assert _found(store, request={"Accept": "b"}) == b"c"


def test_keeping_again_replaces_the_answer(store, clock):
    """A newer answer to the same request replaces the older and is as old as itself."""
    scope = StaleScope()
    assert _keep(store, scope=scope, body=b"old")
    clock.advance(100.0)
    assert _keep(store, scope=scope, body=b"newer")
    hit = store.find(ON, "GET", URL, {})
    assert hit is not None
    assert (hit.answer.body, hit.age) == (b"newer", 0)
    figures = store.figures(scope)
    assert (figures.entries, figures.bytes) == (1, hit.answer.size)


def _size(url: str, body: bytes) -> int:
    return len(body) + len("Content-Type") + len("text/plain") + len("GET") + len(url)


def test_the_store_bound_evicts_the_least_recently_used(clock):
    """Past max_bytes the least recently used answer goes (a lookup counts as a use); the
    store never holds more than its bound."""
    url = "http://svc.test/{}"
    size = _size(url.format(0), b"x" * 100)
    store = StaleStore(3 * size, clock)
    policy = StalePolicy(enabled=True, max_bytes=2**20)
    scope = StaleScope()
    for index in range(3):
        assert _keep(store, scope=scope, policy=policy, url=url.format(index), body=b"x" * 100)
    assert store.figures().bytes == 3 * size
    assert _found(store, policy=policy, url=url.format(0)) is not None  # 0 is used again
    assert _keep(store, scope=scope, policy=policy, url=url.format(3), body=b"x" * 100)
    kept = [_found(store, policy=policy, url=url.format(i)) is not None for i in range(4)]
    assert kept == [True, False, True, True]
    figures = store.figures()
    assert (figures.entries, figures.bytes, figures.evictions) == (3, 3 * size, 1)
    assert store.figures(scope).evictions == 1


def test_a_hosts_max_bytes_bounds_its_own_share(clock):
    """A host whose max_bytes holds two answers evicts its own oldest, not another host's."""
    url = "http://a.test/{}"
    size = _size(url.format(0), b"y" * 50)
    store = StaleStore(2**20, clock)
    small = StalePolicy(enabled=True, max_bytes=2 * size, max_entry_bytes=64)
    a, b = StaleScope(), StaleScope()
    assert _keep(store, scope=b, url="http://b.test/0", body=b"y" * 50)
    for index in range(3):
        assert _keep(store, scope=a, policy=small, url=url.format(index), body=b"y" * 50)
    assert (store.figures(a).entries, store.figures(a).bytes) == (2, 2 * size)
    assert (store.figures(a).evictions, store.figures(b).evictions) == (1, 0)
    assert _found(store, url="http://b.test/0") == b"y" * 50
    assert _found(store, url=url.format(0)) is None


def test_an_answer_larger_than_the_store_is_not_kept(clock):
    """An answer whose size passes the store's bound is refused, evicting nothing."""
    store = StaleStore(500, clock)
    assert _keep(store, body=b"z" * 100)
    assert not _keep(store, url="http://svc.test/big", body=b"z" * 480)
    assert (store.figures().entries, store.figures().evictions) == (1, 0)


def test_served_counts_fallbacks_by_source(store):
    """Each fallback served counts for its host; a stale one also in served."""
    scope = StaleScope()
    store.served(scope, stale=True)
    store.served(scope, stale=False)
    store.served(scope, stale=True)
    figures = store.figures(scope)
    assert (figures.fallbacks, figures.served) == (3, 2)


def test_sixteen_threads_keep_and_find_within_the_bound(clock):
    """16 threads x 1,000 keeps and lookups over 64 URLs: the byte bound holds after every
    keep, and the figures add up to the entries left."""
    body = b"b" * 200
    size = _size("http://svc.test/00", body)
    bound = 20 * size
    store = StaleStore(bound, clock)
    policy = StalePolicy(enabled=True, max_bytes=bound, max_entry_bytes=1024)
    scopes = [StaleScope(), StaleScope()]
    over: list[int] = []

    def body_of(index: int) -> None:
        scope = scopes[index % 2]
        for step in range(1_000):
            url = f"http://svc.test/{(index * 7 + step) % 64:02d}"
            if step % 2:
                store.find(policy, "GET", url, {})
            else:
                assert store.keep(
                    scope,
                    policy,
                    "GET",
                    url,
                    {},
                    200,
                    {"Content-Type": "text/plain"},
                    body,
                    streamed=False,
                )
            if store.figures().bytes > bound:
                over.append(store.figures().bytes)

    run_together(16, body_of)
    total = store.figures()
    assert over == []
    assert total.entries == 20
    assert total.bytes == 20 * size
    shares = [store.figures(scope) for scope in scopes]
    assert sum(share.entries for share in shares) == 20
    assert sum(share.bytes for share in shares) == total.bytes
    assert sum(share.evictions for share in shares) == total.evictions
    # 64 URLs kept, 20 fit: at least 44 went, each counted once, for one scope or the other.
    assert total.evictions >= 44


def test_the_module_names_no_http_library():
    """_state/stale.py imports neither requests, urllib3 nor httpx."""
    tree = ast.parse(Path(stale_module.__file__).read_text(encoding="utf-8"))
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    } | {
        (node.module or "").split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    }
    assert imported & {"requests", "urllib3", "httpx"} == set()
