"""The start of a call (``_pipeline/call.py``): each value in its named field, and the
replay rules that say whether a retry may send the request again."""

from __future__ import annotations

from typing import Any

import requests

from resilient_session._pipeline.attempt import Call
from resilient_session._pipeline.call import start_call
from resilient_session._state.registry import HostRegistry
from resilient_session._transport.requests_wire import REQUESTS_WIRE
from resilient_session.config import Config
from resilient_session.deadline import deadline


def test_a_call_holds_every_value_under_its_name(clock):
    """start_call, which builds a Call field by field, puts each value in its named field and
    leaves none unset."""
    registry = HostRegistry(Config(), clock=clock)
    request = requests.Request("PUT", "http://svc.test:8080/x", data=b"abc").prepare()
    started = clock.monotonic()
    with deadline(3.0, clock=clock):
        call = start_call(
            request,
            registry,
            REQUESTS_WIRE,
            stream=True,
            timeout=(1.0, 2.0),
            verify="/ca.pem",
            cert="client.pem",
            proxies={"http": "http://proxy.test:3128"},
        )
    assert {name: getattr(call, name) for name in Call.__slots__} == {
        "request": request,
        "url": "http://svc.test:8080/x",
        "method": "PUT",
        "state": registry.for_url("http://svc.test:8080/"),
        "policy": registry.for_url("http://svc.test:8080/").policy,
        "table": registry.for_url("http://svc.test:8080/").table,
        "runtime": registry.runtime,
        "wire": REQUESTS_WIRE,
        "stream": True,
        "timeout": (1.0, 2.0),
        "verify": "/ca.pem",
        "cert": "client.pem",
        "proxies": {"http": "http://proxy.test:3128"},
        "deadline_at": started + 3.0,
        "started_at": started,
        "idempotent": True,
        "replayable": True,
    }


def test_idempotent_and_replayable_are_told_apart(clock):
    """The last two fields differ by name: a PUT of a generator is idempotent but cannot be
    replayed; a POST of bytes can be replayed but is not idempotent."""
    registry = HostRegistry(Config(), clock=clock)
    put = requests.Request("PUT", "http://svc.test/", data=iter([b"a"])).prepare()
    post = requests.Request("POST", "http://svc.test/", data=b"a").prepare()
    first, second = (
        start_call(put, registry, REQUESTS_WIRE),
        start_call(post, registry, REQUESTS_WIRE),
    )
    assert (first.idempotent, first.replayable, first.timeout) == (True, False, (5.0, 30.0))
    assert (second.idempotent, second.replayable) == (False, True)


def test_a_call_under_settings_runs_on_the_policy_with_them_over_the_hosts(clock):
    """settings() reach start_call: the call's policy, table of statuses and default timeout
    are the host's with the settings over them; the host's state is the same object."""
    from resilient_session.config.per_call import settings

    registry = HostRegistry(Config(), clock=clock)
    request = requests.Request("GET", "http://svc.test/").prepare()
    plain = start_call(request, registry, REQUESTS_WIRE)
    with settings(retry={"max_attempts": 1, "transient_statuses": [500]}, timeout={"read": 2}):
        tuned = start_call(request, registry, REQUESTS_WIRE)
        again = start_call(request, registry, REQUESTS_WIRE)
    assert tuned.state is plain.state
    assert plain.policy is plain.state.policy
    assert (tuned.policy.retry.max_attempts, plain.policy.retry.max_attempts) == (1, 4)
    assert tuned.timeout == (5.0, 2.0)
    assert plain.timeout == (5.0, 30.0)
    assert tuned.table.of(502, None, False).tier.value == "never"
    assert plain.table.of(502, None, False).tier.value != "never"
    assert again.policy is tuned.policy
    assert again.table is tuned.table


def test_a_call_finds_the_recent_host_without_asking_the_registry(harness, monkeypatch):
    """A call to the host the call before went to takes its state from ``recent``; another
    host, or the same one spelled with userinfo, asks ``for_url``."""
    h = harness()
    first = h.first_attempt(url="http://svc.test/items").call.state
    asked: list[str] = []
    for_url = h.registry.for_url

    def counted(url: str) -> Any:
        asked.append(url)
        return for_url(url)

    monkeypatch.setattr(h.registry, "for_url", counted)
    again = h.first_attempt(url="http://svc.test/other?page=2").call.state
    elsewhere = h.first_attempt(url="http://else.test/").call.state
    spelled = h.first_attempt(url="http://u:p@else.test/x").call.state
    assert (again is first, spelled is elsewhere, elsewhere is first) == (True, True, False)
    assert asked == ["http://else.test/", "http://u:p@else.test/x"]
