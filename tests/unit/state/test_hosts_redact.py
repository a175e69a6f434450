"""The per-host caches, which outlive every call, never hold a URL's userinfo."""

from __future__ import annotations

import pytest

from resilient_session._state import registry as hosts
from resilient_session._state.registry import HostRegistry
from resilient_session.config import load


def test_userinfo_never_reaches_the_key_cache_or_the_last_origin(clock):
    """A URL with user:password@ shares its host's state, and no cache keeps the password."""
    registry = HostRegistry(load({}), clock=clock)
    with_password = registry.for_url("http://user:hunter2@creds.test:8080/x?q=1")
    assert registry.for_url("http://creds.test:8080/y") is with_password
    assert registry.for_url("http://other:hunter2@creds.test:8080/") is with_password
    assert with_password.key == "http://creds.test:8080"
    cached = [origin for origin in hosts._KEY_CACHE if "hunter2" in origin or "@" in origin]
    assert cached == []
    assert registry._last is not None
    assert registry._last[0] == "http://creds.test:8080"


def test_repeat_call_to_a_plain_url_still_skips_parsing(clock, monkeypatch):
    """After one call to a host, the next to it is answered from the last origin alone."""
    registry = HostRegistry(load({}), clock=clock)
    first = registry.for_url("https://plain.test/a")

    def no_parsing(url: str) -> str:
        raise AssertionError(f"parsed {url}")

    monkeypatch.setattr(hosts, "_origin", no_parsing)
    assert registry.for_url("https://plain.test/b?page=2") is first
    with pytest.raises(AssertionError, match="parsed"):
        registry.for_url("https://u:p@plain.test/b")


def test_the_recent_host_is_kept_by_origin_and_slash_without_userinfo(clock):
    """``recent`` holds the last host looked up under its origin and the path's slash, the
    password left out, so a call to that host finds it with one ``startswith``."""
    registry = HostRegistry(load({}), clock=clock)
    assert registry.recent is None
    state = registry.for_url("http://user:hunter2@creds.test:8080/x?q=1")
    assert registry.recent == ("http://creds.test:8080/", state)
    other = registry.for_url("https://other.test/")
    assert registry.recent == ("https://other.test/", other)


def test_a_registry_with_routes_keeps_no_recent_host(clock):
    """With routes a path picks the state, so no call may find it by the origin alone."""
    registry = HostRegistry(
        load({"hosts": {"svc.test": {"routes": {"/search/*": {}}}}}), clock=clock
    )
    host = registry.for_url("http://svc.test/items")
    route = registry.for_url("http://svc.test/search/q")
    assert (registry.recent, host is route, route.route) == (None, False, "/search/*")
