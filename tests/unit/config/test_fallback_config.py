"""The per-host ``fallback.stale`` section: its defaults, ranges and errors, merged key by key
under hosts and routes, and in the shipped schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from resilient_session import ConfigError
from resilient_session.config import FallbackPolicy, HostPolicy, StalePolicy, load

ROOT = Path(__file__).resolve().parents[3]
VALIDATOR = jsonschema.Draft202012Validator(
    json.loads((ROOT / "docs" / "config.schema.json").read_text(encoding="utf-8"))
)
HOST = "api.example.com"


def _error(document: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        load(document)
    return str(caught.value)


def test_stale_serving_is_off_by_default_with_the_documented_bounds():
    """enabled false, 300 s, 16 MiB for the store and 1 MiB an answer."""
    stale = HostPolicy().fallback.stale
    assert (stale.enabled, stale.max_stale, stale.max_bytes, stale.max_entry_bytes) == (
        False,
        300.0,
        16_777_216,
        1_048_576,
    )
    assert HostPolicy().fallback == FallbackPolicy(stale=StalePolicy())


@pytest.mark.parametrize(
    ("stale", "message"),
    [
        ({"max_stale": -1}, "defaults.fallback.stale.max_stale: expected float >= 0.0, got -1"),
        (
            {"max_stale": 86_401},
            "defaults.fallback.stale.max_stale: expected float <= 86400.0, got 86401",
        ),
        ({"max_bytes": 0}, "defaults.fallback.stale.max_bytes: expected int >= 1, got 0"),
        (
            {"max_bytes": 2**40 + 1},
            "defaults.fallback.stale.max_bytes: expected int <= 1099511627776, got 1099511627777",
        ),
        (
            {"max_entry_bytes": 0},
            "defaults.fallback.stale.max_entry_bytes: expected int >= 1, got 0",
        ),
        (
            {"max_bytes": 1000, "max_entry_bytes": 1001},
            "defaults.fallback.stale.max_entry_bytes: must be <= max_bytes (1000), got 1001",
        ),
        ({"enabled": "yes"}, "defaults.fallback.stale.enabled: expected bool, got str 'yes'"),
        (
            {"max_stal": 10},
            "defaults.fallback.stale.max_stal: unknown key (did you mean max_stale?)",
        ),
    ],
)
def test_a_bad_stale_key_is_named_by_its_path(stale, message):
    """Ranges, the rule between the two byte bounds, types and unknown keys, each named."""
    assert _error({"defaults": {"fallback": {"stale": stale}}}) == message


def test_an_unknown_fallback_key_suggests_stale():
    """A typo of the nested section's name gets did-you-mean too."""
    assert _error({"defaults": {"fallback": {"stael": {}}}}) == (
        "defaults.fallback.stael: unknown key (did you mean stale?)"
    )
    assert _error({"defaults": {"fallbak": {}}}) == (
        "defaults.fallbak: unknown key (did you mean fallback?)"
    )


def test_a_host_and_its_route_merge_the_nested_section_key_by_key():
    """A host entry that sets one stale key keeps the others from defaults; a route over the
    host keeps the host's; the error of a route's bad key names the route."""
    config = load(
        {
            "defaults": {"fallback": {"stale": {"max_stale": 60, "max_bytes": 2_000_000}}},
            "hosts": {
                HOST: {
                    "fallback": {"stale": {"enabled": True}},
                    "routes": {"/feed/*": {"fallback": {"stale": {"max_entry_bytes": 4096}}}},
                }
            },
        }
    )
    host = config.for_host(HOST, 443).fallback.stale
    assert (host.enabled, host.max_stale, host.max_bytes, host.max_entry_bytes) == (
        True,
        60.0,
        2_000_000,
        1_048_576,
    )
    (route,) = config.routes_for(HOST, 443)
    stale = route.policy.fallback.stale
    assert (stale.enabled, stale.max_stale, stale.max_bytes, stale.max_entry_bytes) == (
        True,
        60.0,
        2_000_000,
        4096,
    )
    assert config.for_host("other.test", 80).fallback.stale.enabled is False
    assert _error(
        {"hosts": {HOST: {"routes": {"/feed/*": {"fallback": {"stale": {"max_bytes": 0}}}}}}}
    ) == (
        'hosts."api.example.com".routes."/feed/*".fallback.stale.max_bytes: '
        "expected int >= 1, got 0"
    )


def test_a_host_entry_breaking_the_byte_rule_over_the_defaults_is_named():
    """max_entry_bytes valid alone but above the defaults' max_bytes, once merged."""
    assert _error(
        {
            "defaults": {"fallback": {"stale": {"max_bytes": 10_000, "max_entry_bytes": 5_000}}},
            "hosts": {HOST: {"fallback": {"stale": {"max_entry_bytes": 20_000}}}},
        }
    ) == (
        'hosts."api.example.com".fallback.stale.max_entry_bytes: must be <= max_bytes '
        "(10000), got 20000"
    )


def test_the_schema_checks_the_section():
    """The shipped schema admits the section under defaults, hosts and routes, and refuses an
    unknown key and an out-of-range value as loading does."""
    good = {
        "defaults": {"fallback": {"stale": {"enabled": True, "max_stale": 30}}},
        "hosts": {HOST: {"routes": {"/a/*": {"fallback": {"stale": {"enabled": False}}}}}},
    }
    assert list(VALIDATOR.iter_errors(good)) == []
    bad = [
        {"defaults": {"fallback": {"stale": {"max_stale": -1}}}},
        {"defaults": {"fallback": {"stale": {"max_bytes": 0}}}},
        {"defaults": {"fallback": {"stale": {"nope": 1}}}},
        {"defaults": {"fallback": {"nope": {}}}},
    ]
    assert [VALIDATOR.is_valid(document) for document in bad] == [False] * 4
