"""Loading and validating configuration, host matching, and the shipped files."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import msgspec
import pytest
import yaml

from resilient_session import ConfigError, ResilientSession
from resilient_session.config import ENV_VAR, Config, load, schema
from resilient_session.config.policy import HostPolicy

ROOT = Path(__file__).resolve().parents[3]


def test_none_gives_builtin_defaults(monkeypatch):
    """With no source and no environment variable, the built-in defaults apply."""
    monkeypatch.delenv(ENV_VAR, raising=False)
    config = load(None)
    policy = config.for_host("any.test", 443)
    assert (policy.retry.max_attempts, policy.budget.ratio, policy.breaker.failure_threshold) == (
        4,
        0.2,
        20,
    )
    assert (policy.timeout.connect, policy.timeout.read, policy.deadline.header) == (
        5.0,
        30.0,
        "X-Request-Timeout-Ms",
    )


def test_environment_variable_names_the_file(monkeypatch, tmp_path):
    """RESILIENT_SESSION_CONFIG points ResilientSession() at a YAML file."""
    path = tmp_path / "rs.yaml"
    path.write_text("defaults: {retry: {max_attempts: 2}}\n")
    monkeypatch.setenv(ENV_VAR, str(path))
    assert ResilientSession().config.for_host("a.test", 80).retry.max_attempts == 2


def test_yaml_file_and_dict_agree(tmp_path):
    """A YAML file and the same mapping load to equal configurations."""
    data = {
        "defaults": {"budget": {"ratio": 0.1}},
        "hosts": {"a.test": {"retry": {"max_attempts": 2}}},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    assert load(path).rules == load(data).rules
    assert load(path).defaults == load(data).defaults


def test_host_entry_merges_over_defaults_key_by_key():
    """A host entry changes only the keys it names; the rest come from defaults."""
    config = load(
        {
            "defaults": {"retry": {"max_attempts": 6, "backoff_base": 0.2}},
            "hosts": {"api.test": {"retry": {"max_attempts": 2}}},
        }
    )
    retry = config.for_host("api.test", 443).retry
    assert (retry.max_attempts, retry.backoff_base, retry.backoff_cap) == (2, 0.2, 8.0)
    assert config.for_host("other.test", 443).retry.max_attempts == 6


@pytest.mark.parametrize(
    ("host", "port", "expected"),
    [
        ("api.example.com", 8443, 1),  # exact host:port beats exact host
        ("api.example.com", 443, 2),  # exact host
        ("a.b.internal.example", 8443, 3),  # the longer wildcard wins
        ("x.internal.example", 8443, 3),
        ("x.internal.example", 80, 5),  # wildcard without port
        ("other.test", 80, 4),  # defaults
    ],
)
def test_most_specific_match_wins(host, port, expected):
    """Exact host:port, then exact host, then wildcards longest first, then defaults."""
    config = load(
        {
            "defaults": {"retry": {"max_attempts": 4}},
            "hosts": {
                "*.internal.example": {"retry": {"max_attempts": 5}},
                "*.internal.example:8443": {"retry": {"max_attempts": 3}},
                "api.example.com": {"retry": {"max_attempts": 2}},
                "API.example.com:8443": {"retry": {"max_attempts": 1}},
                "*": {},
            },
        }
    )
    # The catch-all "*" entry merges nothing over defaults, so it still gives 4.
    assert config.for_host(host, port).retry.max_attempts == expected


def test_ipv6_host_patterns():
    """IPv6 hosts match with or without brackets and port."""
    config = load(
        {
            "hosts": {
                "[::1]:8080": {"retry": {"max_attempts": 1}},
                "::1": {"retry": {"max_attempts": 2}},
            }
        }
    )
    assert config.for_host("::1", 8080).retry.max_attempts == 1
    assert config.for_host("::1", 9090).retry.max_attempts == 2


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"defaults": {"breaker": {"failure_threshold": 0}}},
            "defaults.breaker.failure_threshold: expected int >= 1, got 0",
        ),
        (
            {"hosts": {"api.example.com": {"breaker": {"failure_threshold": 0}}}},
            'hosts."api.example.com".breaker.failure_threshold: expected int >= 1, got 0',
        ),
        (
            {"defaults": {"retry": {"max_attempts": "3"}}},
            "defaults.retry.max_attempts: expected int, got str '3'",
        ),
        (
            {"defaults": {"retry": {"max_attempts": True}}},
            "defaults.retry.max_attempts: expected int, got bool True",
        ),
        (
            {"defaults": {"retry": {"backoff_base": 2, "backoff_cap": 1}}},
            "defaults.retry.backoff_cap: must be >= backoff_base (2.0), got 1.0",
        ),
        (
            {"hosts": {"a.test": {"breaker": {"recovery_timeout": 100}}}},
            'hosts."a.test".breaker.recovery_timeout_max: '
            "must be >= recovery_timeout (100.0), got 60.0",
        ),
        ({"defaults": {"retyr": {}}}, "defaults.retyr: unknown key"),
        ({"hosts": {"a.test": {"retry": {"bogus": 1}}}}, 'hosts."a.test".retry.bogus: unknown key'),
        ({"surprise": 1}, "surprise: unknown key"),
        (
            {"defaults": {"budget": {"ratio": 1.5}}},
            "defaults.budget.ratio: expected float <= 1.0, got 1.5",
        ),
        (
            {"defaults": {"budget": {"max_tokens": 0}}},
            "defaults.budget.max_tokens: expected float >= 1.0, got 0",
        ),
        (
            {"defaults": {"deadline": {"default": 0}}},
            "defaults.deadline.default: expected float > 0.0, got 0",
        ),
        (
            {"defaults": {"timeout": {"read": -1}}},
            "defaults.timeout.read: expected float > 0.0, got -1",
        ),
        (
            {"defaults": {"retry": {"transient_statuses": [500, 700]}}},
            "defaults.retry.transient_statuses[1]: expected int <= 599, got 700",
        ),
        (
            {"defaults": {"retry": {"transient_statuses": [503]}}},
            "defaults.retry.overload_statuses: [503] also listed in transient_statuses",
        ),
        ({"defaults": {"retry": 5}}, "defaults.retry: expected object, got int 5"),
        ({"hosts": {"a.test": 3}}, 'hosts."a.test": expected a mapping of sections'),
        ({"hosts": ["a.test"]}, "hosts: expected object, got array ['a.test']"),
        ({"hosts": {"http://a.test/": {}}}, 'hosts."http://a.test/": bad host pattern'),
        ({"hosts": {"a.test:99999": {}}}, 'hosts."a.test:99999": port must be 1..65535, got 99999'),
        ({"hosts": {"a.test:x1": {}}}, 'hosts."a.test:x1": bad port'),
        ({"hosts": {"[a.test": {}}}, 'hosts."[a.test": bad host pattern'),
        ({"hosts": {"": {}}}, 'hosts."": host pattern must be a non-empty string'),
        ({"registry": {"max_hosts": 0}}, "registry.max_hosts: expected int >= 1, got 0"),
        (
            {"defaults": {"limit": {"initial_burst": 0}}},
            "defaults.limit.initial_burst: expected int >= 1, got 0",
        ),
        (
            {"hosts": {"a.test": {"limit": {"initial_burst": 100_001}}}},
            'hosts."a.test".limit.initial_burst: expected int <= 100000, got 100001',
        ),
        (
            {"defaults": {"limit": {"initial_burst": 64.5}}},
            "defaults.limit.initial_burst: expected int, got float 64.5",
        ),
    ],
)
def test_bad_values_name_the_key_and_value(data, message):
    """Every kind of bad input raises ConfigError whose message names the path and value."""
    with pytest.raises(ConfigError) as raised:
        load(data)
    assert str(raised.value).startswith(message)
    assert isinstance(raised.value, ValueError)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "config file is empty"),
        ("# only a comment\n", "config file is empty"),
        ("- a\n- b\n", r"config must be a mapping with defaults:/hosts:, got list"),
        ("just text\n", r"config must be a mapping with defaults:/hosts:, got str"),
        ("defaults: {retry: [\n", "not valid YAML"),
        ("defaults: !!python/object:os.system {}\n", "not valid YAML"),
    ],
)
def test_bad_files(tmp_path, text, message):
    """Empty, non-mapping, malformed or unsafe YAML each give one clear ConfigError."""
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load(path)


def test_unreadable_file_names_the_path(tmp_path):
    """A missing file is a ConfigError naming the path, not a bare OSError."""
    path = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError, match=r"missing\.yaml: cannot read config file"):
        load(path)


def test_session_construction_raises_config_error():
    """ConfigError is raised when the session is built, not at the first call."""
    with pytest.raises(ConfigError, match=r"defaults\.retry\.max_attempts"):
        ResilientSession({"defaults": {"retry": {"max_attempts": 0}}})


def test_default_yaml_lists_exactly_the_builtin_defaults():
    """config/default.yaml loads to the built-in defaults and names every key the models have."""
    path = ROOT / "config" / "default.yaml"
    loaded = load(path)
    assert loaded.defaults == HostPolicy()
    assert (loaded.registry, loaded.events, loaded.inbound) == (
        Config().registry,
        Config().events,
        Config().inbound,
    )
    written = yaml.safe_load(path.read_text())
    for section, values in msgspec.to_builtins(HostPolicy()).items():
        assert set(written["defaults"][section]) == set(values), section
    assert set(written["inbound"]) == set(msgspec.to_builtins(Config().inbound))


def test_example_yaml_loads():
    """config/example.yaml is valid and its overrides take effect."""
    config = load(ROOT / "config" / "example.yaml")
    assert config.for_host("payments.example.com", 443).deadline.default == 3.0
    assert config.for_host("db.internal.example", 8443).retry.max_attempts == 2


def test_shipped_schema_is_current():
    """docs/config.schema.json equals the schema from the models (scripts/config-schema)."""
    shipped = json.loads((ROOT / "docs" / "config.schema.json").read_text())
    assert shipped == json.loads(json.dumps(schema()))


@pytest.mark.parametrize("name", ["default.yaml", "example.yaml"])
def test_shipped_files_validate_against_schema(name):
    """The shipped YAML files pass the shipped JSON Schema, as an editor would check them."""
    jsonschema.validate(yaml.safe_load((ROOT / "config" / name).read_text()), schema())


def test_schema_rejects_what_load_rejects():
    """An unknown key and an out-of-range value fail the JSON Schema too."""
    bad_documents: list[dict[str, object]] = [
        {"defaults": {"retry": {"max_attempts": 0}}},
        {"defaults": {"nope": {}}},
    ]
    for bad in bad_documents:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema())


def test_config_pickles():
    """A loaded Config survives pickling unchanged."""
    import pickle

    config = load(ROOT / "config" / "example.yaml")
    assert pickle.loads(pickle.dumps(config)) == config  # noqa: S301 - our own bytes


# -- every error at once -------------------------------------------------------------------------


def test_every_error_is_reported_in_one_go(tmp_path):
    """Four typos and two bad values in one file: one ConfigError, one line each."""
    path = tmp_path / "typos.yaml"
    path.write_text(
        "defaults:\n"
        "  retry: {max_atempts: 2, backoff_base: -1}\n"
        "  breakr: {}\n"
        "hosts:\n"
        '  "a.test": {budget: {ratoi: 0.1, max_tokens: 0}}\n'
        "event: {}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as raised:
        load(path)
    assert str(raised.value).splitlines() == [
        f"{path}: 6 errors:",
        "  event: unknown key (did you mean events?)",
        "  defaults.retry.max_atempts: unknown key (did you mean max_attempts?)",
        "  defaults.retry.backoff_base: expected float > 0.0, got -1",
        "  defaults.breakr: unknown key (did you mean breaker?)",
        '  hosts."a.test".budget.ratoi: unknown key (did you mean ratio?)',
        '  hosts."a.test".budget.max_tokens: expected float >= 1.0, got 0',
    ]


def test_the_report_stops_at_fifty_errors():
    """A thousand unknown keys: fifty lines, then how many more."""
    with pytest.raises(ConfigError) as raised:
        load({"defaults": {"retry": {f"k{n}": 1 for n in range(1000)}}})
    lines = str(raised.value).splitlines()
    assert lines[0] == "1000 errors:"
    assert lines[1] == "  defaults.retry.k0: unknown key"
    assert len(lines) == 52
    assert lines[-1] == "  ... and 950 more"


# -- every number finite and bounded -------------------------------------------------------------

DAY = "86400.0"


@pytest.mark.parametrize(
    ("section", "key", "value", "says"),
    [
        ("deadline", "default", float("inf"), f"expected float <= {DAY}, got inf"),
        ("deadline", "default", float("nan"), "expected float > 0.0, got nan"),
        ("timeout", "connect", 1e300, f"expected float <= {DAY}, got 1e+300"),
        ("timeout", "read", float("inf"), f"expected float <= {DAY}, got inf"),
        ("retry", "backoff_base", 10**30, f"expected float <= {DAY}, got {10**30}"),
        ("retry", "retry_after_cap", float("inf"), f"expected float <= {DAY}, got inf"),
        ("retry", "max_attempts", 101, "expected int <= 100, got 101"),
        ("breaker", "window", 2**63, f"expected int <= 10000, got {2**63}"),
        ("breaker", "recovery_timeout_max", float("inf"), f"expected float <= {DAY}, got inf"),
        ("breaker", "minimum_calls", 10_001, "expected int <= 10000, got 10001"),
        ("breaker", "failure_threshold", 10**6 + 1, "expected int <= 1000000, got 1000001"),
        ("breaker", "half_open_max_calls", 1_001, "expected int <= 1000, got 1001"),
        ("budget", "max_tokens", float("inf"), "expected float <= 100000.0, got inf"),
        ("budget", "min_per_second", 1e9, "expected float <= 10000.0, got 1000000000.0"),
        ("budget", "ratio", float("nan"), "expected float >= 0.0, got nan"),
    ],
)
def test_every_number_is_finite_and_bounded(section, key, value, says):
    """Infinite, NaN and huge numbers are refused with the key's range."""
    with pytest.raises(ConfigError) as raised:
        load({"defaults": {section: {key: value}}})
    assert str(raised.value) == f"defaults.{section}.{key}: {says}"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (0, "expected int >= 1, got 0"),
        (-1, "expected int >= 1, got -1"),
        (2**53 + 1, f"expected int <= {2**53}, got {2**53 + 1}"),
        (1.5, "expected int | null, got float 1.5"),
        (True, "expected int | null, got bool True"),
        ("1MB", "expected int | null, got str '1MB'"),
        ([1], "expected int | null, got array [1]"),
    ],
)
@pytest.mark.parametrize("where", ["defaults", 'hosts."a.test"'])
def test_max_response_bytes_is_a_positive_int_or_null(value, says, where):
    """A cap that is not a whole number of bytes >= 1 (or null) is refused, naming the key, in
    the defaults and in a host entry alike."""
    section = {"retry": {"max_response_bytes": value}}
    data = {"defaults": section} if where == "defaults" else {"hosts": {"a.test": section}}
    with pytest.raises(ConfigError) as raised:
        load(data)
    assert str(raised.value) == f"{where}.retry.max_response_bytes: {says}"


def test_max_response_bytes_defaults_to_null_and_merges_per_host():
    """No cap unless configured; a host entry sets or lifts it over the defaults, key by key."""
    config = load(
        {
            "defaults": {"retry": {"max_response_bytes": 1024, "max_attempts": 2}},
            "hosts": {"big.test": {"retry": {"max_response_bytes": None}}, "*.test": {}},
        }
    )
    assert load({}).defaults.retry.max_response_bytes is None
    assert config.for_host("big.test", 80).retry.max_response_bytes is None
    assert config.for_host("big.test", 80).retry.max_attempts == 2
    assert config.for_host("small.test", 80).retry.max_response_bytes == 1024
    assert (
        load(
            {"defaults": {"retry": {"max_response_bytes": 2**53}}}
        ).defaults.retry.max_response_bytes
        == 2**53
    )


def test_registry_max_hosts_is_bounded():
    """max_hosts stops at a million."""
    with pytest.raises(ConfigError) as raised:
        load({"registry": {"max_hosts": 1_000_001}})
    assert str(raised.value) == "registry.max_hosts: expected int <= 1000000, got 1000001"


def test_largest_values_in_range_load():
    """The top of every range is accepted: a day of deadline, 100 attempts, and so on."""
    policy = load(
        {
            "defaults": {
                "retry": {"max_attempts": 100, "backoff_base": 86400, "backoff_cap": 86400},
                "deadline": {"default": 86400},
                "breaker": {"window": 10_000, "minimum_calls": 10_000},
                "budget": {"max_tokens": 100_000, "min_per_second": 10_000},
            }
        }
    ).defaults
    assert (policy.retry.max_attempts, policy.deadline.default, policy.breaker.window) == (
        100,
        86400.0,
        10_000,
    )


# -- header names --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "Host",
        "content-length",
        "Transfer-Encoding",
        "Connection",
        "Keep-Alive",
        "TE",
        "Trailer",
        "Upgrade",
        "Proxy-Connection",
        "Proxy-Authorization",
        "Proxy-Authenticate",
        "AUTHORIZATION",
        "Cookie",
        "Set-Cookie",
        "Expect",
    ],
)
def test_deadline_header_refuses_framing_hop_and_credential_headers(name):
    """The millisecond count must never overwrite a header that frames or authorises."""
    with pytest.raises(ConfigError) as raised:
        load({"hosts": {"a.test": {"deadline": {"header": name}}}})
    assert str(raised.value) == (
        f'hosts."a.test".deadline.header: {name!r} is a framing, hop-by-hop or credential '
        "header, which the library must not overwrite"
    )


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("X-A\r\nX-B", r"'X-A\r\nX-B'"),
        ("X-Deadline:", "'X-Deadline:'"),
        ("X-Délai", "'X-Délai'"),
        ("X A", "'X A'"),
        ("", "''"),
    ],
)
def test_deadline_header_must_be_a_token(name, shown):
    """A header name with CR/LF, a colon, a space or non-ASCII would fail every call."""
    with pytest.raises(ConfigError) as raised:
        load({"defaults": {"deadline": {"header": name}}})
    message = str(raised.value)
    assert message.startswith("defaults.deadline.header: expected str ")
    assert message.endswith(f", got {shown}")


def test_deadline_header_accepts_a_token_or_null():
    """Any other token is fine, as is null (no header)."""
    config = load(
        {
            "defaults": {"deadline": {"header": "X-Budget_ms.v2"}},
            "hosts": {"a": {"deadline": {"header": None}}},
        }
    )
    assert config.defaults.deadline.header == "X-Budget_ms.v2"
    assert config.for_host("a", 80).deadline.header is None


# -- key paths printed safely --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"defaults": {"": 1}}, 'defaults."": unknown key'),
        ({"defaults": {'a"b': 1}}, r'defaults."a\"b": unknown key'),
        ({"defaults": {"a\x1b[31mb": 1}}, r'defaults."a\x1b[31mb": unknown key'),
        ({"defaults": {"x\u202ey": 1}}, r'defaults."x\u202ey": unknown key'),
        ({"defaults": {"retry": {3: 1}}}, "defaults.retry: a key must be a string, got int 3"),
        ({"defaults": {None: 1}}, "defaults: a key must be a string, got NoneType None"),
        ({1.5: 1}, "<config>: a key must be a string, got float 1.5"),
        ({"hosts": {7: {}}}, "hosts: a host pattern must be a string, got int 7"),
        ({"hosts": {"a\nb": {}}}, r'hosts."a\x0ab": bad host pattern'),
    ],
)
def test_key_paths_are_printed_safely(data, message):
    """Empty, quoted, control and non-string keys are named by path, escaped, never raw."""
    with pytest.raises(ConfigError) as raised:
        load(data)
    assert str(raised.value).startswith(message)
    assert "\x1b" not in str(raised.value)
    assert "\u202e" not in str(raised.value)
