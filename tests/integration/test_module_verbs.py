"""``resilient_session.get(url)`` and the other module verbs: requests' module API, each call on
a fresh session, all on one per-host state per process, so an outage is remembered."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

import resilient_session
from resilient_session import ConfigError, ResilientSession, _api
from resilient_session.config import ENV_VAR
from resilient_session.testing.upstream import Reply
from tests.integration.test_fork import _collect, _fork
from tests.threads import run_together

pytestmark = pytest.mark.integration

CONFIG = """\
defaults:
  retry: {max_attempts: 3, backoff_base: 0.01, backoff_cap: 0.05}
"""
OUTAGE_CALLS = 40


@pytest.fixture
def process_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The module verbs on a process registry of this test's own, built from a config file
    named by RESILIENT_SESSION_CONFIG; yields the file."""
    path = tmp_path / "resilience.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    monkeypatch.setenv(ENV_VAR, str(path))
    monkeypatch.setattr(_api, "_registry", None)
    yield path
    registry = _api._registry
    if registry is not None:
        registry.close()


def test_module_get_retries_as_the_configured_session_would(upstream, process_state):
    """``resilient_session.get``: 503, 503, 200 gives the 200 after 3 tries, as configured
    in the file RESILIENT_SESSION_CONFIG names."""
    upstream.script("/items", Reply(503), Reply(503), Reply(200, body=b"items"))
    response = resilient_session.get(upstream.url("/items"), deadline=5.0)
    assert (response.status_code, response.text, upstream.hits("/items")) == (200, "items", 3)
    assert [hit.header("X-Request-Attempt") for hit in upstream.received("/items")] == [
        "1; max=3",
        "2; max=3",
        "3; max=3",
    ]


def test_every_verb_sends_its_method_as_requests_would(upstream, process_state):
    """Each verb sends its own method; ``get`` takes ``params`` second, as ``requests.get``;
    ``head`` follows no redirect, as ``requests.head``."""
    url = upstream.url("/v")
    upstream.script("/moved", Reply(302, headers={"Location": "/v"}))
    resilient_session.get(url, {"q": "1"})
    resilient_session.options(url)
    head = resilient_session.head(upstream.url("/moved"))
    resilient_session.post(url, data=b"p")
    resilient_session.put(url, data=b"u")
    resilient_session.patch(url, json={"a": 1})
    resilient_session.delete(url)
    resilient_session.request("GET", url, params={"r": "2"})
    sent = [(hit.method, hit.target) for hit in upstream.received("/v")]
    assert sent == [
        ("GET", "/v?q=1"),
        ("OPTIONS", "/v"),
        ("POST", "/v"),
        ("PUT", "/v"),
        ("PATCH", "/v"),
        ("DELETE", "/v"),
        ("GET", "/v?r=2"),
    ]
    assert head.status_code == 302


def test_cookies_are_never_shared_between_calls(upstream, process_state):
    """A cookie set by one call is not sent by the next, as with ``requests.get``."""
    upstream.script("/login", Reply(200, headers={"Set-Cookie": "sid=secret; Path=/"}))
    assert resilient_session.get(upstream.url("/login")).cookies["sid"] == "secret"
    resilient_session.get(upstream.url("/next"))
    assert upstream.received("/next")[0].header("Cookie") is None


def test_an_outage_is_remembered_across_calls(upstream, process_state):
    """40 calls to a host answering 503 only: a session built per call tries each 3 times
    (3.0 a call); the module verbs share one breaker, which opens at its 20th failure and
    refuses the rest unsent (0.5 a call)."""
    upstream.script("/down", Reply(503))
    url = upstream.url("/down")
    for _ in range(OUTAGE_CALLS):
        with ResilientSession(process_state) as session:
            session.get(url)
    per_session = upstream.hits("/down") / OUTAGE_CALLS
    for _ in range(OUTAGE_CALLS):
        # The breaker, once open, refuses the call unsent: requests.ConnectionError.
        with contextlib.suppress(requests.ConnectionError):
            resilient_session.get(url)
    shared = (upstream.hits("/down") - per_session * OUTAGE_CALLS) / OUTAGE_CALLS
    assert (per_session, shared) == (3.0, 20 / OUTAGE_CALLS)
    health = _api.shared_registry().health()[f"http://127.0.0.1:{upstream.port}"]
    assert health.breaker.value == "open"
    assert health.calls == OUTAGE_CALLS


def test_a_bad_config_raises_on_each_call_until_it_is_fixed(upstream, process_state):
    """An invalid file raises ConfigError naming the key, on every call; once fixed, the next
    call builds the process's state from it."""
    process_state.write_text("defaults: {retry: {max_attempts: 0}}\n", encoding="utf-8")
    for _ in range(2):
        with pytest.raises(ConfigError, match=r"defaults\.retry\.max_attempts"):
            resilient_session.get(upstream.url("/x"))
    process_state.write_text(CONFIG, encoding="utf-8")
    assert resilient_session.get(upstream.url("/x")).status_code == 200
    assert upstream.hits("/x") == 1


def test_the_process_state_is_built_once_under_many_threads(upstream, process_state):
    """32 threads make their first module call at once: one registry is built, and it holds
    all 32 calls."""
    built: list[int] = []
    real = resilient_session.HostRegistry

    def counted(*args: object, **kwargs: object) -> resilient_session.HostRegistry:
        built.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]  # passed on as given

    statuses: list[int] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_api, "HostRegistry", counted)
        run_together(
            32, lambda index: statuses.append(resilient_session.get(upstream.url("/t")).status_code)
        )
    health = _api.shared_registry().health()[f"http://127.0.0.1:{upstream.port}"]
    assert (len(built), statuses, health.calls) == (1, [200] * 32, 32)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Python 3.12 warns on a fork
def test_a_forked_child_starts_with_state_of_its_own(upstream, process_state):
    """The parent's breaker is open for the host; a forked child's first call reaches it,
    on a registry of its own, and the parent's still refuses."""
    process_state.write_text(
        "defaults: {retry: {max_attempts: 1}, breaker: {failure_threshold: 1}}\n",
        encoding="utf-8",
    )
    upstream.script("/down", Reply(503))
    url = upstream.url("/down")
    resilient_session.get(url)
    parent = _api.shared_registry()

    def child() -> dict[str, object]:
        fresh = _api.shared_registry() is not parent and len(_api.shared_registry()) == 0
        return {"fresh": fresh, "status": resilient_session.get(url).status_code}

    reports = _collect([_fork(child)])
    with pytest.raises(requests.ConnectionError):
        resilient_session.get(url)
    assert reports == [{"fresh": True, "status": 503}]
    assert upstream.hits("/down") == 2
