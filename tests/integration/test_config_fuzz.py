"""Fuzzing the loader: nothing but ConfigError comes out, and what loads makes working sessions.

Random YAML text and random near-miss dict configs go to ``load``; whatever it accepts is used
for real calls to a loopback upstream (a healthy 200, and a 503 then a 200), which may fail
only with a ``requests.RequestException``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resilient_session import Config, ConfigError, ResilientSession
from resilient_session.config import load
from resilient_session.config.policy import HostPolicy
from resilient_session.testing.upstream import FlakyUpstream, Reply

pytestmark = pytest.mark.integration

# A few seconds each on a loaded machine; the calls are what costs.
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Each call gets little time: a config may ask for a day of backoff, and the deadline is what
# keeps the test bounded while still going through every stage.
CALL_DEADLINE = 0.2

SECTIONS = {
    name: [field.name for field in msgspec.structs.fields(kind)]
    for name, kind in ((f.name, f.type) for f in msgspec.structs.fields(HostPolicy))
}


def _near_misses(names: list[str]) -> st.SearchStrategy[str]:
    name = st.sampled_from(names)
    return st.one_of(
        name,
        name,
        name.map(lambda text: text[:-1]),
        name.map(str.upper),
        name.map(lambda text: text + "s"),
        st.text(max_size=6),
    )


_numbers = st.one_of(
    st.integers(min_value=0, max_value=12),
    st.floats(min_value=0.001, max_value=5.0),
    st.integers(),
    st.integers(min_value=2**62, max_value=2**70),
    st.floats(),  # inf, nan, 1e308 and subnormals included
)
# The values that once loaded and then broke calls, drawn often.
_extremes = st.sampled_from([0, -1, 1e300, float("inf"), float("-inf"), float("nan"), 2**63])
_numbers = st.one_of(_numbers, _extremes, _extremes)
_strings = st.one_of(
    st.sampled_from(["X-Deadline", "Host", "Cookie", "X-A\r\nB", "a:b", "", "3", "é"]),
    st.text(max_size=12),
)
_leaves = st.one_of(_numbers, _strings, st.booleans(), st.none())
_values = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_statuses = st.lists(st.one_of(st.sampled_from([429, 500, 502, 503, 504]), _numbers), max_size=3)


def _section(name: str) -> st.SearchStrategy[dict[str, Any]]:
    keys = SECTIONS[name]
    value = st.one_of(_numbers, _numbers, _statuses, _values, st.none())
    return st.dictionaries(_near_misses(keys), value, max_size=4)


_policy = st.fixed_dictionaries(
    {}, optional={name: st.one_of(_section(name), _values) for name in SECTIONS}
)
_patterns = st.one_of(
    st.sampled_from(["127.0.0.1", "127.0.0.1:1", "*", "LOCALHOST", "[::1]", "*.test", "a b"]),
    st.text(max_size=10),
)
_configs = st.fixed_dictionaries(
    {},
    optional={
        "defaults": _policy,
        "hosts": st.dictionaries(_patterns, st.one_of(_policy, _values), max_size=3),
        "registry": st.dictionaries(
            _near_misses(["max_hosts"]), st.one_of(_numbers, _values), max_size=2
        ),
        "events": st.dictionaries(
            _near_misses(["redact_params"]), st.one_of(st.lists(_strings), _values), max_size=2
        ),
        "defualts": _values,
    },
)

# One real key with a value from the edges: the wide strategy above rarely gets every other key
# right, and a single wild value in an otherwise valid config is what once broke calls.
_one_key_configs = st.builds(
    lambda place, value: {place[0]: {place[1]: {place[2]: value}}},
    st.sampled_from(
        [("defaults", section, key) for section, keys in SECTIONS.items() for key in keys]
    ),
    st.one_of(_extremes, _numbers, _strings),
)

_YAML_PIECES = [
    "defaults:", "hosts:", "retry:", "max_attempts:", "backoff_base:", "deadline:", "header:",
    "timeout:", "breaker:", "window:", " ", "  ", "\n", "\n  ", "- ", ": ", "{", "}", "[", "]",
    ",", "&a ", "*a", "&b ", "*b", "<<: ", "!!python/object:os.system ", "!!binary ", "? ",
    ".inf", ".nan", "-.inf", "1e400", "0x1F", "9" * 30, "'", '"', "~", "null", "\t", "#", "%",
    "X-Request-Timeout-Ms", "Host", "\x00", "\u202e", "\r\n", "---\n", "...\n",
]  # fmt: skip
_yaml_texts = st.one_of(
    st.lists(st.sampled_from(_YAML_PIECES), max_size=40).map("".join),
    st.text(max_size=60),
)


@pytest.fixture(scope="module")
def upstream() -> Iterator[FlakyUpstream]:
    with FlakyUpstream() as up:
        up.script("/ok", Reply(200, body=b"ok"))
        yield up


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _calls_fail_only_as_requests_errors(config: Config, upstream: FlakyUpstream) -> None:
    upstream.script("/flaky", Reply(503), Reply(200, body=b"ok"))
    with ResilientSession(config) as session:
        # The healthy call runs under the config's own deadline and timeouts: it never waits.
        # The flaky one is bounded, since a config may ask for a day of backoff.
        calls: tuple[Callable[[], requests.Response], ...] = (
            lambda: session.get(upstream.url("/ok")),
            lambda: session.get(upstream.url("/flaky"), deadline=CALL_DEADLINE),
        )
        for call in calls:
            try:
                response = call()
            except requests.RequestException:
                continue
            assert response.status_code in (200, 503)


def _loaded_or_bounded_error(source: Any) -> Config | None:
    """The loaded config, or None after checking the ConfigError's message is short."""
    message = None
    try:
        return load(source)
    except ConfigError as exc:
        message = str(exc)
    # At most 50 lines of at most a few hundred characters each.
    assert 0 < len(message) < 52 * 400
    return None


@FUZZ
@given(data=st.one_of(_configs, _one_key_configs))
def test_random_dict_configs_raise_only_config_error(data, upstream):
    """Any mapping: loaded, or ConfigError; what loads makes calls that fail only as requests do."""
    config = _loaded_or_bounded_error(data)
    if config is not None:
        _calls_fail_only_as_requests_errors(config, upstream)


_counter = itertools.count()


@FUZZ
@given(text=_yaml_texts)
def test_random_yaml_text_raises_only_config_error(text, upstream, workdir):
    """Any text in a file: loaded, or ConfigError; what loads makes working calls."""
    path = workdir / f"c{next(_counter)}.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        config = _loaded_or_bounded_error(path)
    finally:
        path.unlink()
    if config is not None:
        _calls_fail_only_as_requests_errors(config, upstream)


def test_the_fuzzed_calls_reach_the_upstream(upstream):
    """The harness itself works: a default config gets the 200, and the 503 is retried."""
    before = upstream.hits("/flaky")
    _calls_fail_only_as_requests_errors(Config(), upstream)
    assert upstream.hits("/flaky") - before in (1, 2)
