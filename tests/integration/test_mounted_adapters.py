"""An adapter a user mounts on a ResilientSession (requests' usual way to size a pool, or a
subclass of its own) is the transport of the session's guards: every try goes through it, and
the session's retries, deadline, breaker and health cover it."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
import requests
from requests.adapters import BaseAdapter, HTTPAdapter

from resilient_session import DeadlineExceeded, ResilientAdapter, ResilientSession, ResponseTooLarge
from resilient_session._transport.fork import renew_pools
from resilient_session._transport.watched import watches
from resilient_session.testing.upstream import FlakyUpstream, Hang, Reply, Trickle

pytestmark = pytest.mark.integration

FAST = {"backoff_base": 0.01, "backoff_cap": 0.05}


def _session(**sections: dict[str, Any]) -> ResilientSession:
    defaults: dict[str, Any] = {"retry": {**FAST, "max_attempts": 3}}
    for name, values in sections.items():
        defaults[name] = {**defaults.get(name, {}), **values}
    return ResilientSession({"defaults": defaults})


class CountingAdapter(HTTPAdapter):
    """An HTTPAdapter subclass whose own ``send`` counts what goes through it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sent: list[str] = []

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]  # requests' keywords, passed on as they come
        self.sent.append(request.headers.get("X-Request-Attempt", ""))
        return super().send(request, **kwargs)


def test_a_mounted_pool_sized_adapter_retries_a_503_on_its_own_pool(upstream):
    """``mount("http://", HTTPAdapter(pool_maxsize=50))``: a 503 is tried max_attempts times,
    every try on the mounted adapter's pool of 50, and health() shows the host."""
    upstream.script("/busy", Reply(503))
    adapter = HTTPAdapter(pool_maxsize=50)
    with _session() as session:
        session.mount("http://", adapter)
        response = session.get(upstream.url("/busy"))
        health = session.health()
        # urllib3's store of pools, read to see which pool served (closing the session empties it)
        pools = list(adapter.poolmanager.pools._container.values())

    assert (response.status_code, upstream.hits("/busy")) == (503, 3)
    key = f"http://127.0.0.1:{upstream.port}"
    assert (health[key].tries, health[key].failures) == (3, 3)
    assert [(pool.port, pool.pool.maxsize) for pool in pools] == [(upstream.port, 50)]
    assert upstream.connections == 1  # one pooled connection carried the three tries


def test_mount_keeps_what_requests_shows(upstream):
    """session.adapters and get_adapter return the adapter mounted, in requests' prefix order."""
    adapter = HTTPAdapter(pool_maxsize=50)
    longer = HTTPAdapter()
    with _session() as session:
        session.mount("http://", adapter)
        session.mount(upstream.url("/v1/"), longer)
        assert session.adapters["http://"] is adapter
        assert session.get_adapter(upstream.url("/items")) is adapter
        assert session.get_adapter(upstream.url("/v1/items")) is longer
        assert list(session.adapters) == [upstream.url("/v1/"), "https://", "http://"]


def test_a_deadline_holds_through_a_mounted_adapter(upstream):
    """``deadline=0.5`` against a hanging upstream ends in DeadlineExceeded about 0.5 s in."""
    upstream.script("/hang", Hang(5))
    with _session() as session:
        session.mount("http://", HTTPAdapter(pool_maxsize=50))
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            session.get(upstream.url("/hang"), deadline=0.5)
        elapsed = time.monotonic() - started
    assert 0.45 <= elapsed < 1.1


def test_the_watchdog_covers_a_mounted_adapters_pool(upstream):
    """A head trickled a byte every 0.1 s restarts every read timeout; the watch on the
    mounted adapter's connections still ends the call at its 0.6 s deadline."""
    upstream.script("/trickle", Trickle(0.1, body=b"late"))
    with _session(retry={"max_attempts": 1}) as session:
        session.mount("http://", HTTPAdapter(pool_maxsize=50))
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            session.get(upstream.url("/trickle"), deadline=0.6)
        elapsed = time.monotonic() - started
    assert 0.55 <= elapsed < 1.2


def test_a_subclass_send_sees_every_try(upstream):
    """A subclass that counts in its own ``send`` counts each of the three tries of a 503,
    each carrying its X-Request-Attempt."""
    upstream.script("/busy", Reply(503), Reply(503), Reply(200, body=b"ok"))
    adapter = CountingAdapter(pool_maxsize=4)
    with _session() as session:
        session.mount("http://", adapter)
        response = session.get(upstream.url("/busy"))
    assert (response.status_code, response.text) == (200, "ok")
    assert adapter.sent == ["1; max=3", "2; max=3", "3; max=3"]
    assert upstream.hits("/busy") == 3


def test_one_adapter_on_both_prefixes_is_guarded_once(upstream):
    """The usual ``mount("http://", a); mount("https://", a)``: each try goes through *a* once."""
    upstream.script("/busy", Reply(503))
    adapter = CountingAdapter()
    with _session() as session:
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.get(upstream.url("/busy"))
    assert (len(adapter.sent), upstream.hits("/busy")) == (3, 3)


def test_a_mounted_adapter_holds_the_response_cap(upstream):
    """A host capped at 16 bytes: a 64-byte body through the mounted adapter raises
    ResponseTooLarge."""
    upstream.script("/big", Reply(200, body=b"x" * 64))
    with _session(retry={"max_response_bytes": 16}) as session:
        session.mount("http://", HTTPAdapter(pool_maxsize=50))
        with pytest.raises(ResponseTooLarge):
            session.get(upstream.url("/big"))
    assert upstream.hits("/big") == 1


def test_the_breaker_opens_on_a_mounted_adapter(upstream):
    """Two failing tries open a breaker of threshold 2; the next call is refused unsent."""
    upstream.script("/down", Reply(503))
    with _session(retry={"max_attempts": 2}, breaker={"failure_threshold": 2}) as session:
        session.mount("http://", HTTPAdapter(pool_maxsize=50))
        assert session.get(upstream.url("/down")).status_code == 503
        with pytest.raises(requests.ConnectionError):
            session.get(upstream.url("/down"))
    assert upstream.hits("/down") == 2


def test_a_resilient_adapter_mounted_is_left_as_it_is(upstream):
    """A ResilientAdapter of its own config keeps it: one try, as its config says."""
    upstream.script("/busy", Reply(503))
    adapter = ResilientAdapter({"defaults": {"retry": {"max_attempts": 1}}})
    with _session() as session:
        session.mount("http://", adapter)
        assert session.get(upstream.url("/busy")).status_code == 503
        assert "send" not in vars(adapter)
    adapter.close()
    assert upstream.hits("/busy") == 1


def test_an_adapter_that_is_no_http_adapter_is_left_alone():
    """A BaseAdapter of another scheme (file://, a test double) answers as it is: one send."""

    class Canned(BaseAdapter):
        sends = 0

        def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:  # type: ignore[override]  # a double
            Canned.sends += 1
            response = requests.Response()
            response.status_code, response.request = 503, request
            return response

        def close(self) -> None:
            pass

    with _session() as session:
        session.mount("canned://", Canned())
        assert session.get("canned://svc/items").status_code == 503
    assert Canned.sends == 1


def test_a_deep_copy_guards_its_own_copy_of_the_mounted_adapter(upstream):
    """``copy.deepcopy`` of a session with a mounted adapter: the copy retries on fresh state."""
    upstream.script("/busy", Reply(503))
    with _session() as session:
        session.mount("http://", HTTPAdapter(pool_maxsize=50))
        clone = copy.deepcopy(session)
        with clone:
            assert clone.get(upstream.url("/busy")).status_code == 503
            assert list(clone.health()) == [f"http://127.0.0.1:{upstream.port}"]
        assert session.health() == {}
    assert upstream.hits("/busy") == 3


def test_a_plain_requests_session_sharing_nothing_is_untouched():
    """Mounting on a ResilientSession changes nothing for a requests.Session's own adapters."""
    with FlakyUpstream() as up, requests.Session() as plain:
        up.script("/busy", Reply(503))
        assert plain.get(up.url("/busy")).status_code == 503
        assert "send" not in vars(plain.get_adapter(up.url("/busy")))
    assert up.hits("/busy") == 1


def test_a_guarded_adapters_pools_stay_watched_after_a_fork_and_behind_a_proxy():
    """The pools a forked child builds anew for a mounted adapter, and those it builds for a
    proxy, are watched as the ones it was mounted with."""
    adapter = HTTPAdapter(pool_maxsize=50)
    with _session() as session:
        session.mount("http://", adapter)
        renew_pools(adapter)  # what the child's fork hook runs
        proxied = adapter.proxy_manager_for("http://127.0.0.1:9")
        assert (watches(adapter.poolmanager), watches(proxied)) == (True, True)
        assert adapter.poolmanager.connection_pool_kw["maxsize"] == 50


def test_a_get_adapter_set_by_a_library_hands_out_a_guarded_adapter_as_it_is(upstream):
    """A library that sets ``session.get_adapter`` (as requests-mock does) and hands out the
    mounted adapter: its tries run through one pipeline, not one inside another (3, not 9)."""
    upstream.script("/busy", Reply(503))
    adapter = CountingAdapter()
    with _session() as session:
        session.mount("http://", adapter)
        session.get_adapter = lambda url: adapter  # type: ignore[method-assign]  # as a mocker does
        session.get(upstream.url("/busy"))
    assert (len(adapter.sent), upstream.hits("/busy")) == (3, 3)
