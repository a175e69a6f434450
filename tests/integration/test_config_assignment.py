"""``session.config = ...`` takes effect on the next call: the new policies, on per-host state
rebuilt for them; a session on a registry handed to it refuses, saying why."""

from __future__ import annotations

import contextlib
import pickle
import time
from typing import Any

import pytest
import requests
from requests.adapters import HTTPAdapter

from resilient_session import (
    CircuitOpenError,
    ConfigError,
    DeadlineExceeded,
    HostRegistry,
    ResilientSession,
    TryRecord,
    load,
)
from resilient_session._adopted_adapters import around_of
from resilient_session.testing.upstream import FlakyUpstream, Hang, Reply
from tests.integration.fleet_calls import (
    THRESHOLD,
    fail_until_all_fail_fast,
    fleet_config,
    host_key,
    wait_until,
)
from tests.threads import run_together

pytestmark = pytest.mark.integration

FAST = {"backoff_base": 0.01, "backoff_cap": 0.05}


def _config(**sections: dict[str, Any]) -> dict[str, Any]:
    defaults: dict[str, Any] = {"retry": dict(FAST)}
    for name, values in sections.items():
        defaults[name] = {**defaults.get(name, {}), **values}
    return {"defaults": defaults}


def test_an_assigned_config_sets_the_next_calls_attempts(upstream):
    """Built with max_attempts 2, given max_attempts 5: a 503 is tried 2 times, then 5."""
    upstream.script("/busy", Reply(503))
    with ResilientSession(_config(retry={"max_attempts": 2})) as session:
        session.get(upstream.url("/busy"))
        before = upstream.hits("/busy")
        session.config = load(_config(retry={"max_attempts": 5}))
        session.get(upstream.url("/busy"))
        assert session.config.defaults.retry.max_attempts == 5
    assert (before, upstream.hits("/busy") - before) == (2, 5)


def test_a_mapping_or_a_path_is_loaded_as_the_constructor_loads_it(upstream, tmp_path):
    """A dict, then a YAML file: each is validated and takes effect (3 tries, then 1)."""
    upstream.script("/busy", Reply(503))
    path = tmp_path / "one.yaml"
    path.write_text("defaults:\n  retry:\n    max_attempts: 1\n", encoding="utf-8")
    with ResilientSession(_config(retry={"max_attempts": 2})) as session:
        session.config = _config(retry={"max_attempts": 3})  # type: ignore[assignment]  # loaded as the constructor loads it
        session.get(upstream.url("/busy"))
        session.config = path
        session.get(upstream.url("/busy"))
        assert session.config.source == str(path)
    assert upstream.hits("/busy") == 4


def test_per_host_state_is_rebuilt_for_the_new_config(upstream):
    """A breaker open under the old config (threshold 1) is closed under the new one: the next
    call reaches the host, and health() counts only the new state's tries."""
    upstream.script("/down", Reply(503))
    with ResilientSession(
        _config(retry={"max_attempts": 1}, breaker={"failure_threshold": 1})
    ) as s:
        s.get(upstream.url("/down"))
        with pytest.raises(requests.ConnectionError):
            s.get(upstream.url("/down"))
        assert upstream.hits("/down") == 1
        s.config = load(_config(retry={"max_attempts": 1}, breaker={"failure_threshold": 5}))
        assert s.get(upstream.url("/down")).status_code == 503
        health = s.health()[f"http://127.0.0.1:{upstream.port}"]
    assert upstream.hits("/down") == 2
    assert (health.tries, health.failures, health.breaker.value) == (1, 1, "closed")


def test_a_mounted_adapter_follows_the_new_config(upstream):
    """An HTTPAdapter mounted before the assignment runs on the new config's state (4 tries)."""
    upstream.script("/busy", Reply(503))
    with ResilientSession(_config(retry={"max_attempts": 2})) as session:
        session.mount("http://", HTTPAdapter(pool_maxsize=8))
        session.config = load(_config(retry={"max_attempts": 4}))
        session.get(upstream.url("/busy"))
    assert upstream.hits("/busy") == 4


def test_a_new_default_deadline_spans_the_next_call(upstream):
    """Given deadline.default 0.5, a call to a hanging upstream ends about 0.5 s in."""
    upstream.script("/hang", Hang(5))
    with ResilientSession(_config(retry={"max_attempts": 1})) as session:
        session.config = load(_config(retry={"max_attempts": 1}, deadline={"default": 0.5}))
        started = time.monotonic()
        with pytest.raises(DeadlineExceeded):
            session.get(upstream.url("/hang"))
        elapsed = time.monotonic() - started
    assert 0.45 <= elapsed < 1.1


def test_try_hooks_are_kept(upstream):
    """A try hook given at construction is told of the tries made under the new config."""
    upstream.script("/busy", Reply(503))
    seen: list[int] = []

    class Hook:
        def on_try(self, record: TryRecord, /) -> None:
            seen.append(record.attempt)

    with ResilientSession(_config(retry={"max_attempts": 2}), try_hooks=[Hook()]) as session:
        session.config = load(_config(retry={"max_attempts": 3}))
        session.get(upstream.url("/busy"))
    assert seen == [1, 2, 3]


def test_a_bad_config_raises_naming_the_key_and_changes_nothing(upstream):
    """``max_attempts: 0`` raises ConfigError with the dotted path; the session keeps its
    config and its state (2 tries)."""
    upstream.script("/busy", Reply(503))
    with ResilientSession(_config(retry={"max_attempts": 2})) as session:
        registry = session.registry
        with pytest.raises(ConfigError, match=r"defaults\.retry\.max_attempts"):
            session.config = _config(retry={"max_attempts": 0})  # type: ignore[assignment]  # loaded as the constructor loads it
        assert (session.registry, session.config.defaults.retry.max_attempts) == (registry, 2)
        session.get(upstream.url("/busy"))
    assert upstream.hits("/busy") == 2


def test_a_session_on_a_registry_handed_to_it_refuses_a_new_config():
    """The registry carries the config, perhaps for other sessions too: assigning one raises
    ValueError saying what to do, and the session keeps its registry."""
    registry = HostRegistry(load(_config(retry={"max_attempts": 2})))
    with ResilientSession(registry=registry) as session:
        with pytest.raises(ValueError, match="HostRegistry"):
            session.config = load(_config(retry={"max_attempts": 5}))
        assert (session.registry, session.config) == (registry, registry.config)
    registry.close()


def test_assigning_while_threads_call_loses_no_call():
    """8 threads make 25 calls each while the config is assigned 20 times: every call ends
    200, each on the state of one config or the next, and the last config is in force."""
    with FlakyUpstream() as up, ResilientSession(_config()) as session:
        session.mount("http://", HTTPAdapter(pool_maxsize=16))
        statuses: list[int] = []

        def body(index: int) -> None:
            for call in range(25):
                if index == 0 and call < 20:
                    session.config = load(_config(retry={"max_attempts": 2 + call % 3}))
                statuses.append(session.get(up.url("/ok"), timeout=5).status_code)

        run_together(8, body)
        around = around_of(session.get_adapter(up.url("/")))
        assert around is not None
        assert around.registry is session.registry
        assert session.config.defaults.retry.max_attempts == 2 + 19 % 3
    assert statuses == [200] * 200
    assert up.hits("/ok") == 200


def test_an_unpickled_session_takes_a_new_config_too(upstream):
    """A session rebuilt by pickle takes an assigned config like one built by hand (3 tries)."""
    upstream.script("/busy", Reply(503))
    with ResilientSession(_config(retry={"max_attempts": 2})) as session:
        clone = pickle.loads(pickle.dumps(session))  # noqa: S301 - our own bytes
    with clone:
        clone.config = load(_config(retry={"max_attempts": 3}))
        clone.get(upstream.url("/busy"))
    assert upstream.hits("/busy") == 3


def test_with_the_redis_backend_the_fleets_breaker_carries_over(upstream, redis_server, key_prefix):
    """On the redis backend a new config's registry reads the fleet's state: a host whose
    breaker the old one opened reads open again after one call more (two tries at most),
    not after another ten failures."""
    upstream.script("/down", Reply(503))
    url = upstream.url("/down")
    config = fleet_config(key_prefix, url=redis_server.url)
    with ResilientSession(config) as session:
        calls = fail_until_all_fail_fast([session], url)
        before = upstream.hits("/down")
        config["defaults"]["retry"]["max_attempts"] = 2
        session.config = load(config)
        key = host_key(upstream)
        with contextlib.suppress(requests.ConnectionError):
            session.get(url)  # the new registry's first use of the host
        wait_until(lambda: session.health()[key].breaker.value == "open")
        with pytest.raises(CircuitOpenError):
            session.get(url)
    assert (calls, before) == (THRESHOLD + 1, THRESHOLD)
    assert upstream.hits("/down") - before <= 2
