"""The per-host registry: keys, policy resolution, LRU bound, and races on first use."""

from __future__ import annotations

import json
import re
import threading
import tracemalloc
from pathlib import Path

import pytest

from resilient_session._pipeline.attempt import Reason
from resilient_session._pipeline.drive import drive
from resilient_session._pipeline.stages import standard_chain
from resilient_session._state.registry import HostRegistry, host_key
from resilient_session.config import load
from resilient_session.testing import ScriptedTransport
from tests.threads import run_together

DOCS = Path(__file__).resolve().parents[3] / "docs" / "events.md"


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("http://API.test/x", ("http://api.test:80", "api.test", 80)),
        ("https://api.test/x", ("https://api.test:443", "api.test", 443)),
        ("https://api.test:8443", ("https://api.test:8443", "api.test", 8443)),
        ("http://u:p@api.test:81/", ("http://api.test:81", "api.test", 81)),
        ("http://[::1]:9000/", ("http://[::1]:9000", "::1", 9000)),
    ],
)
def test_host_key(url, key):
    """Keys are scheme://host:port with default ports filled and userinfo dropped."""
    assert host_key(url) == key


def test_same_host_same_state_different_port_separate(clock):
    """Calls to one host:port share state; another port gets its own breaker and bucket."""
    registry = HostRegistry(load({}), clock=clock)
    first = registry.for_url("http://a.test/x")
    assert registry.for_url("http://a.test:80/y") is first
    assert registry.for_url("http://a.test:81/") is not first
    assert len(registry) == 2


@pytest.mark.parametrize(
    "other",
    [
        "http://a.test.evil/x",
        "http://a.test:8080/x",
        "http://a.test@evil.test/x",
        "https://a.test/x",
    ],
)
def test_repeated_host_shortcut_never_matches_a_lookalike(clock, other):
    """After a.test, a URL that merely starts with its origin gets its own state."""
    registry = HostRegistry(load({}), clock=clock)
    first = registry.for_url("http://a.test/x")
    assert registry.for_url(other) is not first
    assert registry.for_url("http://a.test?q=1") is first
    assert registry.for_url("http://a.test") is first
    assert len(registry) == 2


def test_repeated_host_survives_eviction_of_others(clock):
    """The host just used is never the one evicted, even at max_hosts 1."""
    registry = HostRegistry(load({"registry": {"max_hosts": 1}}), clock=clock)
    first = registry.for_url("http://a.test/")
    assert registry.for_url("http://a.test/y") is first
    second = registry.for_url("http://b.test/")
    assert list(registry.health()) == ["http://b.test:80"]
    assert registry.for_url("http://b.test/z") is second
    assert registry.for_url("http://a.test/") is not first


def test_policy_resolved_per_host(clock):
    """Each host's state carries the policy its most specific entry gives."""
    registry = HostRegistry(
        load({"hosts": {"*.slow.test": {"timeout": {"read": 99}}}}), clock=clock
    )
    assert registry.for_url("https://x.slow.test/").policy.timeout.read == 99
    assert registry.for_url("https://fast.test/").policy.timeout.read == 30


def test_least_recently_used_evicted(clock):
    """Past max_hosts the least recently used host is dropped; a used one survives."""
    registry = HostRegistry(load({"registry": {"max_hosts": 3}}), clock=clock)
    keep = registry.for_url("http://h0.test/")
    for index in range(1, 10):
        registry.for_url(f"http://h{index}.test/")
        registry.for_url("http://h0.test/")
    assert len(registry) == 3
    assert registry.for_url("http://h0.test/") is keep
    assert set(registry.health()) == {"http://h0.test:80", "http://h8.test:80", "http://h9.test:80"}


def test_memory_flat_for_a_million_hosts_worth_of_churn(clock):
    """20,000 distinct hosts through a 1,000-host registry keep memory bounded."""
    registry = HostRegistry(load({"registry": {"max_hosts": 1000}}), clock=clock)
    for index in range(5000):  # past the registry's bound and the host-key cache's
        registry.for_url(f"http://warm{index}.test/")
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    for index in range(20_000):
        registry.for_url(f"http://h{index}.test/")
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    growth = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    assert len(registry) == 1000
    # About 2 KB a kept host (breaker, bucket, throttle window, concurrency limit); 20,000
    # would need 40 MB.
    assert growth < 3_000_000


def test_concurrent_first_use_creates_one_state(clock):
    """64 threads asking for a new host at once all get the same state object."""
    registry = HostRegistry(load({}), clock=clock)
    seen: list[object] = []
    lock = threading.Lock()

    def get(_: int) -> None:
        state = registry.for_url("http://race.test/")
        with lock:
            seen.append(state)

    run_together(64, get)
    assert len(seen) == 64
    assert len({id(state) for state in seen}) == 1


def test_health_snapshot(harness):
    """health() reports calls, tries, retries, failures and tokens per host."""
    h = harness({"defaults": {"retry": {"backoff_base": 0.1}, "budget": {"min_per_second": 0}}})
    h.run(503, 200)
    h.run(404)
    health = h.registry.health()["http://svc.test:80"]
    assert (health.breaker.value, health.calls, health.tries, health.retries, health.failures) == (
        "closed",
        2,
        3,
        1,
        1,
    )
    assert health.tokens == pytest.approx(10 - 1 + 0.2)  # full, one retry, one more first try


def _health_fields_in_docs() -> list[str]:
    """The field names of the health table in docs/events.md, in order."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## Health") :].split("\n## ", 1)[0]
    return re.findall(r"^\| `(\w+)`", section, flags=re.MULTILINE)


def test_health_counts_sent_tries_and_refusals_apart_as_the_events_do(harness, clock, logs):
    """Refused tries (deadline spent, breaker open) are counted in refused, not in tries, so
    health agrees with the http.try events, and as_dict round-trips through JSON."""
    h = harness(
        {
            "defaults": {
                "retry": {"backoff_base": 0.1},
                "breaker": {"failure_threshold": 2, "recovery_timeout": 5.0},
                "budget": {"min_per_second": 0},
            }
        }
    )
    h.run(503, 200)
    attempt = h.first_attempt(deadline=0.5)
    clock.advance(0.6)
    spent = drive(standard_chain(ScriptedTransport(clock, 200)), attempt)
    assert spent.decision.reason is Reason.DEADLINE_SPENT
    _, opened = h.run(500, 500)
    refused, never_sent = h.run(200)
    assert (opened.calls, never_sent.calls, refused.decision.reason) == (2, 0, Reason.BREAKER_OPEN)

    tries = [event for event in logs if event["event"] == "http.try"]
    sent = [event for event in tries if event["decision"] != "fail_fast"]
    health = h.registry.health()["http://svc.test:80"]
    assert (health.tries, health.refused) == (len(sent), len(tries) - len(sent)) == (4, 2)
    assert (health.rejected, health.deadline_spent, health.calls, health.retries) == (1, 1, 4, 2)

    as_json = json.loads(json.dumps({k: v.as_dict() for k, v in h.registry.health().items()}))
    assert as_json == {
        "http://svc.test:80": {
            "breaker": "open",
            "open_for": 5.0,
            "tokens": pytest.approx(10 - 2 + 3 * 0.2),  # the first deposit found it full
            "calls": 4,
            "tries": 4,
            "retries": 2,
            "failures": 3,
            "refused": 2,
            "rejected": 1,
            "deadline_spent": 1,
            "budget_exhausted": 0,
            "throttle_probability": 0.0,
            "throttled": 0,
            "limit": 28,  # 32 dropped once, by the 503, to 28.8
            "in_flight": 0,
            "limited": 0,
            "hedges": 0,
            "hedge_wins": 0,
            "cancelled": 0,
            "hedge_delay": 0.0,
            "state_backend": "memory",
            "state_degraded": False,
            "route": None,
            "fallbacks": 0,
            "stale_served": 0,
            "stale_entries": 0,
            "stale_bytes": 0,
            "stale_evictions": 0,
        }
    }
    assert list(as_json["http://svc.test:80"]) == _health_fields_in_docs()
