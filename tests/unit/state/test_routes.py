"""Routes in the registry: a route's own state beside its host's, what the pipeline, the
events, the hooks and health() say of it, and state made for a route by many threads at once."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator

import pytest
import requests
import responses

from resilient_session import CircuitOpenError, ThrottledError
from resilient_session._observe.hooks import TryRecord
from resilient_session._state import registry as registry_module
from resilient_session._state.registry import HostRegistry
from resilient_session._transport.cap import caps_any
from resilient_session.adapter import ResilientAdapter
from resilient_session.config import load
from tests.threads import run_together

HOST = "http://svc.test:80"
ROUTED = {
    "hosts": {
        "svc.test": {
            "breaker": {"failure_threshold": 2},
            "routes": {
                "/bad/*": {"retry": {"max_attempts": 1}},
                "/bad/slow/*": {"timeout": {"read": 7.0}},
                "/search/*": {"hedging": {"enabled": True}},
            },
        }
    }
}


def test_a_route_has_state_of_its_own_and_a_path_in_none_shares_the_hosts(clock):
    """Each route's paths share one state, apart from the host's and from the other routes';
    a path in no route gets the host's state."""
    registry = HostRegistry(load(ROUTED), clock=clock)
    host = registry.for_url("http://svc.test/good")
    bad = registry.for_url("http://svc.test/bad/1")
    slow = registry.for_url("http://svc.test/bad/slow/2?x=/bad/3")
    assert registry.for_url("http://svc.test/other?q=/bad/1") is host
    assert registry.for_url("http://svc.test/bad") is bad
    assert registry.for_url("http://svc.test:80/bad/9") is bad
    assert registry.for_url("http://svc.test/bad/slow/3") is slow
    assert len({id(host.breaker), id(bad.breaker), id(slow.breaker)}) == 3
    assert [(s.key, s.host, s.route) for s in (host, bad, slow)] == [
        (HOST, HOST, None),
        (HOST + "/bad/*", HOST, "/bad/*"),
        (HOST + "/bad/slow/*", HOST, "/bad/slow/*"),
    ]
    assert (bad.breaker.host, bad.breaker.route) == (HOST, "/bad/*")
    # Each runs under its route's policy: the host's keys, the route's over them.
    assert (bad.policy.retry.max_attempts, bad.policy.breaker.failure_threshold) == (1, 2)
    assert (slow.default_timeout, slow.policy.retry.max_attempts) == ((5.0, 7.0), 4)
    assert len(registry) == 1  # hosts; a host's routes are kept, and forgotten, with it


def test_only_a_route_that_hedges_keeps_hedging_figures(clock):
    """Hedging on one route builds the racing chain and that route's hedge state only."""
    registry = HostRegistry(load(ROUTED), clock=clock)
    assert registry.runtime.hedging
    assert registry.for_url("http://svc.test/search/a").hedge is not None
    assert registry.for_url("http://svc.test/").hedge is None
    assert caps_any(
        load({"hosts": {"a": {"routes": {"/x": {"retry": {"max_response_bytes": 9}}}}}})
    )


def test_without_routes_no_call_looks_at_its_path(clock, monkeypatch):
    """With no routes configured the registry's lookup is the class's own, as before routes;
    with routes on another host, a call to a host without any still never reads its path."""

    def no_path(url: str) -> str:
        raise AssertionError(f"the path of {url} was read")

    monkeypatch.setattr(registry_module, "path_of", no_path)
    plain = HostRegistry(load({"hosts": {"svc.test": {"retry": {"max_attempts": 2}}}}), clock=clock)
    assert "for_url" not in vars(plain)
    state = plain.for_url("http://svc.test/bad/1")
    assert plain.for_url("http://svc.test/bad/2") is state
    routed = HostRegistry(load(ROUTED), clock=clock)
    other = routed.for_url("http://other.test/bad/1")
    assert routed.for_url("http://other.test/bad/2") is other
    assert other.routes is None
    with pytest.raises(AssertionError, match="was read"):
        routed.for_url("http://svc.test/bad/1")


def test_a_routes_breaker_opens_alone(harness, logs):
    """Two 500s on /bad/* open that route's breaker: its next call fails fast, while /good on
    the same host still goes out and its breaker stays closed; the events say which is which."""
    h = harness(ROUTED)
    for _ in range(2):
        outcome, _ = h.run(500, url="http://svc.test/bad/1")
        assert outcome.status == 500
    refused, transport = h.run(200, url="http://svc.test/bad/2")
    assert (type(refused.error), transport.calls) == (CircuitOpenError, 0)
    assert "circuit breaker for http://svc.test:80 (route /bad/*) is open" in str(refused.error)
    fine, _ = h.run(200, url="http://svc.test/good")
    assert fine.status == 200
    health = h.registry.health()
    assert {
        key: (value.route, value.breaker.value, value.calls) for key, value in health.items()
    } == {
        HOST: (None, "closed", 1),
        HOST + "/bad/*": ("/bad/*", "open", 3),
    }
    assert health[HOST + "/bad/*"].as_dict()["route"] == "/bad/*"
    tries = [
        (e["url"], e["host"], e["route"], e["decision"]) for e in logs if e["event"] == "http.try"
    ]
    assert tries == [
        ("http://svc.test/bad/1", HOST, "/bad/*", "give_up"),
        ("http://svc.test/bad/1", HOST, "/bad/*", "give_up"),
        ("http://svc.test/bad/2", HOST, "/bad/*", "fail_fast"),
        ("http://svc.test/good", HOST, None, "success"),
    ]
    moves = [(e["host"], e["route"], e["to"]) for e in logs if e["event"] == "breaker.transition"]
    assert moves == [(HOST, "/bad/*", "open")]


def test_a_throttled_route_leaves_its_host_alone(harness):
    """A route failing every try is throttled on its own window; the host's stays empty."""
    h = harness(
        {
            "defaults": {"retry": {"max_attempts": 1}},
            "hosts": {
                "svc.test": {
                    "breaker": {"failure_threshold": 1000},
                    "throttle": {"min_tries": 5},
                    "routes": {"/bad/*": {}},
                }
            },
        }
    )
    errors = [type(h.run(503, url="http://svc.test/bad/x")[0].error) for _ in range(40)]
    assert ThrottledError in errors
    good = [h.run(200, url="http://svc.test/good")[0].status for _ in range(40)]
    assert good == [200] * 40
    health = h.registry.health()
    assert (health[HOST].throttled, health[HOST].throttle_probability) == (0, 0.0)
    assert health[HOST + "/bad/*"].throttled == errors.count(ThrottledError) > 0


def test_each_hook_is_told_the_route_of_a_try(clock):
    """A try hook's record carries the route its try ran under, and None outside any."""
    records: list[TryRecord] = []

    class Spy:
        def on_try(self, record: TryRecord, /) -> None:
            records.append(record)

    registry = HostRegistry(load(ROUTED), clock=clock, try_hooks=[Spy()])
    session = requests.Session()
    session.mount("http://", ResilientAdapter(registry=registry))
    with responses.RequestsMock() as mock:
        mock.add(responses.GET, "http://svc.test/bad/1", status=200)
        mock.add(responses.GET, "http://svc.test/ok", status=200)
        session.get("http://svc.test/bad/1")
        session.get("http://svc.test/ok")
    assert [(r.host, r.route) for r in records] == [(HOST, "/bad/*"), (HOST, None)]
    assert records[0].event_fields()["route"] == "/bad/*"


@pytest.fixture
def _switch_often() -> Iterator[None]:
    """Threads handed the GIL every microsecond: interleavings a default 5 ms would hide."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


@pytest.mark.usefixtures("_switch_often")
def test_route_state_made_by_many_threads_at_once_is_one_state(clock, monkeypatch):
    """32 threads, each calling every route and the host's other paths 200 times on a fresh
    registry: each route gets one state, handed to the backend once, and every deposit made
    through it is counted there."""
    registry = HostRegistry(load(ROUTED), clock=clock)
    added: list[str] = []
    lock = threading.Lock()

    def spy(held: tuple[str, object, object, object]) -> None:
        with lock:
            added.append(held[0])

    monkeypatch.setattr(registry.backend, "added", spy)
    seen: dict[str, set[int]] = {}
    urls = ["/bad/1", "/bad/slow/2", "/search/3", "/other", "/bad/4"]

    def work(index: int) -> None:
        mine: dict[str, set[int]] = {}
        for number in range(200):
            url = "http://svc.test" + urls[(index + number) % len(urls)]
            state = registry.for_url(url)
            state.bucket.deposit()
            mine.setdefault(state.key, set()).add(id(state))
        with lock:
            for key, ids in mine.items():
                seen.setdefault(key, set()).update(ids)

    run_together(32, work)
    keys = [HOST, HOST + "/bad/*", HOST + "/bad/slow/*", HOST + "/search/*"]
    assert sorted(seen) == sorted(keys)
    assert all(len(ids) == 1 for ids in seen.values())
    assert sorted(added) == sorted(keys)
    calls = {key: health.calls for key, health in registry.health().items()}
    assert calls == {
        HOST: 1280,
        HOST + "/bad/*": 2560,
        HOST + "/bad/slow/*": 1280,
        HOST + "/search/*": 1280,
    }
    assert sorted(held[0] for held in registry.guards()) == sorted(keys)


def test_a_forked_childs_routes_get_fresh_locks(clock):
    """after_fork gives a host's routes a fresh lock, as it does the host's guards: one a
    parent's thread held at the fork does not stop the child making a route's state, and the
    states made before stay."""
    routes: dict[str, dict[str, object]] = {"/a/*": {}, "/b/*": {}}
    registry = HostRegistry(load({"hosts": {"svc.test": {"routes": routes}}}), clock=clock)
    made = registry.for_url("http://svc.test/a/1")
    host = registry.for_url("http://svc.test/")
    assert host.routes is not None
    host.routes._lock.acquire()  # as a parent's thread making a route's state would hold it
    registry.after_fork()
    found: list[object] = []
    child = threading.Thread(
        target=lambda: found.append(registry.for_url("http://svc.test/b/1")), daemon=True
    )
    child.start()
    child.join(timeout=5.0)
    assert (child.is_alive(), len(found)) == (False, 1)
    assert registry.for_url("http://svc.test/a/2") is made
    assert sorted(registry.health()) == [HOST, HOST + "/a/*", HOST + "/b/*"]
