"""Routes under a host entry: their patterns, the order paths are tried in, their policies
merged key by key over the host's, and the errors that name a bad key."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from resilient_session import ConfigError
from resilient_session.config import load
from resilient_session.config.route import MAX_ROUTES, Route, path_of, route_for

ROOT = Path(__file__).resolve().parents[3]
VALIDATOR = jsonschema.Draft202012Validator(
    json.loads((ROOT / "docs" / "config.schema.json").read_text(encoding="utf-8"))
)
HOST = "api.example.com"


def _routes(*patterns: str) -> tuple[Route, ...]:
    return load({"hosts": {HOST: {"routes": {p: {} for p in patterns}}}}).routes_for(HOST, 443)


def _error(document: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        load(document)
    return str(caught.value)


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/v1/payments/42", "/v1/payments/*"),
        ("/v1/payments", "/v1/payments/*"),  # a pattern ending in /* names the path above it
        ("/v1/payments/42/refunds", "/v1/payments/*"),
        ("/v1/paymentsx", "/v1/*"),
        ("/v1/search", "/v1/*"),
        ("/v1", "/v1/*"),
        ("/v2/payments/1", "/v?/payments/1"),
        ("/search", "/search"),
        ("/search/", None),
        ("/Search", None),  # paths are case sensitive
        ("/", None),
        ("/other", None),
    ],
)
def test_a_path_finds_the_longest_pattern_that_holds_it(path, route):
    """Patterns are shell-style on the path, tried longest first, whatever their order in
    the file; a path in none finds none."""
    routes = _routes("/v1/*", "/search", "/v1/payments/*", "/v?/payments/1")
    found = route_for(routes, path)
    assert (found.pattern if found is not None else None) == route


def test_routes_are_tried_longest_first_then_by_pattern():
    """The order is the patterns' length, then the patterns themselves: two of one length
    that hold one path always give the same one."""
    routes = _routes("/a/*", "/*/b", "/a/b/*", "/[ab]/*")
    assert [route.pattern for route in routes] == ["/[ab]/*", "/a/b/*", "/*/b", "/a/*"]
    found = route_for(routes, "/a/b")
    assert found is not None
    assert found.pattern == "/[ab]/*"


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("https://api.example.com/v1/x?q=/v1/payments/1#frag", "/v1/x"),
        ("https://api.example.com", "/"),
        ("https://api.example.com?q=/v1/payments/", "/"),
        ("https://api.example.com#/v1/payments/", "/"),
        ("https://api.example.com:8443/a/b/", "/a/b/"),
        ("http://u:p@[::1]:80/a%20b?x", "/a%20b"),
    ],
)
def test_the_path_is_what_precedes_the_query(url, path):
    """A route sees the URL's path as sent, never its query or fragment."""
    assert path_of(url) == path


def test_a_route_overrides_its_hosts_policy_key_by_key():
    """A route keeps every key its entry does not set from its host's entry, and the host's
    entry every key it does not set from the defaults."""
    config = load(
        {
            "defaults": {"retry": {"max_attempts": 5, "backoff_base": 0.2}},
            "hosts": {
                HOST: {
                    "breaker": {"failure_threshold": 3},
                    "retry": {"max_attempts": 2},
                    "routes": {
                        "/search/*": {"breaker": {"recovery_timeout": 2.0}, "limit": {"max": 50}},
                        "/v1/payments/*": {},
                    },
                }
            },
        }
    )
    host = config.for_host(HOST, 443)
    search, payments = (route.policy for route in config.routes_for(HOST, 443)[::-1])
    assert (host.breaker.failure_threshold, host.retry.max_attempts) == (3, 2)
    assert (search.breaker.failure_threshold, search.breaker.recovery_timeout) == (3, 2.0)
    assert (search.retry.max_attempts, search.retry.backoff_base) == (2, 0.2)
    assert (search.limit.max, search.limit.initial) == (50, host.limit.initial)
    assert payments == host
    assert config.routes_for("other.test", 443) == ()
    assert config.routed


def test_a_config_without_routes_is_not_routed():
    """A config with no routes says so, which keeps every call off the routing code."""
    assert not load({"hosts": {HOST: {"retry": {"max_attempts": 2}}}}).routed
    assert not load({}).routed


def test_every_policy_a_call_may_run_under_is_listed():
    """The defaults, each host entry's and each route's policy: what settings that any host
    may use (a cap, hedging) are looked for in."""
    config = load({"hosts": {HOST: {"routes": {"/a": {"hedging": {"enabled": True}}}}}})
    assert [policy.hedging.enabled for policy in config.policies()] == [False, False, True]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            {"hosts": {HOST: {"routes": {"/x/*": {"breaker": {"failure_threshold": 0}}}}}},
            'hosts."api.example.com".routes."/x/*".breaker.failure_threshold: '
            "expected int >= 1, got 0",
        ),
        (
            {"hosts": {HOST: {"routes": {"/x": {"retry": {"backoff_cap": 0.1}}}}}},
            'hosts."api.example.com".routes."/x".retry.backoff_cap: '
            "must be >= backoff_base (0.5), got 0.1",
        ),
        (
            {"hosts": {HOST: {"routes": {"/x": {"brekaer": {}}}}}},
            'hosts."api.example.com".routes."/x".brekaer: unknown key (did you mean breaker?)',
        ),
        (
            {"hosts": {HOST: {"routes": {"/x": {"routes": {}}}}}},
            'hosts."api.example.com".routes."/x".routes: unknown key',
        ),
        (
            {"hosts": {HOST: {"routes": {"search/*": {}}}}},
            'hosts."api.example.com".routes."search/*": bad route pattern: a path from its '
            "leading /, with shell-style wildcards (*, ?, [...]), no scheme, host, query or "
            "spaces",
        ),
        (
            {"hosts": {HOST: {"routes": {"/a b": {}}}}},
            'hosts."api.example.com".routes."/a b": bad route pattern: a path from its '
            "leading /, with shell-style wildcards (*, ?, [...]), no scheme, host, query or "
            "spaces",
        ),
        (
            {"hosts": {HOST: {"routes": ["/x"]}}},
            'hosts."api.example.com".routes: expected a mapping of path patterns to sections, '
            "got list ['/x']",
        ),
        (
            {"hosts": {HOST: {"routes": {"/x": 3}}}},
            'hosts."api.example.com".routes."/x": expected a mapping of sections (retry, '
            "budget, ...), got int 3",
        ),
        (
            {"hosts": {HOST: {"routes": {7: {}}}}},
            'hosts."api.example.com".routes: a route pattern must be a string, got int 7',
        ),
        (
            {"defaults": {"routes": {"/x": {}}}},
            'defaults.routes: routes belong under a host entry: hosts."HOST".routes."/path/*"',
        ),
        (
            {"hosts": {HOST: {"routes": {f"/r{n}": {} for n in range(MAX_ROUTES + 1)}}}},
            f'hosts."api.example.com".routes: at most {MAX_ROUTES} routes a host, '
            f"got {MAX_ROUTES + 1}",
        ),
    ],
)
def test_a_bad_route_is_named_by_its_key_path(document, message):
    """A bad key, value, pattern or shape under routes: raises ConfigError naming its dotted
    path, host and route pattern quoted."""
    assert _error(document) == message


def test_every_route_error_of_a_file_is_reported_once():
    """Errors in a host's own keys and in its routes' come together, each once: a route is
    not merged over a host entry that is in error."""
    message = _error(
        {
            "hosts": {
                HOST: {
                    "retry": {"max_attempts": 0},
                    "routes": {
                        "/a/*": {"retry": {"max_attempts": -1}},
                        "/b/*": {"limit": {"min": 0}},
                        "/c/*": {},
                    },
                }
            }
        }
    )
    assert message.splitlines() == [
        "3 errors:",
        '  hosts."api.example.com".retry.max_attempts: expected int >= 1, got 0',
        '  hosts."api.example.com".routes."/a/*".retry.max_attempts: expected int >= 1, got -1',
        '  hosts."api.example.com".routes."/b/*".limit.min: expected int >= 1, got 0',
    ]


GOOD_ROUTE_KEYS = ["/", "/search/*", "/v1/payments/*", "/v?/[ab]*", "/a%2Fb/*", "/~user/@x:1"]
BAD_ROUTE_KEYS = ["", "search", "https://api.example.com/x", "/a b", "/a#b", "/a\n", "*"]


@pytest.mark.parametrize("key", GOOD_ROUTE_KEYS + BAD_ROUTE_KEYS)
def test_the_schema_and_loading_agree_on_a_route_key(key):
    """The shipped JSON Schema accepts exactly the route keys loading accepts."""
    document = {"hosts": {HOST: {"routes": {key: {"retry": {"max_attempts": 2}}}}}}
    try:
        load(document)
        loads = True
    except ConfigError:
        loads = False
    assert (VALIDATOR.is_valid(document), loads) == ((key in GOOD_ROUTE_KEYS),) * 2


def test_the_schema_checks_a_routes_sections():
    """A route's sections are checked by the schema as a host's are; defaults have no routes."""
    bad = {"hosts": {HOST: {"routes": {"/x": {"breaker": {"failure_threshold": 0}}}}}}
    good = {"hosts": {HOST: {"routes": {"/x": {"breaker": {"failure_threshold": 3}}}}}}
    assert (VALIDATOR.is_valid(bad), VALIDATOR.is_valid(good)) == (False, True)
    assert not VALIDATOR.is_valid({"defaults": {"routes": {"/x": {}}}})


def test_a_config_with_routes_survives_pickling():
    """A pickled session keeps its config: routes, their order and their patterns' matching."""
    config = load(
        {"hosts": {HOST: {"routes": {"/a/*": {}, "/a/b/*": {"retry": {"max_attempts": 1}}}}}}
    )
    again = pickle.loads(pickle.dumps(config))  # noqa: S301 - our own bytes
    assert again == config
    found = route_for(again.routes_for(HOST, 443), "/a/b/c")
    assert found is not None
    assert found.policy.retry.max_attempts == 1


def test_a_hosts_broken_relation_is_not_reported_again_for_its_routes():
    """A host entry whose backoff_cap is below its backoff_base is one error, not one more
    for each route merged over it."""
    message = _error(
        {"hosts": {HOST: {"retry": {"backoff_cap": 0.1}, "routes": {"/a": {}, "/b": {}}}}}
    )
    assert message == (
        'hosts."api.example.com".retry.backoff_cap: must be >= backoff_base (0.5), got 0.1'
    )
