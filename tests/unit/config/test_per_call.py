"""Per-call settings: ``resilience={...}`` and ``settings()`` validated as the config is, laid
over the host's policy key by key, nested blocks, and asyncio tasks apart."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import pytest

import resilient_session
from resilient_session import ConfigError
from resilient_session.config import HostPolicy, load
from resilient_session.config.per_call import (
    PER_HOST_SECTIONS,
    Overrides,
    current_overrides,
    effective_policy,
    overrides_from,
    settings,
)


def _error(data: Any, origin: str = "resilience") -> str:
    with pytest.raises(ConfigError) as caught:
        overrides_from(data, origin)
    return str(caught.value)


@pytest.mark.parametrize("section", PER_HOST_SECTIONS)
def test_each_per_host_section_is_refused_by_name(section):
    """breaker, budget, throttle, limit and state are shared by every call to a host: each is
    refused with its own path, and the sections a call may set are listed."""
    assert _error({section: {}}) == (
        f"resilience.{section}: per-host state, shared by every call to the host: set it in "
        "the config (per call: retry, timeout, deadline, hedging, fallback)"
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"retry": {"max_atempts": 1}},
            "resilience.retry.max_atempts: unknown key (did you mean max_attempts?)",
        ),
        ({"retyr": {}}, "resilience.retyr: unknown key (did you mean retry?)"),
        ({"breakers": {}}, "resilience.breakers: unknown key"),
        (
            {"fallback": {"stale": {"max_stal": 9}}},
            "resilience.fallback.stale.max_stal: unknown key (did you mean max_stale?)",
        ),
        ({"retry": {"max_attempts": 0}}, "resilience.retry.max_attempts: expected int >= 1, got 0"),
        (
            {"retry": {"max_attempts": 101}},
            "resilience.retry.max_attempts: expected int <= 100, got 101",
        ),
        ({"timeout": {"read": -1}}, "resilience.timeout.read: expected float > 0.0, got -1"),
        (
            {"hedging": {"max_extra": 5}},
            "resilience.hedging.max_extra: expected int <= 4, got 5",
        ),
        (
            {"fallback": {"stale": {"max_stale": 86401}}},
            "resilience.fallback.stale.max_stale: expected float <= 86400.0, got 86401",
        ),
        (
            {"retry": {"max_attempts": True}},
            "resilience.retry.max_attempts: expected int, got bool True",
        ),
        ({"retry": 3}, "resilience.retry: expected object, got int 3"),
        (
            [("retry", {})],
            "resilience: expected a mapping of sections (retry, timeout, deadline, hedging, "
            "fallback), got list [('retry', {})]",
        ),
    ],
)
def test_a_bad_key_or_value_names_its_path(data, message):
    """An unknown key (with the nearest known one), a value out of range or of the wrong type
    is a ConfigError naming the key path, as the config's errors do."""
    assert _error(data) == message


def test_every_error_is_reported_at_once():
    """Two bad keys and a per-host section: one ConfigError, one line each."""
    message = _error({"retry": {"max_atempts": 1, "backoff_base": 0}, "limit": {}})
    assert message.splitlines() == [
        "3 errors:",
        "  resilience.retry.max_atempts: unknown key (did you mean max_attempts?)",
        "  resilience.retry.backoff_base: expected float > 0.0, got 0",
        "  resilience.limit: per-host state, shared by every call to the host: set it in the "
        "config (per call: retry, timeout, deadline, hedging, fallback)",
    ]


def test_settings_errors_name_settings():
    """A bad key given to settings() is named from there, when the block is entered."""
    with (
        pytest.raises(ConfigError, match=r"^settings\.budget: per-host state"),
        settings(budget={"ratio": 0.5}),
    ):
        pytest.fail("entered a block with a per-host section")  # pragma: no cover


@pytest.mark.parametrize("data", [None, {}, {"retry": {}}, {"fallback": {"stale": {}}}])
def test_no_setting_is_none(data):
    """Nothing to override is None, so a call tests one ``is None`` and does nothing more."""
    assert overrides_from(data) is None


def test_settings_lay_over_the_host_policy_key_by_key():
    """Each key set replaces the host's; every other key of the section, and every other
    section, stays the host's."""
    host = load(
        {
            "defaults": {
                "retry": {"max_attempts": 5, "backoff_base": 0.2},
                "fallback": {"stale": {"enabled": True, "max_stale": 60}},
            }
        }
    ).defaults
    overrides = overrides_from(
        {"retry": {"max_attempts": 1}, "fallback": {"stale": {"max_bytes": 4_194_304}}}
    )
    assert overrides is not None
    policy = effective_policy(host, overrides)
    assert (policy.retry.max_attempts, policy.retry.backoff_base) == (1, 0.2)
    stale = policy.fallback.stale
    assert (stale.enabled, stale.max_stale, stale.max_bytes) == (True, 60.0, 4_194_304)
    assert (policy.breaker, policy.timeout) == (host.breaker, host.timeout)


def test_a_relation_broken_over_the_host_policy_is_named_at_the_call():
    """backoff_cap below the host's backoff_base is valid alone and wrong over that host."""
    host = load({"defaults": {"retry": {"backoff_base": 2.0, "backoff_cap": 4.0}}}).defaults
    overrides = overrides_from({"retry": {"backoff_cap": 1.0}})
    assert overrides is not None
    assert effective_policy(HostPolicy(), overrides).retry.backoff_cap == 1.0
    with pytest.raises(ConfigError) as caught:
        effective_policy(host, overrides)
    assert (
        str(caught.value) == "resilience.retry.backoff_cap: must be >= backoff_base (2.0), got 1.0"
    )


def test_a_repeated_setting_is_worked_out_once():
    """The same settings, built twice from equal mappings, are the same value and give the
    same policy object: the second call costs dict lookups."""
    data = {"retry": {"max_attempts": 2, "transient_statuses": [500, 502]}}
    first, second = overrides_from(data), overrides_from(dict(data))
    assert first is second
    assert first is not None
    host = HostPolicy()
    assert effective_policy(host, first) is effective_policy(host, first)
    assert effective_policy(host, first).retry.transient_statuses == frozenset({500, 502})


def test_equal_looking_values_of_other_types_are_not_confused():
    """``1`` and ``True`` are one dict key; the validated settings of each are kept apart."""
    assert overrides_from({"hedging": {"max_extra": 1}}) is not None
    assert _error({"hedging": {"max_extra": True}}) == (
        "resilience.hedging.max_extra: expected int, got bool True"
    )


def test_settings_nest_inner_keys_winning_key_by_key():
    """An inner block's keys win over an outer's; the outer's other keys stay; leaving a block
    restores what was in force before it."""
    assert current_overrides() is None
    with settings(retry={"max_attempts": 1, "backoff_base": 0.1}) as outer:
        assert current_overrides() is outer
        with settings(retry={"max_attempts": 3}, timeout={"read": 2.0}) as inner:
            assert inner is not None
            assert inner.sections == {
                "retry": {"max_attempts": 3, "backoff_base": 0.1},
                "timeout": {"read": 2.0},
            }
            policy = effective_policy(HostPolicy(), inner)
            assert (policy.retry.max_attempts, policy.retry.backoff_base) == (3, 0.1)
            assert (policy.timeout.connect, policy.timeout.read) == (5.0, 2.0)
        assert current_overrides() is outer
        with settings() as unchanged:
            assert unchanged is outer
    assert current_overrides() is None


def test_a_call_setting_goes_over_the_block():
    """A call's own resilience= goes over the enclosing settings() key by key."""
    with settings(retry={"max_attempts": 1, "backoff_base": 0.1}):
        call = overrides_from({"retry": {"max_attempts": 2}})
        assert call is not None
        combined = call.over(current_overrides())
    assert combined.sections == {"retry": {"max_attempts": 2, "backoff_base": 0.1}}
    assert combined == Overrides({"retry": {"max_attempts": 2, "backoff_base": 0.1}})


def test_asyncio_tasks_keep_their_own_settings():
    """Two tasks in their own settings() blocks, interleaved at each await, each see theirs."""
    seen: dict[str, list[int]] = {"a": [], "b": []}

    async def task(name: str, attempts: int) -> None:
        with settings(retry={"max_attempts": attempts}):
            for _ in range(3):
                await asyncio.sleep(0)
                found = current_overrides()
                assert found is not None
                seen[name].append(found.sections["retry"]["max_attempts"])
        assert current_overrides() is None

    async def both() -> None:
        await asyncio.gather(task("a", 1), task("b", 7))

    asyncio.run(both())
    assert seen == {"a": [1, 1, 1], "b": [7, 7, 7]}


def test_a_new_thread_starts_without_settings_unless_given_the_context():
    """Contextvars do not follow into a new thread; a copy of the context carries them."""
    found: list[Overrides | None] = []
    with settings(hedging={"enabled": False}) as scope:
        plain = threading.Thread(target=lambda: found.append(current_overrides()))
        context = contextvars.copy_context()
        carried = threading.Thread(
            target=context.run, args=(lambda: found.append(current_overrides()),)
        )
        for thread in (plain, carried):
            thread.start()
            thread.join(timeout=5)
    assert found == [None, scope]


def test_settings_is_exported():
    """resilient_session.settings is the context manager, in __all__."""
    assert resilient_session.settings is settings
    assert "settings" in resilient_session.__all__


def test_a_value_no_cache_can_hold_is_still_validated():
    """An unhashable or absurdly nested value is named as any bad value is, not a TypeError."""
    assert _error({"retry": {"max_attempts": bytearray(b"1")}}) == (
        "resilience.retry.max_attempts: expected int, got bytes bytearray(b'1')"
    )
    nested: list[object] = []
    for _ in range(5_000):
        nested = [nested]
    assert _error({"retry": {"transient_statuses": nested}}) == (
        "resilience.retry.transient_statuses[0]: expected int, got array [[[[...]]]]"
    )
