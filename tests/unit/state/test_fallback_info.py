"""fallback_of reads what a served fallback left on its response; health() shows each host's
share of the registry's stale store and the fallbacks it served."""

from __future__ import annotations

import httpx
import requests

import resilient_session
from resilient_session import HostRegistry, fallback_of
from resilient_session._state.fallback import FallbackInfo, FallbackSource, mark
from resilient_session.config import load


def test_an_answer_from_the_network_has_no_fallback():
    """A response no fallback served gives None, whatever its library."""
    assert fallback_of(requests.Response()) is None
    assert fallback_of(httpx.Response(200)) is None
    assert fallback_of(object()) is None


def test_a_marked_response_gives_its_fallback_back():
    """Marked with a stale fallback of age 42 (requests) or a callable's (httpx), each gives
    its own value back."""
    stale = FallbackInfo("breaker_open", FallbackSource.STALE, 42)
    served = requests.Response()
    mark(served, stale)
    assert fallback_of(served) is stale
    assert (stale.reason, stale.source.value, stale.age) == ("breaker_open", "stale", 42)
    made = httpx.Response(202)
    mark(made, FallbackInfo("max_attempts", FallbackSource.CALLABLE))
    assert fallback_of(made) == FallbackInfo("max_attempts", FallbackSource.CALLABLE, None)


def test_something_else_under_the_attribute_is_no_fallback():
    """Only a FallbackInfo counts: another value under the name gives None."""
    response = requests.Response()
    response._resilient_session_fallback = "stale"  # type: ignore[attr-defined]
    assert fallback_of(response) is None


def test_fallback_of_is_exported():
    """resilient_session.fallback_of is in __all__."""
    assert resilient_session.fallback_of is fallback_of
    assert "fallback_of" in resilient_session.__all__


def test_health_shows_each_hosts_share_of_the_store(clock):
    """Two answers kept for one host and one served stale, a callable's fallback for
    another: each host's health counts its own."""
    config = load(
        {
            "defaults": {"fallback": {"stale": {"enabled": True, "max_bytes": 4_194_304}}},
            "hosts": {"b.test": {"fallback": {"stale": {"max_bytes": 8_388_608}}}},
        }
    )
    registry = HostRegistry(config, clock=clock)
    assert registry.stale.max_bytes == 8_388_608  # the largest the config names
    a = registry.for_url("http://a.test/x")
    b = registry.for_url("http://b.test/y")
    stale = a.policy.fallback.stale
    for path in ("/x", "/z"):
        url = "http://a.test" + path
        kept = registry.stale.keep(
            a.stale, stale, "GET", url, {}, 200, {}, b"12345", streamed=False
        )
        assert kept
    registry.stale.served(a.stale, stale=True)
    registry.stale.served(b.stale, stale=False)
    health = registry.health()
    first, second = health["http://a.test:80"], health["http://b.test:80"]
    size = 5 + len("GET") + len("http://a.test/x")
    assert (first.fallbacks, first.stale_served, first.stale_entries, first.stale_bytes) == (
        1,
        1,
        2,
        2 * size,
    )
    assert (second.fallbacks, second.stale_served, second.stale_entries) == (1, 0, 0)
    assert (first.stale_evictions, second.stale_evictions) == (0, 0)
